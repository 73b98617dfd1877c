"""With the engine on a thread of its own (as ``twc run`` runs it), a long ``up`` holds
nothing up: the loop goes on scaling and applying new workers early, starts no second
engine run, and folds the run's outcome into its state when it ends."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from tests.unit._daemon_fakes import (
    NS,
    FakeApplier,
    FakeEngine,
    Harness,
    autoscaled,
    fleet_data,
    make_daemon,
    queue_object,
)
from twc.kube.workloads import ObjectRef
from twc.reconcile.settings import DaemonSettings


class Gate:
    """Holds each ``up`` until released."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()

    def __call__(self) -> None:
        self.entered.set()
        assert self.open.wait(10), "the test never let the up finish"


REFRESH_EVERY_MINUTE = DaemonSettings(refresh_interval=60.0)


def _until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _up_held_at_the_gate(applier: FakeApplier) -> tuple[Harness, Gate]:
    """A daemon whose up for an image change runs in the background, held at the gate."""
    gate = Gate()
    h = make_daemon(engine=FakeEngine(during_up=gate), early=applier, engine_thread=True)
    gate.open.set()
    h.step()
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()
    gate.open.clear()
    gate.entered.clear()
    h.fleet["defaults"]["image"] = "registry.example/worker:2.0.0"
    h.step()
    assert gate.entered.wait(10)
    return h, gate


def test_a_queue_created_during_a_long_up_is_applied_at_once_and_upped_after() -> None:
    gate = Gate()
    applier = FakeApplier()
    h = make_daemon(engine=FakeEngine(during_up=gate), early=applier, engine_thread=True)
    gate.open.set()
    h.step()  # the daemon's first up (it applies nothing early)
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()
    gate.open.clear()
    gate.entered.clear()
    h.fleet["defaults"]["image"] = "registry.example/worker:2.0.0"
    h.step()  # a long up, in the background, held at the gate
    assert gate.entered.wait(10)
    ups = len(h.engine.ups)

    h.queues.replace([queue_object("orders")])
    h.step()  # during the up: the new worker's objects now, no second up

    assert ObjectRef("Deployment", NS, "worker-orders") in applier.refs()
    assert len(h.engine.ups) == ups
    assert h.engine.preempts == [], "an up is never told to give way"
    assert h.metrics.value("twc_engine_in_progress") == 1

    gate.open.set()
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()  # collects the long up, starts the next (for worker-orders)
    assert h.state is not None
    assert h.state.applied is not None
    _until(lambda: len(h.engine.ups) == ups + 1)
    # The engine's thread releases the early objects after the up (and after the
    # in-progress gauge fell): wait for that, not for the gauge.
    _until(lambda: ObjectRef("Deployment", NS, "worker-orders") in applier.released)
    _until(lambda: h.metrics.value("twc_engine_in_progress") == 0)
    h.step()
    assert h.engine.last_program().workers.keys() >= {f"{NS}/worker-orders"}
    # Released after the up that has the worker, never deleted by the one before it.
    assert applier.deleted == []


def test_scaling_goes_on_while_an_up_is_in_progress() -> None:
    gate = Gate()
    fleet = fleet_data(workers=[autoscaled("orders", target=10, hi=20)])
    settings = DaemonSettings.model_validate({"autoscale": {"scale_up": {"policies": []}}})
    h = make_daemon(
        fleet,
        settings=settings,
        backlogs={"orders": 0},
        engine=FakeEngine(during_up=gate),
        engine_thread=True,
    )
    h.live[f"{NS}/orders"] = 1
    h.step()
    assert gate.entered.wait(10)

    h.backlogs.counts["orders"] = 70
    h.clock.now += 30
    h.step()

    assert h.live[f"{NS}/orders"] == 7
    assert len(h.engine.ups) == 1
    gate.open.set()


