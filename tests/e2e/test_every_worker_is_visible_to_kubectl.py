"""Every worker twc runs is a TemporalWorker object ``kubectl`` lists, whatever its source.

The real daemon runs a fleet-file worker, and a labelled kmsvc Queue object yields a
worker; each gets a generated TemporalWorker (a view) with its status, and a real
temporalio worker started from the Queue worker's Deployment turns it Ready. The view is
never a second source: an edit of its spec is put back (with an Event) and starts no
engine run. Deleting the Queue removes the view and the Deployment; with the daemon
stopped, the real garbage collector of kube-controller-manager still removes a deleted
Queue's view through its owner reference. A worker leaving the fleet file takes its view
along.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import create_queue, fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import Kubectl, conditions
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

VIEW_WRITES = "twc_temporalworker_view_writes_total"


@pytest.fixture
def kubectl(local_env: LocalEnvironment) -> Kubectl:
    return Kubectl(local_env)


def _rows(kubectl: Kubectl, namespace: str) -> dict[str, list[str]]:
    """``kubectl get temporalworkers -A`` rows of ``namespace``, by name."""
    table = kubectl("get", "temporalworkers", "-A")
    header, *lines = table.strip().splitlines()
    assert header.split() == [
        "NAMESPACE",
        "NAME",
        "PHASE",
        "REPLICAS",
        "READY",
        "TASKQUEUE",
        "FROM",
        "AGE",
    ], table
    out: dict[str, list[str]] = {}
    for line in lines:
        cells = line.split()
        if cells[0] == namespace:
            out[cells[1]] = cells
    return out


def _view(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    return kubectl.get_json("temporalworker", name, "-n", namespace)


def test_queue_and_fleet_workers_are_listed_with_status_and_go_with_their_source(
    local_env: LocalEnvironment,
    kube: Any,
    kubectl: Kubectl,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    worker_pods: Any,
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": "static", "namespace": namespace, "taskQueueName": task_queue}],
    )
    fs = daemons.stack(fleet)
    daemon = daemons.start(fs)
    wait_for_success(daemon)
    queue = f"q-{task_queue}"
    create_queue(kube, namespace, queue)
    worker = f"worker-{queue}"

    eventually(
        lambda: kube.get_deployment(namespace, worker),
        timeout=90,
        message="the Queue object never became a worker Deployment",
    )
    pod = worker_pods(namespace, worker)
    assert pod.env["TEMPORAL_TASK_QUEUE"] == queue

    def ready() -> dict[str, list[str]] | None:
        rows = _rows(kubectl, namespace)
        row = rows.get(worker)
        return rows if row is not None and row[2] == "Ready" else None

    rows = eventually(ready, timeout=90, message="the Queue's worker never turned Ready")
    assert rows[worker][2:7] == ["Ready", "1", "1", queue, "Queue"], rows
    # The fleet-file worker is listed too; nothing polls its task queue.
    assert rows["static"][2] == "Pending", rows
    assert rows["static"][5:7] == [task_queue, "Fleet"], rows

    view = _view(kubectl, namespace, worker)
    assert view is not None
    queue_obj = kube.custom.get_namespaced_custom_object(
        "kmsvc.io", "v1", namespace, "queues", queue
    )
    (owner,) = view["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Queue",
        queue,
        queue_obj["metadata"]["uid"],
    )
    assert view["metadata"]["labels"]["twc.temporal.io/derived-from"] == "Queue"
    assert view["metadata"]["labels"]["twc.temporal.io/stack"] == fs.name
    assert view["spec"]["taskQueueName"] == queue
    assert view["spec"]["queueRef"] == {"name": queue, "namespace": namespace}
    assert view["spec"]["image"] == "registry.example/worker:1.4.2"
    conds = conditions(view)
    assert conds["WorkerDeploymentReady"]["status"] == "True", conds
    assert conds["TemporalTaskQueueRegistered"]["reason"] == "PollersRegistered", conds
    assert view["status"]["observedGeneration"] == view["metadata"]["generation"]
    stored = kube.custom.get_namespaced_custom_object(
        "temporal.kmsvc.io", "v1", namespace, "temporalworkers", worker
    )
    managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
    assert "twc-views" in managers, managers
    print(kubectl("get", "temporalworkers", "-n", namespace))

    # Views that say what they should cost no write: not one API call per iteration.
    wait_until_settled(daemon)
    writes = daemon.value(VIEW_WRITES)
    version = view["metadata"]["resourceVersion"]
    wait_for_success(daemon, after=daemon.successes() + 3, timeout=30)
    assert daemon.value(VIEW_WRITES) == writes
    again = _view(kubectl, namespace, worker)
    assert again is not None
    assert again["metadata"]["resourceVersion"] == version

    # A person's edit of the view is put back, with an Event saying where the worker
    # comes from; the desired state did not change, so no engine run starts.
    ups = daemon.ups()
    kubectl(
        "patch",
        "temporalworker",
        worker,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"image": "registry.example/edited:9.9.9", "env": {"X": "1"}}}),
    )
    restored = eventually(
        lambda: (
            (v := _view(kubectl, namespace, worker))
            and v["spec"]["image"] == "registry.example/worker:1.4.2"
            and "env" not in v["spec"]
            and v
        ),
        timeout=30,
        message="the edited view was never put back",
    )
    assert restored["metadata"]["generation"] > view["metadata"]["generation"]
    events = kube.core.list_namespaced_event(namespace).items
    overwritten = [
        e for e in events if e.involved_object.name == worker and e.reason == "ViewOverwritten"
    ]
    assert overwritten, [(e.involved_object.name, e.reason) for e in events]
    assert f"Queue {namespace}/{queue}" in overwritten[0].message
    assert kube.get_deployment(namespace, worker)["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] == ("registry.example/worker:1.4.2")
    wait_until_settled(daemon)
    assert daemon.ups() == ups

    # Deleting the Queue removes the view and the worker's Deployment.
    kubectl("delete", "queues.kmsvc.io", queue, "-n", namespace)
    eventually(
        lambda: _view(kubectl, namespace, worker) is None,
        timeout=60,
        message="the Queue's view outlived the Queue",
    )
    eventually(
        lambda: kube.get_deployment(namespace, worker) is None,
        timeout=90,
        message="deleting the Queue never removed its worker's Deployment",
    )

    # A worker leaving the fleet file takes its view along.
    fs.write({**fleet, "workers": []})
    eventually(
        lambda: _view(kubectl, namespace, "static") is None,
        timeout=90,
        message="the fleet-file worker's view outlived the worker",
    )
    eventually(
        lambda: kube.get_deployment(namespace, "static") is None,
        timeout=90,
        message="the removed fleet-file worker kept its Deployment",
    )
    log = daemon.text()
    assert "deleted TemporalWorker view" in log
    assert "created TemporalWorker view" in log
    assert "not written" not in log, log[-3000:]
    assert "not deleted" not in log, log[-3000:]
    assert daemon.alive()


def test_the_garbage_collector_deletes_a_queues_view_with_the_queue(
    local_env: LocalEnvironment,
    kube: Any,
    kubectl: Kubectl,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address()))
    daemon = daemons.start(fs)
    wait_for_success(daemon)
    queue = f"q-{task_queue}"
    create_queue(kube, namespace, queue)
    worker = f"worker-{queue}"
    eventually(
        lambda: _view(kubectl, namespace, worker),
        timeout=90,
        message="the Queue object never got a TemporalWorker view",
    )
    wait_until_settled(daemon)
    assert daemon.terminate() == 0

    # Only kube-controller-manager is left to act: the owner reference is what counts.
    kubectl("delete", "queues.kmsvc.io", queue, "-n", namespace, "--wait=true")
    eventually(
        lambda: _view(kubectl, namespace, worker) is None,
        timeout=60,
        message="the garbage collector never deleted the view of the deleted Queue",
    )
