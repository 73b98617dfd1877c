"""The twc program on the real engine, API server and Temporal dev server."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pulumi.automation import CommandError

from tests.e2e.conftest import fleet_doc
from tests.helpers import assert_eventually
from twc.connections import CONNECTION_SPEC_HASH_ANNOTATION
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

REVISION = "deployment.kubernetes.io/revision"


def _env(dep: dict[str, Any]) -> dict[str, Any]:
    container = dep["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _annotation(dep: dict[str, Any]) -> str:
    return str(dep["spec"]["template"]["metadata"]["annotations"][CONNECTION_SPEC_HASH_ANNOTATION])


def test_up_deploys_workers_and_the_check_turns_true_once_a_real_worker_polls(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Any,
    worker_pods: Any,
) -> None:
    address = local_env.temporal_address()
    fs = fleet_stack(
        fleet_doc(
            namespace,
            host_port=address,
            queues=[
                {"name": "orders", "namespace": namespace, "partitions": 2, "workerEnabled": True}
            ],
            workers=[{"name": "payments", "namespace": namespace, "taskQueueName": task_queue}],
        )
    )
    result = fs.up()
    assert result.summary.result == "succeeded"

    dep = kube.get_deployment(namespace, "payments")
    env = _env(dep)
    assert env["TEMPORAL_ADDRESS"] == address
    assert env["TEMPORAL_TASK_QUEUE"] == task_queue
    assert env["TEMPORAL_NAMESPACE"] == "default"
    derived = kube.get_deployment(namespace, "worker-orders")
    assert derived["spec"]["replicas"] == 2
    assert _env(derived)["TEMPORAL_TASK_QUEUE"] == "orders"
    sa = kube.core.read_namespaced_service_account("payments", namespace)
    assert sa.automount_service_account_token is False

    status = result.outputs["workers"].value[f"{namespace}/payments"]
    assert status["phase"] == "Pending"
    queue_cond = status["conditions"][1]
    assert (queue_cond["type"], queue_cond["status"], queue_cond["reason"]) == (
        "TemporalTaskQueueRegistered",
        "False",
        "WaitingForPollers",
    )

    # A real temporalio worker configured only from the Deployment's env polls...
    worker_pods(namespace, "payments")

    def check_true() -> bool:
        fs.refresh()
        cond = fs.resource_outputs("payments-check")["condition"]
        return bool(cond["status"] == "True")

    assert_eventually(
        check_true, timeout=60, interval=1, message="TaskQueueCheck never turned True"
    )
    # ...and the next `up` publishes Ready.
    again = fs.up()
    status = again.outputs["workers"].value[f"{namespace}/payments"]
    assert status["phase"] == "Ready", status
    assert status["pollers"] >= 1


def test_rotating_the_secret_or_changing_host_port_rolls_exactly_the_connection_workers(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    host, port = local_env.temporal_address().split(":")
    kube.core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "temporal-api-key"}, "stringData": {"api-key": "key-one"}},
    )
    api_key = {"apiKeySecretRef": {"name": "temporal-api-key", "key": "api-key"}}
    workers = [
        {"name": "alpha", "namespace": namespace, "taskQueueName": "tq-alpha"},
        {"name": "beta", "namespace": namespace, "taskQueueName": "tq-beta"},
    ]
    fleet = fleet_doc(namespace, host_port=f"{host}:{port}", workers=workers, connection=api_key)
    # A worker on a connection of its own must not roll.
    fleet["connections"] = [{"name": "other", "namespace": namespace, "hostPort": f"{host}:{port}"}]
    fleet["workers"].append(
        {
            "name": "gamma",
            "namespace": namespace,
            "taskQueueName": "tq-gamma",
            "connectionRef": {"name": "other"},
        }
    )
    fs = fleet_stack(fleet)
    assert fs.up().summary.result == "succeeded"
    before = {w: kube.get_deployment(namespace, w) for w in ("alpha", "beta", "gamma")}
    env = _env(before["alpha"])
    assert env["TEMPORAL_API_KEY"] == {
        "secretKeyRef": {"name": "temporal-api-key", "key": "api-key"}
    }

    # Rotate the API key: the fingerprint and both workers using it roll, nothing else.
    kube.core.patch_namespaced_secret(
        "temporal-api-key", namespace, {"data": {"api-key": base64.b64encode(b"key-two").decode()}}
    )
    preview = fs.preview()
    assert preview.change_summary.get("update", 0) >= 3
    assert fs.up().summary.result == "succeeded"
    changed = fs.changed()
    assert {n for n, op in changed.items() if op == "update"} == {
        "local-fingerprint",
        f"{namespace}/alpha-deployment",
        f"{namespace}/beta-deployment",
        f"{namespace}/alpha-check",
        f"{namespace}/beta-check",
    }, changed
    after = {w: kube.get_deployment(namespace, w) for w in ("alpha", "beta", "gamma")}
    for w in ("alpha", "beta"):
        assert _annotation(after[w]) != _annotation(before[w])
        assert after[w]["metadata"]["annotations"][REVISION] == "2"
    assert _annotation(after["gamma"]) == _annotation(before["gamma"])
    assert after["gamma"]["metadata"]["annotations"][REVISION] == "1"

    # Change the hostPort (same server, another name for it): the same two roll.
    fleet["clusterConnections"][0]["hostPort"] = f"localhost:{port}"
    fs.write(fleet)
    assert fs.up().summary.result == "succeeded"
    rolled = {w: kube.get_deployment(namespace, w) for w in ("alpha", "beta", "gamma")}
    assert _env(rolled["alpha"])["TEMPORAL_ADDRESS"] == f"localhost:{port}"
    assert rolled["alpha"]["metadata"]["annotations"][REVISION] == "3"
    assert rolled["gamma"]["metadata"]["annotations"][REVISION] == "1"


def test_removing_a_connection_still_referenced_is_refused_and_changes_nothing(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": "alpha", "namespace": namespace, "taskQueueName": "tq-alpha"}],
    )
    fleet["connections"] = [{"name": "spare", "namespace": namespace, "hostPort": "10.1.2.3:7233"}]
    fs = fleet_stack(fleet)
    assert fs.up().summary.result == "succeeded"
    version = kube.get_deployment(namespace, "alpha")["metadata"]["resourceVersion"]

    broken = dict(fleet, clusterConnections=[])
    fs.write(broken)
    with pytest.raises(CommandError) as err:
        fs.preview()
    assert "defaults.connectionRef" in str(err.value)
    with pytest.raises(CommandError):
        fs.up()
    assert kube.get_deployment(namespace, "alpha")["metadata"]["resourceVersion"] == version

    # Moving the worker to another connection leaves the old one removable.
    moved = dict(fleet, clusterConnections=[])
    moved["workers"] = [
        {
            "name": "alpha",
            "namespace": namespace,
            "taskQueueName": "tq-alpha",
            "connectionRef": {"name": "spare"},
        }
    ]
    moved["defaults"] = {k: v for k, v in fleet["defaults"].items() if k != "connectionRef"}
    fs.write(moved)
    assert fs.up().summary.result == "succeeded"
    assert _env(kube.get_deployment(namespace, "alpha"))["TEMPORAL_ADDRESS"] == "10.1.2.3:7233"


def test_deleting_a_queue_removes_its_worker(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    queue = {"name": "events", "namespace": namespace, "workerEnabled": True}
    fleet = fleet_doc(namespace, host_port=local_env.temporal_address(), queues=[queue])
    fs = fleet_stack(fleet)
    assert fs.up().summary.result == "succeeded"
    assert kube.get_deployment(namespace, "worker-events") is not None

    fs.write(dict(fleet, queues=[]))
    assert fs.up().summary.result == "succeeded"
    assert kube.get_deployment(namespace, "worker-events") is None
    assert "worker-events" not in [
        s.metadata.name for s in kube.core.list_namespaced_service_account(namespace).items
    ]


def test_temporal_down_during_up_gives_a_false_condition_and_a_successful_up(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": "alpha", "namespace": namespace, "taskQueueName": "tq-alpha"}],
    )
    fs = fleet_stack(fleet)
    local_env.stop_component("temporal")
    try:
        result = fs.up()
    finally:
        local_env.up(progress=lambda m: None)
    assert result.summary.result == "succeeded"
    status = result.outputs["workers"].value[f"{namespace}/alpha"]
    cond = status["conditions"][1]
    assert (cond["status"], cond["reason"]) == ("False", "TemporalUnavailable")
    assert kube.get_deployment(namespace, "alpha") is not None


def test_destroy_leaves_nothing_behind(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[
            {
                "name": "alpha",
                "namespace": namespace,
                "taskQueueName": "tq-alpha",
                "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "targetBacklogPerReplica": 5},
                "dlq": {"enabled": True},
            }
        ],
    )
    fs = fleet_stack(fleet)
    assert fs.up().summary.result == "succeeded"
    selector = "app.kubernetes.io/managed-by=twc"
    assert kube.apps.list_namespaced_deployment(namespace, label_selector=selector).items
    assert kube.apps.list_namespaced_stateful_set(namespace, label_selector=selector).items
    assert kube.policy.list_namespaced_pod_disruption_budget(
        namespace, label_selector=selector
    ).items

    assert fs.destroy().summary.result == "succeeded"
    for lister in (
        kube.apps.list_namespaced_deployment,
        kube.apps.list_namespaced_stateful_set,
        kube.policy.list_namespaced_pod_disruption_budget,
        kube.core.list_namespaced_service_account,
        kube.core.list_namespaced_service,
    ):
        left = [o.metadata.name for o in lister(namespace).items if o.metadata.name != "default"]
        assert left == [], (lister.__name__, left)
    # ReplicaSets go with their Deployment (the simulated garbage collector).
    assert_eventually(
        lambda: not kube.apps.list_namespaced_replica_set(namespace).items, timeout=15
    )
