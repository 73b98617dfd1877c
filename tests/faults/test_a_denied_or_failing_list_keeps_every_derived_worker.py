"""The daemon's Queue and TemporalWorker lists fail — access revoked in RBAC (403), or
the API server failing the list (a conversion webhook nobody answers: 500) — while a
change of the fleet file starts an ``up``. The failed kinds are *unknown*, not empty:
``ClusterObjectsUnknown`` is reported with the kinds and their errors, the ``up``
applies the change and keeps every worker derived from those objects byte for byte,
and once the lists succeed again the fault clears and the stack converges."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import create_queue, fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import object_ref, temporal_worker
from tests.e2e.rbac import daemon_identity
from tests.faults._checks import (
    assert_converged,
    assert_unchanged,
    deployment_bytes,
    fault_state,
    metric,
)
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

FAULT = "ClusterObjectsUnknown"
QUEUES, WORKERS = "Queue.kmsvc.io", "TemporalWorker.temporal.kmsvc.io"
# Watches end after the resync interval and list again: the revoked access is noticed
# within seconds instead of at the default 5 minutes.
SETTINGS = {**FAST, "resync_interval": 3.0}


def _three_derived_workers(kube: Any, namespace: str, task_queue: str) -> None:
    for name in ("orders", "billing"):
        create_queue(kube, namespace, name)
    body = temporal_worker(
        namespace, "native", f"{task_queue}-n", object_ref("ClusterConnection", "local")
    )
    kube.custom.create_namespaced_custom_object(
        "temporal.kmsvc.io", "v1", namespace, "temporalworkers", body
    )
    for name in ("worker-orders", "worker-billing", "native"):
        eventually(
            lambda name=name: kube.get_deployment(namespace, name),
            timeout=120,
            message=f"{name} was never deployed",
        )


def _change_while_unknown(
    local_env: LocalEnvironment, kube: Any, namespace: str, fs: Any, daemon: Any, kinds: set[str]
) -> tuple[float, dict[str, Any]]:
    """Wait for the fault, then add a file worker: the up keeps the unknown kinds' workers."""
    before = deployment_bytes(kube, namespace)
    started = time.monotonic()
    found = eventually(
        lambda: (f := fault_state(daemon, FAULT)) and kinds <= set(f["sources"]) and f,
        timeout=90,
        message=f"{kinds} never reported unknown",
    )
    reported = time.monotonic() - started
    assert metric(daemon, "twc_fault_active", fault=FAULT) == 1
    ups = daemon.ups()
    fs.write(
        fleet_doc(
            namespace,
            host_port=local_env.temporal_address(),
            workers=[{"name": "added", "namespace": namespace, "taskQueueName": "added"}],
        )
    )
    eventually(
        lambda: kube.get_deployment(namespace, "added"),
        timeout=120,
        message="the change was never applied while the lists failed",
    )
    wait_until_settled(daemon)
    assert daemon.ups() > ups
    after = deployment_bytes(kube, namespace)
    assert_unchanged(before, {k: v for k, v in after.items() if k != "added"})
    assert fault_state(daemon, FAULT) is not None
    return reported, found


def test_a_list_denied_by_rbac_keeps_every_derived_worker(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    identity = daemon_identity(local_env, kube, tmp_path, namespace)
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address()))
    fs.env["KUBECONFIG"] = str(identity.kubeconfig)
    fs.env["TWC_CONTROL_NAMESPACE"] = namespace
    daemon = daemons.start(fs, settings=SETTINGS)
    wait_for_success(daemon, timeout=120)
    _three_derived_workers(kube, namespace, task_queue)
    wait_until_settled(daemon)

    # Revoke: no more list or watch of Queue and TemporalWorker objects.
    rules = copy.deepcopy(identity.cluster_role["rules"])
    revoked = [r for r in rules if not {"queues", "temporalworkers"} & set(r["resources"])]
    identity.replace_rules(kube, revoked)
    reported, found = _change_while_unknown(
        local_env, kube, namespace, fs, daemon, {QUEUES, WORKERS}
    )
    assert "403" in found["message"], found

    # Granted again: the lists succeed, the fault clears.
    identity.replace_rules(kube, rules)
    restored = time.monotonic()
    eventually(
        lambda: fault_state(daemon, FAULT) is None,
        timeout=90,
        message="the fault never cleared once access was back",
    )
    cleared = time.monotonic() - restored
    wait_until_settled(daemon)
    assert_converged(
        kube, daemon, fs, namespace, {"worker-orders", "worker-billing", "native", "added"}
    )
    print(
        f"RBAC revoked on Queue and TemporalWorker lists: {FAULT} {reported:.1f} s after the "
        f"revocation; cleared {cleared:.1f} s after access was restored"
    )


