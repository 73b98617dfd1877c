"""Kubernetes-native mode: `kubectl apply` a TemporalWorker, get a worker.

The daemon runs as a real process; kubectl is the real one. A worker process started
from the Deployment's own env (the ``worker_pods`` fixture) makes the task queue's
pollers real, and the status on the object must say so without another ``up``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from tests.e2e.native import (
    Kubectl,
    cluster_connection,
    conditions,
    object_ref,
    temporal_worker,
)
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e


@pytest.fixture
def kubectl(local_env: LocalEnvironment) -> Kubectl:
    return Kubectl(local_env)


def test_a_kubectl_applied_worker_turns_ready_once_a_real_worker_polls(
    local_env: LocalEnvironment,
    kube: Any,
    kubectl: Kubectl,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    worker_pods: Any,
) -> None:
    address = local_env.temporal_address()
    conn = f"cc-{uuid.uuid4().hex[:6]}"
    fs = daemons.stack(fleet_doc(namespace, host_port=address))
    daemon = daemons.start(fs)
    wait_for_success(daemon)

    started = time.monotonic()
    kubectl.apply(
        cluster_connection(conn, address),
        temporal_worker(namespace, "orders", task_queue, object_ref("ClusterConnection", conn)),
        # An unregistered kind: rejected alone, nothing created for it.
        temporal_worker(namespace, "stray", f"{task_queue}-x", object_ref("NoSuchKind", "x")),
        # Admitted by the CRD, refused by the model (a Deployment name must be a label).
        temporal_worker(
            namespace, "bad.name", f"{task_queue}-y", object_ref("ClusterConnection", conn)
        ),
    )

    eventually(
        lambda: kube.get_deployment(namespace, "orders"),
        timeout=120,
        message="the TemporalWorker never got its Deployment",
    )
    deployed = time.monotonic() - started
    pod = worker_pods(namespace, "orders")
    assert pod.env["TEMPORAL_TASK_QUEUE"] == task_queue

    def ready() -> dict[str, Any] | None:
        obj = kubectl.get_json("temporalworker", "orders", "-n", namespace)
        phase = ((obj or {}).get("status") or {}).get("phase")
        return obj if phase == "Ready" else None

    obj = eventually(ready, timeout=60, message="the worker never turned Ready")
    became_ready = time.monotonic() - started
    conds = conditions(obj)
    assert conds["WorkerDeploymentReady"]["status"] == "True", conds
    assert conds["TemporalTaskQueueRegistered"]["status"] == "True", conds
    assert conds["TemporalTaskQueueRegistered"]["reason"] == "PollersRegistered"
    status = obj["status"]
    assert status["replicas"] == 1
    assert status["readyReplicas"] == 1
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert status["observedConnectionRef"] == {
        "apiGroup": "temporal.io",
        "kind": "ClusterConnection",
        "name": conn,
    }
    table = kubectl("get", "temporalworkers", "-n", namespace)
    header, *rows = table.strip().splitlines()
    assert header.split() == [
        "NAME",
        "PHASE",
        "REPLICAS",
        "READY",
        "TASKQUEUE",
        "FROM",
        "AGE",
    ], table
    row = next(r.split() for r in rows if r.split()[0] == "orders")
    assert row[1:5] == ["Ready", "1", "1", task_queue], table

    # The status is not rewritten while nothing changes: transition times stay put.
    since = conds["TemporalTaskQueueRegistered"]["lastTransitionTime"]
    version = obj["metadata"]["resourceVersion"]
    wait_for_success(daemon, after=daemon.successes() + 3, timeout=30)
    again = kubectl.get_json("temporalworker", "orders", "-n", namespace)
    assert again is not None
    assert conditions(again)["TemporalTaskQueueRegistered"]["lastTransitionTime"] == since
    assert again["metadata"]["resourceVersion"] == version

    # The unknown kind: status says why, no Deployment, an Event, and the rest untouched.
    stray = eventually(
        lambda: (
            (s := kubectl.get_json("temporalworker", "stray", "-n", namespace))
            and (s.get("status") or {}).get("phase") == "Failed"
            and s
        ),
        timeout=30,
        message="the stray worker never got a Failed status",
    )
    for cond in conditions(stray).values():
        assert cond["status"] == "False", cond
        assert cond["reason"] == "UnknownConnectionKind", cond
    assert kube.get_deployment(namespace, "stray") is None
    events = kube.core.list_namespaced_event(namespace).items
    assert any(
        e.involved_object.name == "stray" and e.reason == "UnknownConnectionKind" for e in events
    ), [(e.involved_object.name, e.reason) for e in events]
    invalid = eventually(
        lambda: (
            (s := kubectl.get_json("temporalworker", "bad.name", "-n", namespace))
            and (s.get("status") or {}).get("phase") == "Failed"
            and s
        ),
        timeout=30,
        message="the invalid worker never got a Failed status",
    )
    assert {c["reason"] for c in conditions(invalid).values()} == {"InvalidSpec"}
    assert "DNS-1123 label" in conditions(invalid)["WorkerDeploymentReady"]["message"]
    assert kube.get_deployment(namespace, "bad.name") is None
    assert daemon.value("twc_invalid_native_objects", kind="TemporalWorker") == 2
    cc = kubectl.get_json("clusterconnection", conn)
    assert cc is not None
    assert "temporal.io/delete-protection" in cc["metadata"]["finalizers"]
    print(f"deployment after {deployed:.1f} s, Ready after {became_ready:.1f} s")

    # Deleting the TemporalWorker removes its Deployment and releases the connection.
    kubectl("delete", "temporalworker", "orders", "-n", namespace)
    eventually(
        lambda: kube.get_deployment(namespace, "orders") is None,
        timeout=90,
        message="deleting the TemporalWorker never removed its Deployment",
    )
    eventually(
        lambda: (
            "temporal.io/delete-protection"
            not in ((kubectl.get_json("clusterconnection", conn) or {}).get("metadata") or {}).get(
                "finalizers", []
            )
        ),
        timeout=30,
        message="the unused ClusterConnection kept its finalizer",
    )
    kubectl("delete", "clusterconnection", conn, "--wait=true", "--timeout=30s")
    assert daemon.alive()
