"""Temporal's answers about pollers, asked on a thread of their own.

A worker's ``Polling`` condition comes from DescribeTaskQueue. The loop used to ask in
its report step and wait for the answers (at most ``pollers_deadline``). At 5000 workers
one Temporal server answers slowly: in the benchmark's N=5000 run the daemon's shard
loops gave up on their questions after the whole 2 s 88 times, and whatever else the
iteration had to do (a new Queue's early apply) waited behind them; in the no-op
iterations measured beside it, half of an iteration's time went to waiting for answers.

:class:`PollerAsker` takes the questions and asks them on its own event loop thread.
The loop goes on with the answers it has; an answer that says something new (the first
one for a queue, a count or a failure different from the last) wakes the loop, which
writes it to the worker's status. An answer that says what the last one said wakes
nobody, so a fleet of queues asked again on schedule does not keep the loop busy.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence

from twc.connections import poller_failure
from twc.loop.sampling import TaskQueueRef
from twc.native.status import PollerFacts

__all__ = ["PollerAsker"]

logger = logging.getLogger(__name__)

Ask = Callable[[TaskQueueRef], Awaitable[int]]


class PollerAsker:
    """Asks Temporal about pollers in the background, one batch per iteration's due queues.

    Thread-safe: the loop's thread calls :meth:`ask`, :meth:`answers` and
    :meth:`in_flight`; the answers arrive on the asker's own thread.
    """

    def __init__(
        self,
        *,
        name: str,
        concurrency: int,
        deadline: float,
        wake: Callable[[], None] | None = None,
    ) -> None:
        """Prepare the asker (its thread starts with the first question).

        Args:
            name: The stack, for the thread's name and the log.
            concurrency: Most questions in flight at once.
            deadline: Seconds one question may take; unanswered by then, it is dropped
                and the queue is asked again when it is next due.
            wake: Called when an answer says something new (the loop's wake-up).
        """
        self.name = name
        self.wake = wake
        self._concurrency = max(1, concurrency)
        self._deadline = deadline
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._flying: set[TaskQueueRef] = set()
        self._answers: dict[TaskQueueRef, tuple[PollerFacts, float]] = {}
        self._last: dict[TaskQueueRef, PollerFacts] = {}
        self._batches: list[concurrent.futures.Future[None]] = []
        self.news: object = object()
        """Replaced by a new object whenever an answer says something new: the loop
        compares it by identity to tell such a wake from one that changed nothing."""
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
        with self._lock:
            new = [r for r in dict.fromkeys(refs) if r not in self._flying]
            self._flying.update(new)
            if not new:
                return
            loop = self._running()
            batch = asyncio.run_coroutine_threadsafe(self._batch(new, pollers, asked_at), loop)
            self._batches = [b for b in self._batches if not b.done()]
            self._batches.append(batch)

    def answers(self) -> dict[TaskQueueRef, tuple[PollerFacts, float]]:
        """The answers that came since the last call, with the time each was asked."""
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
                self._last = {r: f for r, f in self._last.items() if r in keep}

    def settle(self, timeout: float) -> bool:
        """Wait until no question is in flight (at most ``timeout`` s); whether none is.

        The loop never calls this; ``twc run --once`` and tests that step the loop do.
        """
        with self._lock:
            batches = list(self._batches)
        _, pending = concurrent.futures.wait(batches, timeout=timeout)
        return not pending

    def close(self) -> None:
        """Stop the thread; questions in flight are cancelled."""
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

    # -------------------------------------------------------------- asker side
    def _running(self) -> asyncio.AbstractEventLoop:
        # Called with the lock held.
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name=f"twc-pollers-{self.name}", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    async def _batch(self, refs: Sequence[TaskQueueRef], pollers: Ask, asked_at: float) -> None:
        concurrency = asyncio.Semaphore(self._concurrency)
        late: list[TaskQueueRef] = []

        async def one(ref: TaskQueueRef) -> None:
            async with concurrency:
                try:
                    facts = PollerFacts(await asyncio.wait_for(pollers(ref), self._deadline))
                except TimeoutError:
                    late.append(ref)  # no answer: asked again when next due
                    return
                except Exception as exc:  # noqa: BLE001 - what cannot be read is reported on the worker
                    facts = PollerFacts(None, *poller_failure(exc))
                finally:
                    with self._lock:
                        self._flying.discard(ref)
            self._answered(ref, facts, asked_at)

        await asyncio.gather(*(one(r) for r in refs))
        if late:
            with self._lock:
                self.unanswered += len(late)
            logger.info(
                "[%s] %d of %d poller questions unanswered after %.1f s: asked again later",
                self.name,
                len(late),
                len(refs),
                self._deadline,
            )

    def _answered(self, ref: TaskQueueRef, facts: PollerFacts, asked_at: float) -> None:
        # Each answer as it comes, not with its batch: one slow queue holds no other.
        with self._lock:
            self._answers[ref] = (facts, asked_at)
            news = self._last.get(ref) != facts
            self._last[ref] = facts
            if news:
                self.news = object()
        if news and self.wake is not None:
            self.wake()
