"""``twc run``'s loops ask Temporal about pollers on a thread of their own.

At 5000 workers a Temporal dev server answered slowly, and a shard's loop waited for the
answers in every iteration that asked (the whole 2 s deadline, 88 times in one benchmark
run), with a new Queue's early apply behind it. Here the loop hands its questions to a
:class:`~twc.reconcile.asking.Asker` and goes on; answers that say something new wake
it. The Temporal side is faked (an answer held until the test lets it through); the
asker's thread and event loop are the real ones.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from tests.unit._native_objects import cluster_conn_obj, cluster_ref, worker_obj
from tests.unit.test_daemon_writes_back_native_objects import (
    Pollers,
    World,
    _last_status,
)
from twc.reconcile import asking
from twc.reconcile.asking import Asker, TaskQueueRef
from twc.reconcile.observe import POLLERS_INTERVAL


class HeldPollers(Pollers):
    """Temporal holding its answer about ``held`` until :attr:`gate` opens."""

    def __init__(self, held: str) -> None:
        super().__init__()
        self.held = held
        self.gate = threading.Event()

    async def pollers(self, ref: TaskQueueRef) -> int:
        if ref.name == self.held:
            self.asked.append(ref.name)
            while not self.gate.is_set():
                await asyncio.sleep(0.01)
            return self.pollers_by_queue.get(ref.name, 0)
        return await super().pollers(ref)


@pytest.fixture
def world(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setattr(asking, "POLLERS_DEADLINE", getattr(request, "param", None) or 60.0)
    world = World(
        [worker_obj(n, ref=cluster_ref("prod")) for n in ("fast", "held")],
        [cluster_conn_obj("prod")],
        asker_thread=True,
    )
    world.backlogs = HeldPollers("held")
    observer = world.daemon.observer
    observer.sources = replace(observer.sources, backlogs=world.backlogs)
    world.deployments.update({"team/fast": (1, 1), "team/held": (1, 1)})
    world.backlogs.pollers_by_queue.update({"fast": 1, "held": 1})
    try:
        yield world
    finally:
        _held(world).gate.set()
        observer.close()


def _held(world: World) -> HeldPollers:
    assert isinstance(world.backlogs, HeldPollers)
    return world.backlogs


def _asker(world: World) -> Asker:
    asker = world.daemon.observer.asker
    assert asker is not None
    return asker


def _step_in_thread(world: World) -> None:
    # Stepped on a thread so that a loop that waited for the held answer fails the test
    # (after 10 s) instead of hanging it.
    done = threading.Event()

    def step() -> None:
        world.step()
        done.set()

    threading.Thread(target=step, daemon=True).start()
    assert done.wait(10.0), "the iteration waited for an answer Temporal still holds"


def test_an_iteration_does_not_wait_for_an_answer_temporal_holds(world: World) -> None:
    _step_in_thread(world)
    asker = _asker(world)
    assert _answered(asker, "fast"), "the fast answer waited for the held one"
    assert _eventually(lambda: sorted(world.backlogs.asked) == ["fast", "held"])
    assert {r.name for r in asker.in_flight()} == {"held"}
    assert world.daemon.wakeup.is_set(), "the first answer about a queue wakes the loop"
    world.daemon.wakeup.clear()
    world.step()
    assert _last_status(world.writer, "team/fast")["phase"] == "Ready"
    assert _last_status(world.writer, "team/held")["phase"] != "Ready"

    _held(world).gate.set()
    assert asker.thread.settle(10.0)
    assert world.daemon.wakeup.is_set()
    world.step()
    assert _last_status(world.writer, "team/held")["phase"] == "Ready"
    assert world.backlogs.asked.count("held") == 1, "asked once, answered once"


def test_a_question_in_flight_is_not_asked_again(world: World) -> None:
    asker = _asker(world)
    world.step()
    for _ in range(3):
        assert _answered(asker, "fast")
        world.clock.now += POLLERS_INTERVAL
        world.step()
    assert _answered(asker, "fast")
    assert world.backlogs.asked.count("held") == 1
    assert world.backlogs.asked.count("fast") >= 2, "the answered queue is asked on schedule"


def test_an_answer_that_says_nothing_new_does_not_wake_the_loop(world: World) -> None:
    _held(world).gate.set()
    asker = _asker(world)
    world.step()
    assert asker.thread.settle(10.0)
    world.step()  # the answers taken in
    world.daemon.wakeup.clear()

    world.clock.now += POLLERS_INTERVAL
    world.step()
    assert asker.thread.settle(10.0)
    assert world.backlogs.asked.count("fast") == 2, "asked again on schedule"
    assert not world.daemon.wakeup.is_set(), "the same count again woke the loop"

    world.backlogs.pollers_by_queue["fast"] = 0  # its workers stopped polling
    world.clock.now += POLLERS_INTERVAL
    world.step()
    assert asker.thread.settle(10.0)
    assert world.daemon.wakeup.is_set()
    world.step()
    assert _last_status(world.writer, "team/fast")["phase"] != "Ready"


@pytest.mark.parametrize("world", [0.2], indirect=True)
def test_an_unanswered_question_is_dropped_at_its_deadline_and_asked_again(world: World) -> None:
    asker = _asker(world)
    world.step()
    assert asker.thread.settle(10.0), "the held question was not dropped at its deadline"
    assert not asker.in_flight(), "dropped at its deadline, not answered"
    world.step()
    assert _last_status(world.writer, "team/held")["phase"] != "Ready"

    _held(world).gate.set()
    world.step()
    assert asker.thread.settle(10.0)
    assert world.backlogs.asked.count("held") == 2, "an unanswered queue is asked again"
    world.step()
    assert _last_status(world.writer, "team/held")["phase"] == "Ready"


def _answered(asker: Asker, name: str) -> bool:
    return _eventually(lambda: name not in {r.name for r in asker.in_flight()})


def _eventually(check: Callable[[], bool]) -> bool:
    # The asker's thread answers on its own time: wait for it, at most 10 s.
    for _ in range(1000):
        if check():
            return True
        threading.Event().wait(0.01)
    return False
