"""Sampling task-queue backlogs under a concurrency bound and a request-rate budget.

A fleet can have hundreds of autoscaled task queues behind one Temporal frontend; asking
for all backlogs at once would be a self-inflicted load spike. :func:`sample_backlogs`
runs at most ``concurrency`` calls at a time and, through a :class:`TokenBucket`, at most
``rate_per_s`` calls per second on average. One queue's failure becomes an error entry in
the result and never hides the others' backlogs.

The actual call is injected (``describe``), as are the clock and the sleep of the rate
limiter, so the limits are tested on virtual time. The daemon's ``describe`` wraps
DescribeTaskQueue with ``report_stats`` over every task-queue type and owns the RPC
timeout.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

__all__ = [
    "POLLERS_BURST",
    "POLLERS_RATE_PER_S",
    "SAMPLE_BURST",
    "SAMPLE_CONCURRENCY",
    "SAMPLE_RATE_PER_S",
    "Allowance",
    "Backlog",
    "Budgets",
    "RateLimiter",
    "SampleResult",
    "TaskQueueRef",
    "TokenBucket",
    "sample_backlogs",
]

logger = logging.getLogger(__name__)

SAMPLE_CONCURRENCY = 8
"""Most backlog samples (DescribeTaskQueue calls) in flight at once."""
SAMPLE_RATE_PER_S = 20.0
"""Backlog samples per second one daemon process asks for, on average."""
SAMPLE_BURST = 20
"""Backlog samples asked for back to back before the rate applies."""
POLLERS_RATE_PER_S = 20.0
"""Task queues one daemon process asks about their pollers per second, on average."""
POLLERS_BURST = 50
"""Task queues asked about back to back before that rate applies."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True, order=True)
class TaskQueueRef:
    """A task queue to sample; hashable, so several workers on one queue share a call."""

    namespace: str
    """The Temporal namespace."""
    name: str
    """The task-queue name."""
    connection: str = ""
    """Identity of the connection to ask through; opaque here, it lets ``describe`` pick
    the right client when workers use different Temporal clusters."""

    def __str__(self) -> str:
        prefix = f"{self.connection}:" if self.connection else ""
        return f"{prefix}{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Backlog:
    """A task queue's backlog statistics, summed over task-queue types."""

    count: int
    """Approximate number of tasks waiting to be dispatched."""
    age_seconds: float = 0.0
    """Age of the oldest waiting task."""
    add_rate: float = 0.0
    """Tasks added per second."""
    dispatch_rate: float = 0.0
    """Tasks dispatched per second."""

    @classmethod
    def combine(cls, parts: Iterable[Backlog]) -> Backlog:
        """Merge per-type statistics (workflow, activity, nexus) into one.

        Args:
            parts: One backlog per task-queue type.

        Returns:
            Counts and rates summed, the oldest age kept.
        """
        items = list(parts)
        return cls(
            count=sum(p.count for p in items),
            age_seconds=max((p.age_seconds for p in items), default=0.0),
            add_rate=sum(p.add_rate for p in items),
            dispatch_rate=sum(p.dispatch_rate for p in items),
        )


@dataclass(frozen=True, slots=True)
class SampleResult:
    """One queue's sample: a backlog, or the error that prevented it."""

    queue: TaskQueueRef
    """The queue sampled."""
    backlog: Backlog | None = None
    """The statistics, when the call succeeded."""
    error: Exception | None = field(default=None, compare=False)
    """The failure, when it did not."""

    @property
    def ok(self) -> bool:
        """Whether a backlog was obtained."""
        return self.error is None and self.backlog is not None


class RateLimiter(Protocol):
    """Anything that can pace calls; :class:`TokenBucket` is the implementation."""

    async def acquire(self) -> None:
        """Return when one more call fits the budget."""
        ...


class _Refill:
    """``burst`` tokens at most, refilled at ``rate_per_s`` (what both budgets share)."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        if rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be positive, got {rate_per_s}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self._rate = rate_per_s
        self._burst = burst
        self._tokens = float(burst)
        self._updated: float | None = None

    def _refill(self, now: float) -> None:
        if self._updated is not None and now > self._updated:
            self._tokens = min(self._burst, self._tokens + (now - self._updated) * self._rate)
        self._updated = now if self._updated is None else max(self._updated, now)


class Allowance(_Refill):
    """Calls taken in batches, without waiting: at most ``burst`` at once, refilled at
    ``rate_per_s``. Thread-safe, so one allowance can be shared by every shard's loop
    of a process: Temporal's capacity does not grow with the number of shards."""

    def __init__(self, rate_per_s: float, *, burst: int) -> None:
        """Create a full allowance.

        Raises:
            ValueError: On a non-positive rate or a burst below 1.
        """
        super().__init__(rate_per_s, burst)
        self._lock = threading.Lock()

    def take(self, wanted: int, now: float) -> int:
        """Take up to ``wanted`` calls at monotonic time ``now``; returns how many."""
        with self._lock:
            self._refill(now)
            allowed = max(0, min(wanted, int(self._tokens)))
            self._tokens -= allowed
            return allowed


