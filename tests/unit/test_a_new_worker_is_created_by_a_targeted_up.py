"""A new worker (a Queue object, a worker added to the file) is created by a targeted
``up`` of its own components, not a full ``up`` of its stack: a new Queue object cost a
full ``up`` of its shard (95 s at 250 workers under load in the benchmark), because
every queue counted as shared by the whole stack."""

from __future__ import annotations

import pytest

from tests.unit._daemon_fakes import NS, STACK, FakeEngine, fleet_data, make_daemon, queue_object
from twc.engine.automation import WORKER_TYPE, new_worker_targets

pytestmark = pytest.mark.unit

SCHEME = f"urn:pulumi:{STACK}"


def _held(key: str, *, under_queue: bool = False) -> list[str]:
    chain = f"twc:kmsvc:Queue${WORKER_TYPE}" if under_queue else WORKER_TYPE
    component = f"{SCHEME}::twc::{chain}::{key}"
    return [component, f"{SCHEME}::twc::{chain}$kubernetes:apps/v1:Deployment::{key}-deployment"]


def _engine() -> FakeEngine:
    return FakeEngine(urns={f"{NS}/payments": _held(f"{NS}/payments")})


def test_a_new_queue_object_is_created_by_a_targeted_up_of_its_components() -> None:
    engine = _engine()
    h = make_daemon(engine=engine)
    h.step()  # the daemon's first up: a full one
    assert engine.ups[-1][1] is None

    h.queues.replace([queue_object("orders")])
    h.step()

    key = next(k for k in engine.last_program().workers if k != f"{NS}/payments")
    assert engine.ups[-1][1] == new_worker_targets(SCHEME, "twc", key, queue=f"{NS}/orders")


def test_a_worker_added_to_the_file_is_created_by_a_targeted_up() -> None:
    engine = _engine()
    h = make_daemon(engine=engine)
    h.step()

    h.fleet["workers"].append({"name": "billing", "namespace": NS, "taskQueueName": "billing"})
    h.step()

    assert engine.ups[-1][1] == [f"{SCHEME}::twc::{WORKER_TYPE}::{NS}/billing"]


def test_a_worker_moving_under_a_queue_is_a_full_up() -> None:
    # The file's worker becomes the Queue's: the engine moves it by its alias, which a
    # targeted up of its old URNs would not.
    engine = FakeEngine(urns={f"{NS}/worker-orders": _held(f"{NS}/worker-orders")})
    fleet = fleet_data(
        workers=[{"name": "worker-orders", "namespace": NS, "taskQueueName": "orders"}]
    )
    h = make_daemon(fleet, engine=engine)
    h.step()

    h.fleet["workers"] = []
    h.fleet["queues"] = [{"name": "orders", "namespace": NS, "workerEnabled": True}]
    h.step()

    assert len(engine.ups) == 2
    assert f"{NS}/worker-orders" in engine.last_program().workers
    assert engine.ups[-1][1] is None


def test_a_queue_objects_worker_going_is_a_full_up_that_takes_its_queue_too() -> None:
    engine = _engine()
    h = make_daemon(engine=engine, queues=[queue_object("orders")])
    h.step()
    key = next(k for k in engine.last_program().workers if k != f"{NS}/payments")
    engine.urns[key] = _held(key, under_queue=True)

    h.queues.replace([])
    h.step()

    assert len(engine.ups) == 2
    assert key not in engine.last_program().workers
    assert engine.ups[-1][1] is None


def test_a_change_to_a_queue_twc_creates_is_a_full_up() -> None:
    # The Queue object twc creates for a file's queue is its queue's component's child,
    # not its worker's: the worker's URNs alone would leave it as it was.
    queue = {"name": "orders", "namespace": NS, "workerEnabled": True, "createObject": True}
    h = make_daemon(fleet_data(queues=[queue]), engine=_engine())
    h.step()
    key = next(k for k in h.engine.last_program().workers if k != f"{NS}/payments")
    h.engine.urns[key] = _held(key, under_queue=True)

    h.fleet["queues"][0]["partitions"] = 4
    h.step()

    assert len(h.engine.ups) == 2
    assert h.engine.ups[-1][1] is None
