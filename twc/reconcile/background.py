"""The engine on a thread of its own: the loop never waits for an ``up`` or ``refresh``.

At most one engine run at a time per stack; the loop goes on iterating meanwhile, and the next
iteration folds the ended run into the loop's state as if it had run in the one that started it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, replace
from typing import Any

from twc.engine.errors import EngineYielded
from twc.reconcile.act import Actor
from twc.reconcile.outcome import EngineNotStarted, outcome_of
from twc.reconcile.plan import Plan
from twc.reconcile.report import Reporter
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import LoopState

logger = logging.getLogger(__name__)


@dataclass
class EngineRun:
    """One engine run started in the background."""

    kind: str
    future: Future[Any]
    started: float
    plan: Plan | None = None
    yielded: bool = False


class BackgroundEngine:
    """Runs one ``up`` or ``refresh`` at a time and folds the ended run into the state.

    Only the loop's thread calls it (the run's own thread only wakes the loop): no lock."""

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
        self.stack = stack
        self._executor = executor
        self._actor = actor
        self._reporter = reporter
        self._settings = settings
        self._monotonic, self._jitter = clocks
        self._wakeup = wakeup
        self._run: EngineRun | None = None

    def busy(self) -> bool:
        """Whether an engine run is in progress (or ended and not collected yet)."""
        return self._run is not None

    def ended(self) -> bool:
        """Whether an engine run ended and was not collected yet."""
        return self._run is not None and self._run.future.done()

    def _start(self, kind: str, run: Callable[[], Any], **details: Any) -> None:
        loop = threading.get_ident()

        def work() -> Any:
            try:
                return run()
            finally:
                # Ended on a thread of its own: folded at once (else by the loop's own call).
                if threading.get_ident() != loop:
                    self._wakeup.set()

        if self._run is not None:
            raise RuntimeError("an engine run is in progress already")
        self._run = EngineRun(kind, self._executor.submit(work), **details)

    def start_up(self, plan: Plan, started: float) -> None:
        """Start the ``up`` that carries out ``plan``'s decision."""
        self._start("up", lambda: self._actor.run_up(plan), started=started, plan=plan)

    def start_refresh(self) -> None:
        """Start a ``refresh`` (drift detection)."""
        self._start("refresh", self._actor.refresh, started=self._monotonic())

    def give_way(self, reason: str) -> None:
        """A change waits: stop a ``refresh`` in progress (it reruns); an ``up`` never stops."""
        run = self._run
        if run is None or run.kind != "refresh" or run.future.done() or run.yielded:
            return
        if self._actor.engine.preempt(reason):
            run.yielded = True
            logger.info("[%s] refresh gives way to a change: %s", self.stack, reason)

    def collect(self, state: LoopState) -> LoopState:
        """Fold a run that ended into ``state``; ``state`` as it is while none did."""
        run = self._run
        if run is None or not run.future.done():
            return state
        self._run = None
        return self._fold(state, run)

    def drain(self, state: LoopState) -> LoopState:
        """Wait for the run in progress (SIGTERM: never abandoned) and fold it."""
        if self._run is not None:
            self._run.future.exception()
        return self.collect(state)

    def _fold(self, state: LoopState, run: EngineRun) -> LoopState:
        error = run.future.exception()
        if isinstance(error, EngineNotStarted):
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
        settings, jitter = self._settings.backoff, self._jitter
        outcome = outcome_of(error, attempt=state.next_attempt, settings=settings, jitter=jitter)
        state = state.finished(
            outcome, now=self._monotonic(), attempted=run.plan.hashes if run.plan else None
        )
        self._reporter.finished(
            run.plan, outcome, state, started=run.started, now=self._monotonic()
        )
        return state