def test_a_failed_background_up_is_folded_into_the_state_as_a_failure() -> None:
    h = make_daemon(engine=FakeEngine(failures=[RuntimeError("boom")]), engine_thread=True)
    h.step()
    _until(lambda: h.daemon.wakeup.is_set())
    state = h.step()

    assert state.applied is None
    assert h.metrics.value("twc_reconcile_total", result="temporary") == 1
    _until(lambda: len(h.engine.ups) == 2)  # the retry (full up), after the failure


def test_a_stop_waits_for_the_up_in_progress() -> None:
    gate = Gate()
    h = make_daemon(engine=FakeEngine(during_up=gate), engine_thread=True)
    done: list[int] = []
    loop = threading.Thread(target=lambda: done.append(h.daemon.run()), daemon=True)
    loop.start()
    assert gate.entered.wait(10)

    h.daemon.request_stop()
    time.sleep(0.3)
    assert done == []  # the up is never abandoned

    gate.open.set()
    loop.join(10)
    assert done == [0]
    assert h.daemon.state is not None
    assert h.daemon.state.applied is not None


def test_a_change_stops_the_refresh_in_progress_and_the_refresh_runs_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # At 1000 workers a change waited behind its shard's one-to-two-minute refresh.
    gate = Gate()
    engine = FakeEngine(during_refresh=gate)
    h = make_daemon(
        engine=engine, engine_thread=True, settings=DaemonSettings(refresh_interval=60.0)
    )
    h.step()  # the first up
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()  # collects it
    h.clock.now += 61
    state = h.step()  # a refresh is due: it starts, and is held at the gate
    assert gate.entered.wait(10)
    before = state.last_refresh_at
    ups = len(engine.ups)

    h.fleet["defaults"]["image"] = "registry.example/worker:2.0.0"
    with caplog.at_level(logging.INFO, logger="twc.reconcile.background"):
        h.step()  # the change: the refresh is told to give way
    assert len(engine.preempts) == 1
    assert "refresh gives way to a change" in caplog.text
    assert len(engine.ups) == ups, "no second engine run while the refresh runs"

    gate.open.set()  # the refresh sees it was told, and stops
    _until(lambda: h.daemon.wakeup.is_set())
    state = h.step()  # collects it (no refresh on record, no failure), starts the up
    assert state.last_refresh_at == before, "a refresh that gave way is still due"
    assert state.last_outcome is not None
    assert state.last_outcome.ok
    _until(lambda: len(engine.ups) == ups + 1)
    images = {w.image for w in engine.last_program().workers.values()}
    assert images == {"registry.example/worker:2.0.0"}

    _until(lambda: h.daemon.wakeup.is_set())
    h.step()  # collects the up; the refresh, still due, runs again, to its end
    _until(lambda: engine.refreshes == 2)
    _until(lambda: h.step().last_refresh_at != before)  # collected once it ended
    assert len(engine.preempts) == 1


def test_the_loop_sleeps_while_a_refresh_runs_in_the_background() -> None:
    # A refresh in progress is due until it ends; the loop slept 0 s for it and spun,
    # observing and planning without pause, for the minutes a large shard's refresh takes.
    gate = Gate()
    engine = FakeEngine(during_refresh=gate)
    h = make_daemon(
        engine=engine, engine_thread=True, settings=DaemonSettings(refresh_interval=60.0)
    )
    loop = threading.Thread(target=h.daemon.run, daemon=True)
    loop.start()
    try:
        assert gate.entered.wait(10), "no refresh started"
        slept = len(h.clock.slept)
        time.sleep(0.3)
        spins = [d for d in h.clock.slept[slept:] if d == 0]
        assert len(spins) <= 1, f"{len(spins)} iterations without a pause during the refresh"
    finally:
        gate.open.set()
        h.daemon.request_stop()
        loop.join(10)
    assert not loop.is_alive()


