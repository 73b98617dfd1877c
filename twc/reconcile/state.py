"""The immutable state the reconcile loop carries between iterations, and its sleep.

:class:`LoopState` is replaced by pure transitions that take the time as an argument;
:func:`sleep` returns as soon as its ``wakeup`` event is set (SIGTERM, a watch event).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from twc.reconcile.autoscale import ScalingState
from twc.reconcile.decide import DesiredState
from twc.reconcile.outcome import Outcome, OutcomeKind
from twc.reconcile.settings import DaemonSettings

__all__ = ["LoopState", "sleep"]


def sleep(delay: float, wakeup: threading.Event) -> bool:
    """Sleep up to ``delay`` seconds; True if ``wakeup`` was set (it is not cleared)."""
    return wakeup.wait(delay) if delay > 0 else wakeup.is_set()


@dataclass(frozen=True, slots=True)
class LoopState:
    """What the reconcile loop remembers between iterations (monotonic times)."""

    started_at: float
    iteration: int = 0
    consecutive_failures: int = 0
    last_outcome: Outcome | None = None
    applied: DesiredState | None = None  # hashes of the last successful up
    blocked: str | None = None  # a fleet hash whose up failed permanently
    blocked_at: float | None = None
    last_success_at: float | None = None
    last_refresh_at: float | None = None
    scaling: Mapping[str, ScalingState] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def next_attempt(self) -> int:
        """The attempt number of a failure of the current iteration."""
        return self.consecutive_failures + 1

    def finished(
        self, outcome: Outcome, *, now: float, attempted: DesiredState | None = None
    ) -> LoopState:
        """The state after an iteration that ran ``up`` for ``attempted`` (or none)."""
        state = replace(self, iteration=self.iteration + 1, last_outcome=outcome)
        if outcome.kind is OutcomeKind.SUCCESS:
            state = replace(state, consecutive_failures=0, last_success_at=now)
            if attempted is None:
                return state
            return replace(state, applied=attempted, blocked=None, blocked_at=None)
        state = replace(state, consecutive_failures=self.consecutive_failures + 1)
        if attempted is None:
            return state
        if outcome.kind is OutcomeKind.PERMANENT:
            return replace(state, applied=None, blocked=attempted.fleet, blocked_at=now)
        return replace(state, applied=None)

    def refreshed(self, *, now: float) -> LoopState:
        """The state after a ``refresh`` ran."""
        return replace(self, last_refresh_at=now)

    def with_scaling(self, scaling: Mapping[str, ScalingState]) -> LoopState:
        """The state with the autoscaler's per-worker states replaced."""
        return replace(self, scaling=MappingProxyType(dict(scaling)))

    def blocked_hash(self, *, now: float, settings: DaemonSettings) -> str | None:
        """The hash not to retry; ``None`` once the resync interval passed."""
        if self.blocked is None or self.blocked_at is None:
            return None
        return self.blocked if now - self.blocked_at < settings.resync_interval else None

    def refresh_due(self, *, now: float, settings: DaemonSettings) -> bool:
        """Whether a drift-detecting ``refresh`` should run now."""
        return now >= self.refresh_due_at(settings)

    def refresh_due_at(self, settings: DaemonSettings) -> float:
        """When the next ``refresh`` comes due."""
        since = self.last_refresh_at if self.last_refresh_at is not None else self.started_at
        return since + settings.refresh_interval

    def next_delay(
        self, *, now: float, settings: DaemonSettings, sample_due_in: float | None = None
    ) -> float:
        """Seconds to sleep: backoff, else the interval, a sample or a refresh coming due."""
        outcome = self.last_outcome
        if outcome is not None and outcome.kind is OutcomeKind.TEMPORARY:
            wait = outcome.delay if outcome.delay is not None else settings.reconcile_interval
        else:
            wait = settings.reconcile_interval
            if sample_due_in is not None:
                wait = min(wait, sample_due_in)
        until_refresh = self.refresh_due_at(settings) - now
        if until_refresh > 0:
            wait = min(wait, until_refresh)
        return max(0.0, wait)
