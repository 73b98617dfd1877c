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
import logging
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence

from twc.connections import poller_failure
from twc.loop.asking import AskerThread
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
        thread: AskerThread | None = None,
    ) -> None:
        """Prepare the asker (its thread starts with the first question).

        Args:
            name: The stack, for the thread's name and the log.
            concurrency: Most questions in flight at once.
            deadline: Seconds one question may take; unanswered by then, it is dropped
                and the queue is asked again when it is next due.
            wake: Called when an answer says something new (the loop's wake-up).
            thread: Where the questions run; one of its own by default (``twc run``
                shares one with the loop's backlog samples, and so their clients).
        """
        self.name = name
        self.wake = wake
        self._concurrency = max(1, concurrency)
        self._deadline = deadline
        self.thread = thread or AskerThread(name)
        self._lock = threading.Lock()
        self._flying: set[TaskQueueRef] = set()
        self._answers: dict[TaskQueueRef, tuple[PollerFacts, float]] = {}
        self._last: dict[TaskQueueRef, PollerFacts] = {}
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
        if new:
            self.thread.submit(self._batch(new, pollers, asked_at))

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
        return self.thread.settle(timeout)

    def close(self) -> None:
        """Stop the thread; questions in flight are cancelled."""
        self.thread.close()

    # -------------------------------------------------------------- asker side
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
