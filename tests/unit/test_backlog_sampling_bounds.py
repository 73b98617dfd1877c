"""Questions to Temporal keep their concurrency bound and request-rate budget, and isolate failures.

Everything runs on virtual time: the sampler's clock and sleep, and the fake ``describe``'s
latency, come from :class:`VirtualTime`, which jumps to the next timer whenever every task
is waiting. Nothing really sleeps.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twc.reconcile.asking import Backlog, Budget, TaskQueueRef, ask_all

T = TypeVar("T")
# Enough event-loop turns for every runnable task to reach its next await of a timer;
# the fakes here never wait on anything but virtual timers.
_SETTLE_TURNS = 50


class VirtualTime:
    """A clock and sleep where time passes only when every task is asleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self.now + max(0.0, delay), next(self._seq), wake))
        await wake

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        async def drive() -> T:
            task = asyncio.ensure_future(main)
            while True:
                for _ in range(_SETTLE_TURNS):
                    await asyncio.sleep(0)
                if task.done():
                    return task.result()
                assert self._timers, "deadlock: no task runnable and no timer pending"
                at, _, wake = heapq.heappop(self._timers)
                self.now = max(self.now, at)
                if not wake.done():  # its sleeper may have been cancelled
                    wake.set_result(None)

        return asyncio.run(drive())


def queues(n: int) -> list[TaskQueueRef]:
    return [TaskQueueRef("default", f"q{i}") for i in range(n)]


class FakeTemporal:
    """A ``describe`` with virtual latency that records when and how often it is called."""

    def __init__(
        self,
        time: VirtualTime,
        latency: float = 0.0,
        fail: frozenset[str] = frozenset(),
        latencies: dict[str, float] | None = None,
    ):
        self.time = time
        self.latency = latency
        self.latencies = latencies or {}
        self.fail = fail
        self.in_flight = 0
        self.peak = 0
        self.started: list[float] = []

    async def describe(self, queue: TaskQueueRef) -> Backlog:
        self.started.append(self.time.now)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            latency = self.latencies.get(queue.name, self.latency)
            if latency:
                await self.time.sleep(latency)
            if queue.name in self.fail:
                raise ConnectionRefusedError(f"{queue.name} refused")
            return Backlog(count=int(queue.name[1:]) * 10)
        finally:
            self.in_flight -= 1


def test_concurrency_bound_is_never_exceeded_and_is_used() -> None:
    time = VirtualTime()
    temporal = FakeTemporal(time, latency=1.0)

    results = time.run(ask_all(queues(10), temporal.describe, concurrency=3))

    assert temporal.peak == 3
    assert time.now == 4.0  # ceil(10 / 3) rounds of one second
    assert all(r.ok for r in results.values())


def test_rate_budget_spaces_calls_evenly() -> None:
    time = VirtualTime()
    temporal = FakeTemporal(time)

    time.run(
        ask_all(
            queues(8),
            temporal.describe,
            concurrency=8,
            limiter=Budget(2.0, burst=1, clock=time.clock, sleep=time.sleep),
        )
    )

    assert temporal.started == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]


def test_burst_then_rate() -> None:
    time = VirtualTime()
    temporal = FakeTemporal(time)

    time.run(
        ask_all(
            queues(6),
            temporal.describe,
            concurrency=6,
            limiter=Budget(1.0, burst=3, clock=time.clock, sleep=time.sleep),
        )
    )

    assert temporal.started == [0.0, 0.0, 0.0, 1.0, 2.0, 3.0]


def test_both_limits_together_the_tighter_one_wins() -> None:
    time = VirtualTime()
    temporal = FakeTemporal(time, latency=2.0)

    time.run(
        ask_all(
            queues(6),
            temporal.describe,
            concurrency=2,
            limiter=Budget(10.0, burst=1, clock=time.clock, sleep=time.sleep),
        )
    )

    assert temporal.peak == 2
    assert temporal.started == [0.0, 0.1, 2.0, 2.1, 4.0, 4.1]


def test_calls_freed_together_are_still_spaced_by_the_budget() -> None:
    time = VirtualTime()
    # The first three calls all end at t=1.2, freeing three slots at once; tokens must be
    # taken when a slot is free, or the next three would fire together.
    temporal = FakeTemporal(time, latencies={"q0": 1.2, "q1": 1.1, "q2": 1.0})

    time.run(
        ask_all(
            queues(6),
            temporal.describe,
            concurrency=3,
            limiter=Budget(10.0, burst=1, clock=time.clock, sleep=time.sleep),
        )
    )

    assert temporal.started == pytest.approx([0.0, 0.1, 0.2, 1.2, 1.3, 1.4])


