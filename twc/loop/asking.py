"""Questions to Temporal (backlog samples, pollers), asked on a thread of their own.

:class:`AskerThread` is one event loop on one thread where a loop's questions run (its
temporalio clients are cached per event loop, so the questions share them). An asker
(:class:`BacklogAsker`, :class:`PollerAsker`) takes the due questions and returns at
once; each answer is kept as it comes, and one that says something new (the first for
a queue, another count, a failure or the end of one) wakes the loop. The loop never
waits for an answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from twc.connections import poller_failure
from twc.loop.sampling import (
    SAMPLE_CONCURRENCY,
    Backlog,
    RateLimiter,
    SampleResult,
    TaskQueueRef,
    sample_backlogs,
)
from twc.native.status import PollerFacts

__all__ = ["POLLERS_DEADLINE", "AskerThread", "BacklogAsker", "PollerAsker", "Questions", "Sampled"]

logger = logging.getLogger(__name__)

Describe = Callable[[TaskQueueRef], Awaitable[Backlog]]
Ask = Callable[[TaskQueueRef], Awaitable[int]]


class AskerThread:
    """An event loop on a daemon thread of its own, started by the first question."""

    def __init__(self, name: str) -> None:
        """Prepare the thread (``twc-ask-<name>``); nothing starts yet."""
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._batches: list[concurrent.futures.Future[None]] = []
        self.wait = 0.0
        """Seconds whoever asks waits for the answers (:meth:`settle`): none in the
        loop, which takes them in later; ``twc run --once`` waits."""

    def submit(self, batch: Coroutine[Any, Any, None]) -> None:
        """Run ``batch`` on the thread and return at once."""
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"twc-ask-{self.name}", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            future = asyncio.run_coroutine_threadsafe(batch, self._loop)
            self._batches = [b for b in self._batches if not b.done()]
            self._batches.append(future)

    def settle(self, timeout: float) -> bool:
        """Wait until every batch submitted so far is done (at most ``timeout`` s);
        whether they are. The loop never calls this; ``--once`` and tests do."""
        with self._lock:
            batches = list(self._batches)
        _, pending = concurrent.futures.wait(batches, timeout=timeout)
        return not pending

    def close(self) -> None:
        """Stop the thread; questions in flight are cancelled. Closing twice is fine."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        # A stuck question must not hold the daemon's stop.
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=5.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            loop.close()


@dataclass(frozen=True, slots=True)
class Sampled:
    """One answer of :class:`BacklogAsker`: the sample and when it came."""

    result: SampleResult
    """The backlog, or the error that kept it."""
    at: float
    """Monotonic time of the answer (how old the sample is)."""
    wall: float
    """Unix time of the answer (published beside the backlog)."""


AnswerT = TypeVar("AnswerT")
LastT = TypeVar("LastT")


class Questions(Generic[AnswerT, LastT]):
    """What a loop's askers keep between its iterations: the queues in flight, the
    answers not taken in yet, the last one of each queue (to tell news) and the news.

    Thread-safe: the loop's thread asks and takes the answers in; they arrive on the
    :class:`AskerThread`.
    """

    def __init__(self, *, thread: AskerThread, wake: Callable[[], None] | None) -> None:
        """Answer on ``thread``; ``wake`` the loop when an answer says something new."""
        self.thread = thread
        self.wake = wake
        self._lock = threading.Lock()
        self._flying: set[TaskQueueRef] = set()
        self._answers: dict[TaskQueueRef, AnswerT] = {}
        self._last: dict[TaskQueueRef, LastT] = {}

    def answers(self) -> dict[TaskQueueRef, AnswerT]:
        """The answers that came since the last call."""
        with self._lock:
            out, self._answers = self._answers, {}
            return out

    def in_flight(self) -> frozenset[TaskQueueRef]:
        """The queues asked about and not answered yet."""
        with self._lock:
            return frozenset(self._flying)

    def forget(self, keep: Collection[TaskQueueRef]) -> None:
        """Forget the last answers of queues no worker uses any more."""
        with self._lock:
            if len(self._last) > len(keep):
                self._last = {r: v for r, v in self._last.items() if r in keep}

    def close(self) -> None:
        """Stop the thread (shared: every asker on it stops); questions in flight are
        cancelled."""
        self.thread.close()

    def _take(self, refs: Sequence[TaskQueueRef]) -> list[TaskQueueRef]:
        """Of ``refs``, those not in flight already, now marked in flight."""
        with self._lock:
            new = [r for r in dict.fromkeys(refs) if r not in self._flying]
            self._flying.update(new)
            return new

    def _answered(self, ref: TaskQueueRef, answer: AnswerT, last: LastT) -> None:
        # Each answer as it comes, not with its batch: one slow queue holds no other.
        # Answered and out of flight at once: the loop never sees the queue neither.
        with self._lock:
            self._answers[ref] = answer
            self._flying.discard(ref)
            news = ref not in self._last or self._last[ref] != last
            self._last[ref] = last
        if news and self.wake is not None:
            self.wake()