def _with_failing_conversion(crd: dict[str, Any]) -> dict[str, Any]:
    """The TemporalWorker CRD with a second version stored, converted by a webhook that
    nobody answers: every list of v1 that holds a v2-stored object fails (500)."""
    body = copy.deepcopy(crd)
    [v1] = body["spec"]["versions"]
    v2 = {**copy.deepcopy(v1), "name": "v2", "storage": True}
    v1["storage"] = False
    body["spec"]["versions"] = [v1, v2]
    body["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:1/convert"},
        },
    }
    return body


def test_a_list_the_api_server_fails_keeps_every_derived_worker(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address()))
    daemon = daemons.start(fs, settings=SETTINGS)
    wait_for_success(daemon, timeout=120)
    _three_derived_workers(kube, namespace, task_queue)
    wait_until_settled(daemon)

    name = "temporalworkers.temporal.kmsvc.io"
    crd = kube.extensions.read_custom_resource_definition(name)
    original = kube.api_client.sanitize_for_serialization(crd)
    failing = _with_failing_conversion(original)
    failing["metadata"] = {"name": name, "resourceVersion": original["metadata"]["resourceVersion"]}
    kube.extensions.replace_custom_resource_definition(name, failing)
    # An object stored as v2: listing v1 now needs the webhook, which refuses.
    stored = temporal_worker(
        namespace, "late", f"{task_queue}-late", object_ref("ClusterConnection", "local")
    )
    stored["apiVersion"] = "temporal.kmsvc.io/v2"

    def create_as_v2() -> bool:
        try:
            kube.custom.create_namespaced_custom_object(
                "temporal.kmsvc.io", "v2", namespace, "temporalworkers", stored
            )
        except ApiException as exc:
            raise AssertionError(exc.status) from exc
        return True

    eventually(create_as_v2, timeout=30, message="the v2 version was never served")
    reported, found = _change_while_unknown(local_env, kube, namespace, fs, daemon, {WORKERS})
    assert "500" in found["message"] or "conversion" in found["message"], found
    assert kube.get_deployment(namespace, "late") is None  # nothing of the kind is created

    # The conversion works again (no webhook): the list succeeds, "late" is deployed.
    current = kube.api_client.sanitize_for_serialization(
        kube.extensions.read_custom_resource_definition(name)
    )
    current["spec"]["conversion"] = {"strategy": "None"}
    kube.extensions.replace_custom_resource_definition(name, current)
    restored = time.monotonic()
    eventually(
        lambda: fault_state(daemon, FAULT) is None,
        timeout=90,
        message="the fault never cleared once the list worked",
    )
    cleared = time.monotonic() - restored
    eventually(
        lambda: kube.get_deployment(namespace, "late"),
        timeout=120,
        message="the object stored during the fault was never deployed",
    )
    wait_until_settled(daemon)
    assert_converged(
        kube,
        daemon,
        fs,
        namespace,
        {"worker-orders", "worker-billing", "native", "added", "late"},
        adopted_worker="late",
    )
    print(
        f"TemporalWorker list failing (conversion webhook down): {FAULT} {reported:.1f} s "
        f"later; cleared {cleared:.1f} s after the conversion was restored"
    )