def test_a_shared_limiter_keeps_the_budget_across_rounds() -> None:
    time = VirtualTime()
    temporal = FakeTemporal(time)
    limiter = Budget(1.0, burst=1, clock=time.clock, sleep=time.sleep)

    async def two_rounds() -> None:
        await ask_all(queues(2), temporal.describe, concurrency=4, limiter=limiter)
        await ask_all(queues(2), temporal.describe, concurrency=4, limiter=limiter)

    time.run(two_rounds())

    assert temporal.started == [0.0, 1.0, 2.0, 3.0]


def test_one_failing_queue_is_an_error_entry_and_the_others_still_report() -> None:
    time = VirtualTime()
    temporal = FakeTemporal(time, latency=0.5, fail=frozenset({"q1"}))

    results = time.run(ask_all(queues(3), temporal.describe, concurrency=2))

    assert list(results) == queues(3)
    failed = results[TaskQueueRef("default", "q1")]
    assert not failed.ok
    assert isinstance(failed.error, ConnectionRefusedError)
    assert failed.value is None
    assert results[TaskQueueRef("default", "q0")].value == Backlog(0)
    assert results[TaskQueueRef("default", "q2")].value == Backlog(20)


def test_duplicate_queues_are_sampled_once() -> None:
    time = VirtualTime()
    temporal = FakeTemporal(time)
    q = TaskQueueRef("default", "q4")

    results = time.run(ask_all([q, q, q], temporal.describe, concurrency=2))

    assert len(temporal.started) == 1
    assert list(results) == [q]


def test_cancelling_the_sampling_cancels_the_calls_in_flight() -> None:
    time = VirtualTime()
    cancelled: list[str] = []

    async def describe(queue: TaskQueueRef) -> Backlog:
        try:
            await time.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(queue.name)
            raise
        return Backlog(1)

    async def cancel_after_one_second() -> None:
        task = asyncio.ensure_future(ask_all(queues(3), describe, concurrency=2))
        await time.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    time.run(cancel_after_one_second())

    # A cancelled daemon stops at once: the calls in flight end as cancelled, never as
    # error entries, and the queue still waiting for a slot never starts.
    assert sorted(cancelled) == ["q0", "q1"]


def test_a_concurrency_below_one_is_rejected() -> None:
    async def describe(queue: TaskQueueRef) -> Backlog:
        raise AssertionError("must not be called")

    with pytest.raises(ValueError, match=r"concurrency must be at least 1"):
        asyncio.run(ask_all(queues(1), describe, concurrency=0))


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (1.0, 0)])
def test_token_bucket_rejects_bad_settings(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match=r"need rate_per_s > 0 and burst >= 1"):
        Budget(rate, burst=burst)


def test_a_question_unanswered_by_its_deadline_has_no_answer() -> None:
    async def describe(queue: TaskQueueRef) -> Backlog:
        if queue.name == "q1":
            await asyncio.Event().wait()  # never answers
        return Backlog(1)

    dropped: list[TaskQueueRef] = []

    def answered(ref: TaskQueueRef, answer: Any) -> None:
        if answer is None:
            dropped.append(ref)

    results = asyncio.run(ask_all(queues(2), describe, deadline=0.05, answered=answered))

    assert list(results) == [TaskQueueRef("default", "q0")]
    assert dropped == [TaskQueueRef("default", "q1")]


@given(
    rate=st.floats(0.1, 50.0),
    burst=st.integers(1, 5),
    gaps=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=60),
)
def test_token_bucket_never_exceeds_burst_plus_rate_in_any_window(
    rate: float, burst: int, gaps: list[float]
) -> None:
    now = 0.0
    bucket = Budget(rate, burst=burst, clock=lambda: now, sleep=_never_sleep)
    granted: list[float] = []
    for gap in gaps:
        now += gap
        granted.append(now + bucket.reserve())

    assert granted == sorted(granted)  # first come, first served
    for i, j in itertools.combinations(range(len(granted)), 2):
        calls = j - i + 1
        assert calls <= burst + rate * (granted[j] - granted[i]) + 1e-6


@given(rate=st.floats(0.1, 50.0), burst=st.integers(1, 5), idle=st.floats(0.0, 100.0))
def test_token_bucket_does_not_delay_within_the_burst_after_idling(
    rate: float, burst: int, idle: float
) -> None:
    now = 0.0
    bucket = Budget(rate, burst=burst, clock=lambda: now, sleep=_never_sleep)
    bucket.reserve()
    now = idle + (burst + 1) / rate  # long enough to refill completely, rounding aside

    assert [bucket.reserve() for _ in range(burst)] == [0.0] * burst


async def _never_sleep(delay: float) -> None:
    raise AssertionError("reserve() must not sleep")
