"""``twc run``'s loops sample backlogs on a thread of their own.

The loop hands the due samples to a :class:`~twc.reconcile.asking.Asker`, waits for
their answers at most :data:`~twc.reconcile.asking.SAMPLE_WAIT`, and scales on the
answers it has: a slow Temporal holds an iteration no longer than that, and a new
Queue's early apply or another worker's scale write in the same shard waits no longer.
An answer that comes after the wait and says something new wakes the loop. Temporal is
faked (an answer held until the test lets it through); the asker's thread and event
loop are the real ones, wired by the daemon as ``twc run`` wires it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from tests.unit._daemon_fakes import NS, FakeBacklogs, Harness, autoscaled, fleet_data, make_daemon
from twc.reconcile.asking import SAMPLE_WAIT, Asker, Backlog, Budget, TaskQueueRef
from twc.reconcile.outcome import Fault
from twc.reconcile.settings import DaemonSettings

# Scale straight to ceil(backlog / target), no step policies in the way.
SETTINGS = DaemonSettings.model_validate({"autoscale": {"scale_up": {"policies": []}}})


class HeldBacklogs(FakeBacklogs):
    """Temporal holding its answer about ``held`` until :attr:`gate` opens."""

    def __init__(self, held: str, counts: Mapping[str, int | BaseException]) -> None:
        super().__init__(counts)
        self.held = held
        self.gate = threading.Event()

    async def describe(self, ref: TaskQueueRef) -> Backlog:
        if ref.name == self.held:
            while not self.gate.is_set():
                await asyncio.sleep(0.01)
        return await super().describe(ref)


def _harness(
    names: list[str], counts: Mapping[str, int | BaseException], budgets: Budget | None = None
) -> Harness:
    h = make_daemon(
        fleet_data(workers=[autoscaled(n, target=10) for n in names]),
        settings=SETTINGS,
        backlogs=counts,
        engine_thread=True,
        asker_thread=True,
        budgets=budgets,
    )
    for name in names:
        h.live[f"{NS}/{name}"] = 1
    return h


def _sampler(h: Harness) -> Asker:
    sampler = h.daemon.observer.sampler
    assert sampler is not None, "twc run's wiring has a backlog sampler"
    return sampler


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def _step_in_thread(h: Harness) -> None:
    # On a thread, so that an iteration that waited for the held answer fails the test
    # (after 10 s) instead of hanging it.
    done = threading.Event()

    def step() -> None:
        h.step()
        done.set()

    threading.Thread(target=step, daemon=True).start()
    assert done.wait(10.0), "the iteration waited for a sample Temporal still holds"


def _errors(h: Harness) -> float:
    return h.metrics.count("twc_backlog_sample_errors_total", stack="unit")


def test_an_iteration_scales_on_the_samples_answered_and_not_on_one_temporal_holds() -> None:
    h = _harness(["fast", "held"], {"fast": 70, "held": 90})
    held = HeldBacklogs("held", {"fast": 70, "held": 90})
    observer = h.daemon.observer
    observer.sources = replace(observer.sources, backlogs=held)
    try:
        _step_in_thread(h)
        sampler = _sampler(h)
        # The iteration that asked took the answer it got in: one held sample holds no
        # other, and the held one's replicas stay; nothing failed, so no fault.
        assert h.live == {f"{NS}/fast": 7, f"{NS}/held": 1}
        assert _errors(h) == 0
        assert {r.name for r in sampler.in_flight()} == {"held"}

        held.gate.set()
        assert sampler.thread.settle(10.0)
        assert h.daemon.wakeup.is_set(), "an answer after the wait is news"
        h.step()
        assert h.live == {f"{NS}/fast": 7, f"{NS}/held": 9}
        assert held.described.count("held") == 1, "asked once while in flight, answered once"
        assert _errors(h) == 0
    finally:
        held.gate.set()
        observer.close()


def test_an_unchanged_answer_wakes_nobody_and_the_next_sample_is_due_after_it() -> None:
    h = _harness(["orders"], {"orders": 30})
    sampler = _sampler(h)
    observer = h.daemon.observer
    interval = SETTINGS.sampling.interval
    try:
        h.step()
        assert h.live[f"{NS}/orders"] == 3, "the iteration that asked scales on the answer"

        h.clock.now += interval
        h.step()  # due again
        assert sampler.thread.settle(10.0)
        assert h.backlogs.described == ["orders", "orders"]
        assert not h.daemon.wakeup.is_set(), "the same backlog again is no news"
        # Taken in by the wait's arithmetic: due an interval after this answer.
        assert observer.next_sample_in(h.clock.now) == interval

        h.backlogs.counts["orders"] = 50
        h.clock.now += interval
        h.step()
        assert h.live[f"{NS}/orders"] == 5
        assert not h.daemon.wakeup.is_set(), "taken in by the iteration that asked"
    finally:
        observer.close()


def test_a_sample_in_flight_counts_as_sampled_now_for_the_next_wake() -> None:
    h = _harness(["held"], {"held": 10})
    held = HeldBacklogs("held", {"held": 10})
    observer = h.daemon.observer
    observer.sources = replace(observer.sources, backlogs=held)
    try:
        h.step()
        assert _eventually(lambda: len(_sampler(h).in_flight()) == 1)
        # Without it the loop would sleep its whole reconcile interval, and an
        # unchanged answer would wake nobody: samples thrice as far apart.
        assert observer.next_sample_in(h.clock.now) == SETTINGS.sampling.interval
    finally:
        held.gate.set()
        observer.close()


def test_a_failed_sample_holds_replicas_and_stands_until_a_good_answer() -> None:
    h = _harness(["orders"], {"orders": RuntimeError("frontend refused")})
    sampler = _sampler(h)
    observer = h.daemon.observer
    gate = threading.Event()  # an answer comes only once the test lets it through
    answer = h.backlogs.describe

    async def held(ref: TaskQueueRef) -> Backlog:
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return await answer(ref)

    h.backlogs.describe = held  # type: ignore[method-assign]

    def answered() -> None:
        gate.set()
        assert sampler.thread.settle(10.0)
        gate.clear()

    try:
        h.step()
        answered()
        assert h.daemon.wakeup.is_set(), "a first answer, even a failure, is news"
        h.step()
        assert h.live[f"{NS}/orders"] == 1
        assert _errors(h) == 1
        assert Fault.BACKLOG_SAMPLING_FAILED in h.daemon.faults.active()

        h.backlogs.counts["orders"] = 40
        h.step()  # asked again at once (no good sample to stand on); the failure stands
        assert _errors(h) == 2
        assert Fault.BACKLOG_SAMPLING_FAILED in h.daemon.faults.active()
        answered()
        assert h.daemon.wakeup.is_set(), "the end of a failure is news"
        h.step()
        assert h.live[f"{NS}/orders"] == 4
        assert Fault.BACKLOG_SAMPLING_FAILED not in h.daemon.faults.active()
        assert _errors(h) == 2
    finally:
        gate.set()
        observer.close()


def test_the_sampler_spends_the_shared_budget() -> None:
    class Counting(Budget):
        acquired = 0

        async def acquire(self) -> None:
            self.acquired += 1

    budget = Counting()  # the sharded daemon's one shared bucket
    h = _harness(["a", "b", "c"], {"a": 10, "b": 20, "c": 30}, budget)
    try:
        h.step()
        assert _sampler(h).thread.settle(10.0)
        assert budget.acquired == 3
    finally:
        h.daemon.observer.close()


def test_the_only_iteration_of_run_once_waits_for_a_sample_longer_than_the_wait() -> None:
    class SlowBacklogs(FakeBacklogs):
        async def describe(self, ref: TaskQueueRef) -> Backlog:
            await asyncio.sleep(2 * SAMPLE_WAIT)  # longer than a loop's wait, within --once's
            return await super().describe(ref)

    h = _harness(["orders"], {"orders": 40})
    observer = h.daemon.observer
    observer.sources = replace(observer.sources, backlogs=SlowBacklogs({"orders": 40}))
    assert h.daemon.run(once=True) == 0
    assert h.live[f"{NS}/orders"] == 4, "scaled on the sample --once waited for"