class TokenBucket(_Refill):
    """A token bucket: ``burst`` calls back to back, then ``rate_per_s`` on average.

    Each :meth:`acquire` reserves a token at once (tokens may go negative) and sleeps until
    the reservation matures, so concurrent callers are served first come, first served and
    the budget holds over any window: at most ``burst + rate_per_s * T`` calls in ``T``
    seconds. Keep one bucket for the daemon's lifetime so the budget spans iterations.
    Thread-safe: a sharded daemon's loops ask on threads of their own and share one.
    """

    def __init__(
        self,
        rate_per_s: float,
        *,
        burst: int = 1,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """Create a full bucket.

        Args:
            rate_per_s: Tokens added per second; positive.
            burst: Capacity of the bucket; at least 1.
            clock: Monotonic time in seconds.
            sleep: Awaitable sleep matching ``clock``.

        Raises:
            ValueError: On a non-positive rate or a burst below 1.
        """
        super().__init__(rate_per_s, burst)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token now and return how many seconds to wait before using it."""
        with self._lock:
            self._refill(self._clock())
            self._tokens -= 1.0
            # Refill arithmetic leaves float dust (1e-17 of a token); a wait shorter than
            # a nanosecond is no wait.
            wait = -self._tokens / self._rate
        return 0.0 if wait < 1e-9 else wait

    async def acquire(self) -> None:
        """Return when one more call fits the budget."""
        wait = self.reserve()
        if wait > 0:
            await self._sleep(wait)


async def sample_backlogs(
    queues: Iterable[TaskQueueRef],
    describe: Callable[[TaskQueueRef], Awaitable[Backlog]],
    *,
    concurrency: int,
    rate_per_s: float | None = None,
    burst: int = 1,
    limiter: RateLimiter | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = asyncio.sleep,
    answered: Callable[[SampleResult], None] | None = None,
) -> Mapping[TaskQueueRef, SampleResult]:
    """Sample every queue's backlog, within a concurrency bound and a rate budget.

    Args:
        queues: The queues; duplicates are sampled once.
        describe: Fetches one queue's backlog; may raise.
        concurrency: Most calls in flight at once; at least 1.
        rate_per_s: Average calls per second, paced by a new :class:`TokenBucket`;
            ``None`` for no budget. Mutually exclusive with ``limiter``.
        burst: Capacity of that new bucket.
        limiter: A long-lived limiter to share the budget across calls.
        clock: Monotonic time in seconds, for the new bucket.
        sleep: Awaitable sleep matching ``clock``, for the new bucket.
        answered: Called with each result as it comes (one slow queue holds no other).

    Returns:
        Read-only mapping from each distinct queue, in first-seen order, to its result.
        A failed call yields an entry with ``error`` set.

    Raises:
        ValueError: On a concurrency below 1, or both ``rate_per_s`` and ``limiter``.
        asyncio.CancelledError: When cancelled; the calls in flight are cancelled too.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if rate_per_s is not None and limiter is not None:
        raise ValueError("pass rate_per_s or limiter, not both")
    if rate_per_s is not None:
        limiter = TokenBucket(rate_per_s, burst=burst, clock=clock, sleep=sleep)
    slots = asyncio.Semaphore(concurrency)
    distinct = list(dict.fromkeys(queues))

    async def sample(queue: TaskQueueRef) -> SampleResult:
        async with slots:
            # Take the token inside the slot: a token taken while waiting for a slot
            # would be spent later, in a bunch with others, breaking the budget.
            if limiter is not None:
                await limiter.acquire()
            try:
                backlog = await describe(queue)
            except Exception as err:  # one queue failing must not hide the others  # noqa: BLE001 - a failed sample holds that worker's replicas
                logger.warning("[%s] backlog sample failed: %s", queue, err)
                result = SampleResult(queue, error=err)
            else:
                result = SampleResult(queue, backlog=backlog)
        if answered is not None:
            answered(result)
        return result

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(sample(queue)) for queue in distinct]
    return MappingProxyType({task.result().queue: task.result() for task in tasks})


@dataclass(frozen=True)
class Budgets:
    """What a loop may ask Temporal for: backlog samples at a rate, poller questions
    within an allowance. A sharded daemon's loops share one (Temporal's capacity does
    not grow with the shards)."""

    samples: RateLimiter = field(
        default_factory=lambda: TokenBucket(SAMPLE_RATE_PER_S, burst=SAMPLE_BURST)
    )
    """The backlog samples' rate."""
    pollers: Allowance = field(
        default_factory=lambda: Allowance(POLLERS_RATE_PER_S, burst=POLLERS_BURST)
    )
    """The poller questions' allowance."""
