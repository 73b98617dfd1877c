"""A sharded daemon's refreshes take at most ``shards.refresh_share`` of its time, the
most overdue shard first, and a refresh waiting for its turn holds nothing up: at 20
shards of 250 workers, a refresh every ten minutes each kept one running at every
moment beside every change."""

from __future__ import annotations

import threading
import time

import pytest

from tests.unit._daemon_fakes import FakeEngine, make_daemon
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.shards import EngineSlots


class Clock:
    """Monotonic time the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _refresh_of(slots: EngineSlots, clock: Clock, seconds: float) -> None:
    started = slots.acquire(refresh=True)
    clock.now += seconds
    slots.release(refresh=True, started=started)


def test_after_a_refresh_the_next_waits_in_proportion_to_its_length() -> None:
    clock = Clock()
    slots = EngineSlots(2, refresh_share=0.25, clock=clock)
    assert slots.refresh_turn("shard-a", due_at=0.0)
    _refresh_of(slots, clock, 60.0)  # ends at 60 s: 60 s is a quarter of 240 s

    assert slots.refresh_wait() == pytest.approx(180.0)
    clock.now = 239.0
    assert not slots.refresh_turn("shard-b", due_at=0.0)
    clock.now = 240.0
    assert slots.refresh_turn("shard-b", due_at=0.0)
    assert slots.refresh_seconds == pytest.approx(60.0)


def test_the_most_overdue_shard_refreshes_first() -> None:
    clock = Clock()
    slots = EngineSlots(2, refresh_share=0.5, clock=clock)
    clock.now = 100.0
    assert slots.refresh_turn("shard-b", due_at=50.0), "alone in line: its turn"
    _refresh_of(slots, clock, 10.0)  # the budget is spent until 120 s
    assert not slots.refresh_turn("shard-a", due_at=90.0)
    assert not slots.refresh_turn("shard-c", due_at=40.0)
    assert slots.refreshes_due() == 2
    clock.now = 120.0
    assert not slots.refresh_turn("shard-a", due_at=90.0), "c came due before a"
    assert slots.refresh_turn("shard-c", due_at=40.0)
    assert slots.refreshes_due() == 1


def test_a_shard_that_stopped_asking_is_out_of_the_line() -> None:
    # A shard whose Lease was lost (or whose loop stopped) asks no more: the others do
    # not wait behind its claim for ever.
    clock = Clock()
    slots = EngineSlots(2, refresh_share=0.5, claim_ttl=60.0, clock=clock)
    _refresh_of(slots, clock, 10.0)  # the budget is spent until 20 s
    assert not slots.refresh_turn("gone", due_at=0.0)  # asks at 10 s, then never again
    clock.now = 30.0
    assert not slots.refresh_turn("shard-a", due_at=5.0), "gone is older and asked lately"
    clock.now = 71.0  # more than 60 s since gone asked
    assert slots.refresh_turn("shard-a", due_at=5.0)


def test_an_up_never_waits_for_the_refresh_budget() -> None:
    clock = Clock()
    slots = EngineSlots(2, refresh_share=0.1, clock=clock)
    _refresh_of(slots, clock, 100.0)
    assert slots.refresh_wait() == pytest.approx(900.0)

    done = threading.Event()

    def up() -> None:
        slots.release(refresh=False, started=slots.acquire(refresh=False))
        done.set()

    threading.Thread(target=up, daemon=True).start()
    assert done.wait(5), "an up waited for the refreshes' budget"


def test_a_refresh_that_entered_waits_for_the_budget_before_it_starts() -> None:
    # The turn is asked before the engine is taken; a refresh already waiting for a
    # slot (granted, then both slots went to ups) still starts no sooner than the
    # budget allows.
    clock = Clock()
    slots = EngineSlots(3, refresh_share=0.5, clock=clock)
    _refresh_of(slots, clock, 10.0)  # the budget is spent until 20 s
    started = threading.Event()

    def refresh() -> None:
        slots.acquire(refresh=True)
        started.set()

    threading.Thread(target=refresh, daemon=True).start()
    assert not started.wait(0.3)
    clock.now = 20.0
    slots.wake()
    assert started.wait(5)
    assert slots.running == 1


def test_a_share_of_one_keeps_refreshes_back_to_back() -> None:
    clock = Clock()
    slots = EngineSlots(2, refresh_share=1.0, clock=clock)
    _refresh_of(slots, clock, 60.0)
    assert slots.refresh_wait() == 0.0
    assert slots.refresh_turn("shard-a", due_at=0.0)


def test_a_share_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="refresh_share"):
        EngineSlots(2, refresh_share=0.0)
    with pytest.raises(ValueError, match="refresh_share"):
        EngineSlots(2, refresh_share=1.5)


def test_a_due_refresh_without_its_turn_starts_no_engine_run_and_a_change_still_goes() -> None:
    asked: list[tuple[str, float]] = []
    allowed = threading.Event()

    def turn(stack: str, due_at: float) -> bool:
        asked.append((stack, due_at))
        return allowed.is_set()

    engine = FakeEngine()
    h = make_daemon(
        engine=engine,
        engine_thread=True,
        settings=DaemonSettings(refresh_interval=60.0),
        refresh_turn=turn,
    )
    h.step()  # the first up
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()
    h.clock.now += 120.0  # the refresh is due
    h.step()
    assert asked, "a due refresh never asked for its turn"
    assert asked[-1][1] <= h.clock.now - 60.0, "it asked with when it came due"
    assert engine.refreshes == 0

    ups = len(engine.ups)
    h.fleet["defaults"]["image"] = "registry.example/worker:2.0.0"
    h.step()
    _until(lambda: len(engine.ups) == ups + 1)
    _until(lambda: h.daemon.wakeup.is_set())
    h.step()

    allowed.set()
    h.step()
    _until(lambda: engine.refreshes == 1)


def _until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
