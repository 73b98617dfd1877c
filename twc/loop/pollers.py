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
from collections.abc import Awaitable, Callable, Sequence

from twc.connections import poller_failure
from twc.loop.asking import AskerThread, Questions
from twc.loop.sampling import SAMPLE_CONCURRENCY, TaskQueueRef
from twc.native.status import PollerFacts

__all__ = ["PollerAsker"]

logger = logging.getLogger(__name__)

Ask = Callable[[TaskQueueRef], Awaitable[int]]

POLLERS_DEADLINE = 2.0
"""Seconds one poller question may take; unanswered, it is asked again when next due."""


class PollerAsker(Questions[tuple[PollerFacts, float], PollerFacts]):
    """Asks Temporal about pollers in the background, one batch per iteration's due queues.

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
