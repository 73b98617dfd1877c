"""A new worker's ServiceAccount and Deployment are applied before the engine's up, and
handed over to the engine (or deleted) once an up succeeded."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from tests.unit._daemon_fakes import (
    NS,
    FakeApplier,
    FakeEngine,
    fleet_data,
    make_daemon,
    queue_object,
)
from tests.unit.pulumi_mocks import RecordingMocks, pulumi_test
from twc.kube.workloads import ObjectRef
from twc.reconcile.act import EARLY_FIELD_MANAGER, early_objects, plan_release
from twc.spec import load_fleet

ORDERS_SA = ObjectRef("ServiceAccount", NS, "worker-orders")
ORDERS_DEPLOYMENT = ObjectRef("Deployment", NS, "worker-orders")


def test_a_new_queue_worker_is_applied_before_the_up_and_handed_to_the_engine_after() -> None:
    applier = FakeApplier()
    seen_at_up: list[list[ObjectRef]] = []
    engine = FakeEngine(during_up=lambda: seen_at_up.append(applier.refs()))
    h = make_daemon(engine=engine, early=applier)
    h.step()
    assert applier.applied == []  # the first up of a daemon applies nothing early

    h.queues.replace([queue_object("orders", partitions=3)])
    h.step()

    assert seen_at_up[-1] == [ORDERS_SA, ORDERS_DEPLOYMENT]  # both there before the up
    assert applier.managers == {EARLY_FIELD_MANAGER}
    deployment = applier.applied[1]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "worker-orders"
    assert sorted(applier.released) == [ORDERS_DEPLOYMENT, ORDERS_SA]
    assert applier.deleted == []
    assert h.metrics.value("twc_early_applies_total", result="applied") == 1
    assert h.metrics.value("twc_early_applies_total", result="released") == 2


def test_a_failed_up_keeps_the_early_objects_until_an_up_succeeds() -> None:
    applier = FakeApplier()
    engine = FakeEngine()
    h = make_daemon(engine=engine, early=applier)
    h.step()
    engine.failures.append(RuntimeError("engine crashed"))

    h.queues.replace([queue_object("orders")])
    failed = h.step()
    assert failed.last_outcome is not None
    assert not failed.last_outcome.ok
    assert applier.released == []
    assert applier.deleted == []

    h.clock.now += 600  # past the backoff
    h.step()
    assert sorted(applier.released) == [ORDERS_DEPLOYMENT, ORDERS_SA]


def test_objects_of_a_worker_gone_before_its_up_succeeded_are_deleted() -> None:
    applier = FakeApplier()
    engine = FakeEngine()
    h = make_daemon(engine=engine, early=applier)
    h.step()
    engine.failures.append(RuntimeError("engine crashed"))
    h.queues.replace([queue_object("orders")])
    h.step()

    h.queues.replace([])  # the Queue is deleted before any up created its worker
    h.clock.now += 600
    h.step()

    assert sorted(applier.deleted) == [ORDERS_DEPLOYMENT, ORDERS_SA]
    assert applier.released == []
    assert h.metrics.value("twc_early_applies_total", result="deleted") == 2


def test_objects_a_killed_daemon_applied_early_are_settled_after_the_first_up() -> None:
    kept = [ObjectRef("ServiceAccount", NS, "payments"), ObjectRef("Deployment", NS, "payments")]
    gone = [ObjectRef("ServiceAccount", NS, "old"), ObjectRef("Deployment", NS, "old")]
    applier = FakeApplier(leftovers=kept + gone)
    h = make_daemon(early=applier)
    h.step()  # the daemon's first up: the leftovers are found and settled right after
    h.queues.replace([queue_object("orders")])
    h.step()

    assert sorted(applier.deleted) == sorted(gone)
    assert set(kept) <= set(applier.released)


def test_an_early_apply_that_fails_leaves_the_worker_to_the_up() -> None:
    applier = FakeApplier()
    applier.fail_apply = RuntimeError("forbidden")
    h = make_daemon(early=applier)
    h.step()

    h.queues.replace([queue_object("orders")])
    state = h.step()

    assert state.last_outcome is not None
    assert state.last_outcome.ok
    assert len(h.engine.ups) == 2
    assert h.metrics.value("twc_early_applies_total", result="skipped") == 1


def test_a_worker_whose_objects_exist_already_is_left_to_the_engine() -> None:
    applier = FakeApplier()
    applier.existing = {ORDERS_DEPLOYMENT}  # an up that read a newer file created it
    h = make_daemon(early=applier)
    h.step()

    h.queues.replace([queue_object("orders")])
    h.step()

    assert applier.applied == []
    assert applier.released == []
    assert applier.deleted == []
    assert len(h.engine.ups) == 2


def test_release_plan_splits_desired_from_gone_workers() -> None:
    pending = [ORDERS_SA, ORDERS_DEPLOYMENT, ObjectRef("Deployment", NS, "gone")]
    release, delete = plan_release(pending, {f"{NS}/worker-orders"})
    assert release == [ORDERS_DEPLOYMENT, ORDERS_SA]
    assert delete == [ObjectRef("Deployment", NS, "gone")]


# ---- the early objects are exactly what the program registers -----------------------

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
SECRETS: dict[tuple[str, str], dict[str, bytes]] = {
    ("temporal", "temporal-mtls"): {"tls.crt": CA, "tls.key": KEY, "ca.crt": CA},
    (NS, "api-key"): {"key": b"k-123"},
}


def _fleet_doc() -> dict[str, Any]:
    doc = fleet_data(
        workers=[
            {"name": "mtls", "namespace": NS, "taskQueueName": "m"},
            {
                "name": "keyed",
                "namespace": NS,
                "taskQueueName": "k",
                "connectionRef": {"name": "cloud"},
                "autoscaling": {"minReplicas": 1, "maxReplicas": 9, "targetBacklogPerReplica": 5},
            },
        ],
        queues=[{"name": "orders", "namespace": NS, "partitions": 2, "workerEnabled": True}],
    )
    doc["clusterConnections"] = [
        {
            "name": "main",
            "hostPort": "temporal.example:7233",
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": "temporal"},
            "allowedNamespaces": [NS],
        }
    ]
    doc["connections"] = [
        {
            "name": "cloud",
            "namespace": NS,
            "hostPort": "cloud.example:7233",
            "apiKeySecretRef": {"name": "api-key", "key": "key"},
        }
    ]
    return doc


def _read(namespace: str, name: str) -> dict[str, bytes]:
    try:
        return SECRETS[(namespace, name)]
    except KeyError:
        raise LookupError(name) from None


@pytest.mark.parametrize("address", [None, "127.0.0.1:7233"])
@pulumi_test
def test_early_objects_equal_what_the_program_registers(address: str | None) -> Any:
    from twc.connections import default_registry
    from twc.desired import DesiredInputs, desired_fleet
    from twc.program import ProgramOptions, build

    fleet = load_fleet(_fleet_doc(), "fleet.yaml")
    replicas = {f"{NS}/keyed": 4}
    mocks = RecordingMocks(
        fake_dynamic={"TaskQueueCheck": {"pollers": 0, "approximateBacklog": 0, "condition": {}}}
    )
    pulumi.runtime.set_mocks(mocks, preview=False)
    desired = desired_fleet(
        fleet, DesiredInputs(replicas=replicas), registry=default_registry(), file="fleet.yaml"
    )
    statuses = build(
        desired,
        file="fleet.yaml",
        options=ProgramOptions(temporal_address=address),
        read_secret=lambda ns, name: SECRETS.get((ns, name)),
    )

    def check(_: Any) -> None:
        workers = {f"{w.namespace}/{w.name}": w for w in fleet.resolved_workers()}
        assert set(workers) == {f"{NS}/mtls", f"{NS}/keyed", f"{NS}/worker-orders"}
        for key, worker in workers.items():
            sa, deployment = early_objects(
                worker,
                fleet,
                read_secret=_read,
                temporal_address=address,
                replicas=replicas.get(key),
                stack=pulumi.get_stack(),
            )
            registered = mocks.named(f"{key}-deployment").inputs
            assert registered["metadata"]["labels"]["twc.temporal.io/stack"] == "stack"
            assert deployment["metadata"] == registered["metadata"], key
            spec = dict(deployment["spec"])
            if worker.autoscaling is not None:
                # The early apply starts it at the autoscaler's count (the autoscaler
                # then claims the field); the program never sets it.
                assert spec.pop("replicas") == replicas[key], key
                assert "replicas" not in registered["spec"], key
            assert spec == registered["spec"], key
            registered_sa = mocks.named(f"{key}-sa").inputs
            assert sa["metadata"] == registered_sa["metadata"], key
            assert (
                sa["automountServiceAccountToken"] == registered_sa["automountServiceAccountToken"]
            )

    return pulumi.Output.all(*statuses.values()).apply(check)


def test_early_objects_need_the_connection_secret() -> None:
    fleet = load_fleet(_fleet_doc(), "fleet.yaml")
    worker = next(w for w in fleet.resolved_workers() if w.name == "keyed")
    with pytest.raises(LookupError):
        early_objects(worker, fleet, read_secret=lambda ns, name: _read("nowhere", name))
