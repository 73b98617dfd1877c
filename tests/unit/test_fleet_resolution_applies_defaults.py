"""Resolved workers: defaults applied, derived workers included, references followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.fleet_data import valid_fleet
from twc.errors import SpecError
from twc.spec import (
    ConnectionTarget,
    Fleet,
    ResolvedWorker,
    load_fleet,
    load_fleet_file,
)

ROOT = Path(__file__).resolve().parents[2]


def _by_name(fleet: Fleet) -> dict[str, ResolvedWorker]:
    return {w.name: w for w in fleet.resolved_workers()}


def test_explicit_workers_come_first_then_derived_ones() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")

    names = [(w.name, w.derived, w.source) for w in fleet.resolved_workers()]

    assert names == [
        ("billing", False, "workers[0]"),
        ("reports", False, "workers[1]"),
        ("worker-orders-fifo", True, "queues[0]"),
    ]


def test_a_worker_enabled_queue_derives_a_worker_in_its_namespace() -> None:
    derived = _by_name(load_fleet(valid_fleet(), "f.yaml"))["worker-orders-fifo"]

    assert derived.namespace == "sqs"
    assert derived.task_queue_name == "orders-fifo"
    assert derived.queue is not None
    assert derived.queue.fifo is True
    assert derived.image == "registry.example/worker:1.4.2"
    assert derived.connection == ConnectionTarget(
        api_group="temporal.io", kind="ClusterConnection", name="prod", namespace="sqs"
    )
    assert derived.connection_source == "defaults.connectionRef.objectRef"


def test_derived_replicas_come_from_partitions_over_defaults() -> None:
    derived = _by_name(load_fleet(valid_fleet(), "f.yaml"))["worker-orders-fifo"]

    assert derived.replicas == 6


def test_derived_replicas_fall_back_to_defaults_without_partitions() -> None:
    data = valid_fleet()
    data["queues"][0].pop("partitions")
    data["defaults"]["replicas"] = 3

    assert _by_name(load_fleet(data, "f.yaml"))["worker-orders-fifo"].replicas == 3


def test_a_queue_served_by_an_explicit_worker_derives_nothing() -> None:
    data = valid_fleet()
    data["workers"].append(
        {"name": "fifo", "namespace": "sqs", "queueRef": {"name": "orders-fifo"}, "replicas": 2}
    )

    workers = _by_name(load_fleet(data, "f.yaml"))

    assert "worker-orders-fifo" not in workers
    assert workers["fifo"].replicas == 2
    assert workers["fifo"].task_queue_name == "orders-fifo"


def test_an_explicit_worker_without_replicas_gets_one_per_partition() -> None:
    data = valid_fleet()
    data["workers"].append(
        {"name": "fifo", "namespace": "sqs", "queueRef": {"name": "orders-fifo"}}
    )

    assert _by_name(load_fleet(data, "f.yaml"))["fifo"].replicas == 6


def test_queues_without_worker_enabled_derive_nothing() -> None:
    data = valid_fleet()
    data["queues"][0]["workerEnabled"] = False

    assert "worker-orders-fifo" not in _by_name(load_fleet(data, "f.yaml"))


def test_task_queue_name_defaults_to_the_queue_name_and_can_be_overridden() -> None:
    data = valid_fleet()
    workers = _by_name(load_fleet(data, "f.yaml"))
    assert workers["billing"].task_queue_name == "billing"

    data["workers"][0]["taskQueueName"] = "billing-v2"
    assert _by_name(load_fleet(data, "f.yaml"))["billing"].task_queue_name == "billing-v2"


def test_omitted_fields_come_from_defaults_and_then_builtins() -> None:
    reports = _by_name(load_fleet(valid_fleet(), "f.yaml"))["reports"]

    assert reports.image == "registry.example/worker:1.4.2"
    assert reports.temporal_namespace == "default"
    assert reports.image_pull_policy == "IfNotPresent"
    assert reports.replicas == 1
    assert reports.termination_grace_period_seconds == 60
    assert reports.service_account.automount_token is False
    assert reports.dlq is None
    assert reports.autoscaling is None
    assert reports.queue is None


def test_worker_fields_replace_default_values_whole() -> None:
    data = valid_fleet()
    data["defaults"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    data["defaults"]["nodeSelector"] = {"pool": "default"}
    data["workers"][1]["resources"] = {"requests": {"cpu": "250m"}}

    reports = _by_name(load_fleet(data, "f.yaml"))["reports"]

    # No merging: memory from defaults does not leak into the worker's own resources.
    assert reports.resources.requests == {"cpu": "250m"}
    assert reports.node_selector == {"pool": "default"}


def test_autoscaled_workers_start_at_min_replicas() -> None:
    billing = _by_name(load_fleet(valid_fleet(), "f.yaml"))["billing"]

    assert billing.autoscaling is not None
    assert (billing.autoscaling.min_replicas, billing.autoscaling.max_replicas) == (1, 20)
    assert billing.replicas == 1


def test_dlq_defaults_follow_the_worker() -> None:
    billing = _by_name(load_fleet(valid_fleet(), "f.yaml"))["billing"]

    assert billing.dlq is not None
    assert billing.dlq.task_queue_name == "billing-dlq"
    assert billing.dlq.image == "registry.example/billing:2.0.0"
    assert billing.dlq.resources == billing.resources
    assert billing.dlq.replicas == 1


def test_a_name_reference_targets_a_connection_in_the_worker_namespace() -> None:
    billing = _by_name(load_fleet(valid_fleet(), "f.yaml"))["billing"]

    assert billing.connection == ConnectionTarget(
        api_group="temporal.io", kind="Connection", name="orders", namespace="sqs"
    )
    assert billing.connection_source == "workers[0].connectionRef.name"


def test_numbers_are_accepted_as_quantities() -> None:
    data = valid_fleet()
    data["workers"][1]["resources"] = {"requests": {"cpu": 0.5}, "limits": {"cpu": 1}}

    reports = _by_name(load_fleet(data, "f.yaml"))["reports"]

    assert reports.resources.to_kubernetes() == {"requests": {"cpu": "0.5"}, "limits": {"cpu": "1"}}


def test_a_dumped_fleet_loads_back_to_the_same_workers() -> None:
    # The Pulumi program re-validates fleet + cluster queues via model_dump → load_fleet.
    fleet = load_fleet(valid_fleet(), "f.yaml")

    again = load_fleet(fleet.model_dump(mode="json", by_alias=True, exclude_none=True), "f.yaml")

    assert again == fleet
    assert again.resolved_workers() == fleet.resolved_workers()


def test_a_fleet_built_without_load_fleet_still_checks_references() -> None:
    data = valid_fleet()
    data["workers"][0]["queueRef"] = {"name": "nope"}
    fleet = Fleet.model_validate(data)

    with pytest.raises(SpecError, match=r"<fleet>: workers\[0\]\.queueRef: no queue 'nope'"):
        fleet.resolved_workers()


def test_the_fleet_is_immutable() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")

    with pytest.raises(ValueError, match="frozen"):
        fleet.workers[0].name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("stack", ["local", "dev", "prod"])
def test_example_stacks_are_valid(stack: str) -> None:
    fleet = load_fleet_file(ROOT / "stacks" / f"{stack}.yaml")

    workers = fleet.resolved_workers()

    assert workers
    assert len({w.key for w in workers}) == len(workers)


def test_prod_stack_uses_mtls_across_namespaces_with_autoscaling_and_a_dlq() -> None:
    fleet = load_fleet_file(ROOT / "stacks" / "prod.yaml")
    workers = fleet.resolved_workers()

    assert fleet.cluster_connections[0].mutual_tls_secret_ref is not None
    assert len({w.namespace for w in workers}) >= 3
    assert any(w.autoscaling for w in workers)
    assert any(w.dlq for w in workers)


# The design's sample fleet (docs/design.md), verbatim.
DESIGN_SAMPLE = """\
apiVersion: twc.temporal.io/v1
kind: Fleet
defaults:
  image: registry.example/worker:1.4.2
  temporalNamespace: default
  replicas: 1
  connectionRef: {objectRef: {apiGroup: temporal.io, kind: ClusterConnection, name: prod}}