class BacklogAsker(Questions[Sampled, int | None]):
    """Samples backlogs in the background, within the sampling budget.

    Thread-safe: the loop's thread calls :meth:`ask`, :meth:`answers` and
    :meth:`in_flight`; the answers arrive on the :class:`AskerThread`.
    """

    def __init__(
        self,
        *,
        thread: AskerThread,
        wake: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Prepare the asker.

        Args:
            thread: Where the samples run (shared with the loop's poller questions).
            wake: Called when an answer says something new (the loop's wake-up).
            clock: Monotonic time, recorded with each answer.
            wall: Unix time, recorded with each answer.
        """
        super().__init__(thread=thread, wake=wake)
        self._clock = clock
        self._wall = wall

    def ask(self, refs: Sequence[TaskQueueRef], describe: Describe, limiter: RateLimiter) -> None:
        """Sample ``refs`` (those not already in flight) and return at once."""
        new = self._take(refs)
        if new:
            self.thread.submit(self._batch(new, describe, limiter))

    async def _batch(
        self, refs: Sequence[TaskQueueRef], describe: Describe, limiter: RateLimiter
    ) -> None:
        def answered(result: SampleResult) -> None:
            count = result.backlog.count if result.ok and result.backlog is not None else None
            self._answered(result.queue, Sampled(result, self._clock(), self._wall()), count)

        await sample_backlogs(
            refs, describe, concurrency=SAMPLE_CONCURRENCY, limiter=limiter, answered=answered
        )


POLLERS_DEADLINE = 2.0
"""Seconds one poller question may take; unanswered, it is asked again when next due."""


class PollerAsker(Questions[tuple[PollerFacts, float], PollerFacts]):
    """Asks Temporal about pollers, one batch per iteration's due queues.

    Thread-safe: the loop's thread calls :meth:`ask`, :meth:`answers` and
    :meth:`in_flight`; the answers arrive on the asker's own thread.
    """

    def __init__(
        self,
        *,
        name: str,
        thread: AskerThread,
        wake: Callable[[], None] | None = None,
    ) -> None:
        """Prepare the asker (its thread starts with the first question).

        Args:
            name: The stack, for the log.
            thread: Where the questions run (shared with the loop's backlog samples,
                and so their clients).
            wake: Called when an answer says something new (the loop's wake-up).
        """
        super().__init__(thread=thread, wake=wake)
        self.name = name
        self.unanswered = 0
        """Questions dropped at the deadline so far."""

    # ------------------------------------------------------------------ loop side
    def ask(self, refs: Sequence[TaskQueueRef], pollers: Ask, asked_at: float) -> None:
        """Ask about ``refs`` (those not already in flight) and return at once.

        Args:
            refs: The queues to ask about.
            pollers: The question (``TemporalBacklogs.pollers``).
            asked_at: The loop's monotonic time, recorded with each answer.
        """
        new = self._take(refs)
        if new:
            self.thread.submit(self._batch(new, pollers, asked_at))

    # -------------------------------------------------------------- asker side
    async def _batch(self, refs: Sequence[TaskQueueRef], pollers: Ask, asked_at: float) -> None:
        concurrency = asyncio.Semaphore(SAMPLE_CONCURRENCY)
        late: list[TaskQueueRef] = []

        async def one(ref: TaskQueueRef) -> None:
            async with concurrency:
                try:
                    facts = PollerFacts(await asyncio.wait_for(pollers(ref), POLLERS_DEADLINE))
                except TimeoutError:
                    late.append(ref)  # no answer: asked again when next due
                    return
                except Exception as exc:  # noqa: BLE001 - what cannot be read is reported on the worker
                    facts = PollerFacts(None, *poller_failure(exc))
                finally:
                    with self._lock:
                        self._flying.discard(ref)
            self._answered(ref, (facts, asked_at), facts)

        await asyncio.gather(*(one(r) for r in refs))
        if late:
            with self._lock:
                self.unanswered += len(late)
            logger.info(
                "[%s] %d of %d poller questions unanswered after %.1f s: asked again later",
                self.name,
                len(late),
                len(refs),
                POLLERS_DEADLINE,
            )
