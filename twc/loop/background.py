"""The engine on a thread of its own: the loop never waits for an ``up`` or ``refresh``.

At most one engine run at a time per stack; while it runs the loop goes on iterating
(observes, scales, applies new workers early) but starts no second run. The run that
ended is folded into the loop's state by the next iteration (or the one that started
it, when it ended within that call): its outcome recorded and reported, a drift found
by a refresh waking the loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, replace
from typing import Any

from twc.loop.act import Actor
from twc.loop.decide import DesiredState, ReconcileDecision
from twc.loop.outcome import EngineNotStarted, Outcome, outcome_of
from twc.loop.plan import Plan
from twc.loop.report import Reporter
from twc.loop.settings import DaemonSettings
from twc.loop.state import LoopState
from twc.stackrun.errors import EngineYielded

logger = logging.getLogger(__name__)

__all__ = ["BackgroundEngine", "EngineRun", "EngineThread"]


@dataclass
class EngineRun:
    """One engine run started in the background."""

    kind: str
    """``up`` or ``refresh``."""
    future: Future[Any]
    """Its result: ``None`` for an ``up``, the drifted resources for a ``refresh``."""
    started: float
    """When (the loop's monotonic clock) the iteration that started it began."""
    plan: Plan | None = None
    """The plan an ``up`` carries out."""
    decision: ReconcileDecision | None = None
    """The decision an ``up`` carries out."""
    attempted: DesiredState | None = None
    """The hashes an ``up`` applies (recorded as applied when it succeeds)."""
    yielded: bool = False
    """Whether a ``refresh`` was told to give way to a change."""


class EngineThread:
    """At most one engine run at a time, on a thread of its own."""

    def __init__(self, executor: Executor) -> None:
        """Run on ``executor`` (one thread: :attr:`Clocks.engine <twc.loop.daemon.Clocks>`)."""
        self._executor = executor
        self._lock = threading.Lock()
        self._run: EngineRun | None = None

    def busy(self) -> bool:
        """Whether an engine run is in progress (or ended and not collected yet)."""
        with self._lock:
            return self._run is not None

    def start(self, kind: str, work: Callable[[], Any], **details: Any) -> EngineRun:
        """Start ``work`` (an ``up`` or ``refresh``); one at a time.

        Raises:
            RuntimeError: A run is in progress already.
        """
        with self._lock:
            if self._run is not None:
                raise RuntimeError("an engine run is in progress already")
            run = EngineRun(kind, self._executor.submit(work), **details)
            self._run = run
            return run

    def current(self) -> EngineRun | None:
        """The run in progress (or ended and not collected yet), if any."""
        with self._lock:
            return self._run

    def finished(self) -> EngineRun | None:
        """The run that ended, once (then the thread takes the next); else ``None``."""
        with self._lock:
            run = self._run
            if run is None or not run.future.done():
                return None
            self._run = None
            return run

    def wait(self, timeout: float | None = None) -> EngineRun | None:
        """Wait for the run in progress to end (SIGTERM: it is never abandoned)."""
        with self._lock:
            run = self._run
        if run is None:
            return None
        try:
            run.future.exception(timeout=timeout)
        except TimeoutError:
            return None
        return self.finished()

    def close(self) -> None:
        """Let the thread go once the run in progress (if any) ended."""
        self._executor.shutdown(wait=True)


class BackgroundEngine:
    """The loop's side of :class:`EngineThread`: start an ``up`` or ``refresh``, and fold
    the run that ended into the loop's state as if it had run in the iteration that
    started it (its outcome reported then, a drift found by a refresh waking the loop)."""

    def __init__(
        self,
        stack: str,
        *,
        actor: Actor,
        reporter: Reporter,
        settings: DaemonSettings,
        clocks: tuple[Callable[[], float], Callable[[], float] | None],
        wakeup: threading.Event,
        executor: Executor,
    ) -> None:
        """Run ``actor``'s engine calls on ``executor``; ``clocks`` are the loop's
        monotonic clock and backoff jitter."""
        self.stack = stack
        self.thread = EngineThread(executor)
        monotonic, jitter = clocks
        self._actor = actor
        self._reporter = reporter
        self._settings = settings
        self._monotonic = monotonic
        self._jitter = jitter
        self._wakeup = wakeup

    def busy(self) -> bool:
        """Whether an engine run is in progress (or ended and not collected yet)."""
        return self.thread.busy()

    def start_up(self, decision: ReconcileDecision, plan: Plan, started: float) -> None:
        """Start the ``up`` that carries out ``decision``."""
        work = self._waking(lambda: self._actor.run_up(decision, plan))
        self.thread.start(
            "up", work, started=started, plan=plan, decision=decision, attempted=plan.hashes
        )

    def start_refresh(self) -> None:
        """Start a ``refresh`` (drift detection)."""
        self.thread.start("refresh", self._waking(self._actor.refresh), started=self._monotonic())

    def _waking(self, run: Callable[[], Any]) -> Callable[[], Any]:
        """``run``, waking the loop when it ends on a thread of its own: the loop folds
        it at once, and a change that came meanwhile starts now. A run that ended within
        the loop's own call (an executor that runs it there) is folded by that call."""
        loop = threading.get_ident()

        def work() -> Any:
            try:
                return run()
            finally:
                if threading.get_ident() != loop:
                    self._wakeup.set()

        return work

    def give_way(self, reason: str) -> None:
        """A change waits: stop the refresh in progress, if that is what runs. A refresh
        only reads, so it stops cleanly (the guard's SIGINT; its lock released), the
        change's ``up`` starts, and the refresh, still due, runs after it. An ``up`` is
        never stopped this way.
        """
        run = self.thread.current()
        if run is None or run.kind != "refresh" or run.future.done() or run.yielded:
            return
        if self._actor.give_way(reason):
            run.yielded = True
            logger.info("[%s] refresh gives way to a change: %s", self.stack, reason)

    def collect(self, state: LoopState) -> LoopState:
        """Fold a run that ended into ``state``; ``state`` as it is while none did."""
        run = self.thread.finished()
        return state if run is None else self._fold(state, run)

    def drain(self, state: LoopState) -> LoopState:
        """Wait for the run in progress (SIGTERM: never abandoned) and fold it."""
        run = self.thread.wait()
        return state if run is None else self._fold(state, run)

    def _fold(self, state: LoopState, run: EngineRun) -> LoopState:
        error = run.future.exception()
        if isinstance(error, EngineNotStarted):
            # Stopping while it waited for a slot: nothing ran, nothing to report.
            logger.info("[%s] %s not started: the daemon is stopping", self.stack, run.kind)
            return state
        if run.kind == "refresh":
            if isinstance(error, EngineYielded):
                # Not a failure and not a refresh: still due, it runs after the change.
                logger.info("[%s] refresh stopped for a change: %s", self.stack, error.reason)
                return state
            state = state.refreshed(now=self._monotonic())
            if error is not None:
                self._reporter.refreshed(None, error)
                self._reporter.faults.engine_faults(
                    outcome_of(error, attempt=1, settings=self._settings.backoff)
                )
                return state
            drifted = list(run.future.result() or ())
            self._reporter.refreshed(drifted, None)
            if drifted:
                self._wakeup.set()
                return replace(state, applied=None)
            return state
        if error is None:
            outcome = Outcome.success()
        else:
            outcome = outcome_of(
                error,
                attempt=state.next_attempt,
                settings=self._settings.backoff,
                jitter=self._jitter,
            )
        state = state.finished(outcome, now=self._monotonic(), attempted=run.attempted)
        self._reporter.finished(
            run.plan, run.decision, outcome, state, started=run.started, now=self._monotonic()
        )
        return state