clusterConnections:
  - name: prod
    hostPort: temporal-frontend.temporal.svc.cluster.local:7233
    tls: {serverName: temporal.example}
    mutualTLSSecretRef: {name: temporal-mtls}
    secretSource: {namespace: temporal}
    allowedNamespaces: [temporal, sqs]
connections:
  - {name: orders, namespace: sqs, hostPort: 10.0.0.5:7233}
queues:
  - {name: orders-fifo, namespace: sqs, fifo: true, partitions: 6, workerEnabled: true}
workers:
  - name: worker-orders-fifo
    namespace: temporal
    queueRef: {name: orders-fifo, namespace: sqs}
    taskQueueName: orders-fifo
    connectionRef: {name: orders}
    image: registry.example/worker:1.4.2
    imagePullPolicy: IfNotPresent
    replicas: 2
    autoscaling: {minReplicas: 1, maxReplicas: 20, targetBacklogPerReplica: 5}
    resources: {requests: {cpu: 500m, memory: 512Mi}, limits: {cpu: "2", memory: 2Gi}}
    nodeSelector: {}
    affinity: {}
    tolerations: []
    lifecycle: {postStartCommand: [], preStopCommand: []}
    dlq: {enabled: false}
"""


def test_the_design_sample_is_rejected_for_its_cross_namespace_connection(tmp_path: Path) -> None:
    # The sample's worker (namespace temporal) names Connection orders, which lives in
    # namespace sqs; the design's own rule ("a Connection in the worker's namespace") makes
    # that the one error in the file.
    path = tmp_path / "design.yaml"
    path.write_text(DESIGN_SAMPLE)

    with pytest.raises(SpecError) as caught:
        load_fleet_file(path)

    assert [i.path for i in caught.value.issues] == ["workers[0].connectionRef.name"]
    assert "can only be used by workers in its own namespace" in caught.value.issues[0].reason


def test_the_design_sample_is_valid_with_a_cluster_connection(tmp_path: Path) -> None:
    path = tmp_path / "design.yaml"
    path.write_text(
        DESIGN_SAMPLE.replace(
            "connectionRef: {name: orders}",
            "connectionRef: {objectRef: {apiGroup: temporal.io, kind: ClusterConnection, "
            "name: prod}}",
        )
    )

    (worker,) = load_fleet_file(path).resolved_workers()

    assert (worker.namespace, worker.name, worker.replicas) == ("temporal", "worker-orders-fifo", 1)


def test_equality_ignores_the_resolution_cache() -> None:
    loaded = load_fleet(valid_fleet(), "f.yaml")
    validated_only = Fleet.model_validate(valid_fleet())

    assert loaded == validated_only
    assert loaded != load_fleet({**valid_fleet(), "workers": []}, "f.yaml")


def test_a_copied_fleet_resolves_its_own_workers() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")

    copied = fleet.model_copy(update={"workers": fleet.workers[:1]})

    assert [w.name for w in copied.resolved_workers()] == ["billing", "worker-orders-fifo"]
    assert len(fleet.resolved_workers()) == 3