def test_a_change_that_could_not_stop_the_refresh_starts_as_soon_as_it_ends() -> None:
    # The refresh's last steps (after its CLI) cannot be stopped; the change then waited
    # for the next iteration, 30 s later by default (the benchmark's "idle" trials).
    gate = Gate()
    engine = FakeEngine(during_refresh=gate, yields=False)
    h = make_daemon(
        engine=engine, engine_thread=True, settings=DaemonSettings(refresh_interval=60.0)
    )
    h.step()
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()
    h.clock.now += 61
    h.step()  # the refresh starts, held at the gate
    assert gate.entered.wait(10)
    h.fleet["defaults"]["image"] = "registry.example/worker:2.0.0"
    h.step()  # the change: the refresh is asked, and cannot give way
    assert len(engine.preempts) == 1
    ups = len(engine.ups)
    h.daemon.wakeup.clear()

    gate.open.set()
    _until(lambda: h.daemon.wakeup.is_set())  # its end wakes the loop
    h.step()
    _until(lambda: len(engine.ups) == ups + 1)


def test_a_wake_applies_a_new_worker_before_it_reports_the_up_that_ended() -> None:
    # Folding an ended up reports it: statuses written, Temporal asked about pollers.
    # At 20 shards a new Queue's Deployment waited up to two minutes for that report.
    applier = FakeApplier()
    h = make_daemon(early=applier, engine_thread=True)
    deployment = ObjectRef("Deployment", NS, "worker-orders")
    applied_when_reported: list[bool] = []
    report = h.daemon.reporter.finished

    def finished(*args: object, **kwargs: object) -> None:
        applied_when_reported.append(deployment in applier.refs())
        report(*args, **kwargs)  # type: ignore[arg-type]

    h.daemon.reporter.finished = finished  # type: ignore[method-assign]
    gate = Gate()

    def up() -> None:  # the second up holds; the Queue arrives as it ends
        if len(h.engine.ups) == 2:
            gate()
            h.queues.replace([queue_object("orders")])

    def on_sleep() -> None:
        if h.clock.slept[-1] != 0.3:
            h.daemon.wakeup.wait(5)

    h.engine.during_up = up
    h.clock.on_sleep = on_sleep
    loop = threading.Thread(target=h.daemon.run, daemon=True)
    loop.start()
    try:
        _until(lambda: h.daemon.state is not None and h.daemon.state.applied is not None)
        h.fleet["defaults"]["image"] = "registry.example/worker:2.0.0"
        h.daemon.wakeup.set()
        assert gate.entered.wait(10)
        applied_when_reported.clear()
        gate.open.set()
        _until(lambda: len(applied_when_reported) >= 1)
    finally:
        gate.open.set()
        h.daemon.request_stop()
        loop.join(10)

    assert applied_when_reported[0], "the ended up was reported before the new worker"


def test_a_queue_deleted_during_an_up_that_did_not_have_its_worker_leaves_nothing() -> None:
    # Seen at 5000 workers: the Queue's worker was applied early while an up for
    # another worker ran, the Queue was deleted before that up ended, and the shard,
    # with nothing left to apply, never ran the up that would have deleted it.
    applier = FakeApplier()
    h, gate = _up_held_at_the_gate(applier)
    h.queues.replace([queue_object("orders")])
    h.step()  # the Queue's worker applied early, during that up
    assert ObjectRef("Deployment", NS, "worker-orders") in applier.refs()
    h.queues.replace([])  # and the Queue deleted before that up ends

    ups = len(h.engine.ups)
    gate.open.set()
    _until(lambda: h.metrics.value("twc_engine_in_progress") == 0)
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()  # folds the up; nothing left to apply
    h.step()

    assert len(h.engine.ups) == ups, "no up needed to remove what no up created"
    assert sorted(applier.deleted) == [
        ObjectRef("Deployment", NS, "worker-orders"),
        ObjectRef("ServiceAccount", NS, "worker-orders"),
    ]
    assert applier.released == []
