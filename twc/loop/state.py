"""An interruptible sleep, and the immutable record the reconcile loop carries along.

The loop sleeps between iterations with :func:`sleep`, which returns as soon as its
``wakeup`` event is set: SIGTERM (set the event, then the loop sees its stop flag and
exits) and a new Queue object from the watch (set the event, reconcile at once) both
interrupt it. Everything the loop remembers between iterations is one frozen
:class:`LoopState`, replaced by pure transition methods, so each decision can be tested
by building a state and calling a method with the time.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from twc.loop.autoscale import ScalingState
from twc.loop.decide import DesiredState
from twc.loop.outcome import Outcome, OutcomeKind
from twc.loop.settings import DaemonSettings

__all__ = ["LoopState", "sleep"]


def sleep(delay: float, wakeup: threading.Event) -> bool:
    """Sleep up to ``delay`` seconds, waking early when ``wakeup`` is set.

    The event is not cleared: the caller decides whether it means "stop" or "work now",
    and clears it (before doing the work, so a wake-up during the work is not lost).

    Args:
        delay: Seconds to sleep; zero or less only checks the event.
        wakeup: The event that ends the sleep early.

    Returns:
        True if the event was set (before or during the sleep), False on timeout.
    """
    if delay <= 0:
        return wakeup.is_set()
    return wakeup.wait(delay)


@dataclass(frozen=True, slots=True)
class LoopState:
    """What the reconcile loop remembers between iterations; replaced, never mutated."""

    started_at: float
    """When the loop started, on the loop's monotonic clock."""
    iteration: int = 0
    """Iterations finished so far."""
    consecutive_failures: int = 0
    """Failed iterations since the last success; drives the backoff."""
    last_outcome: Outcome | None = None
    """How the previous iteration ended."""
    applied: DesiredState | None = None
    """Hashes of the last successful ``up``; ``None`` until one succeeded."""
    blocked: str | None = None
    """A fleet hash whose ``up`` failed permanently and is not retried as is."""
    blocked_at: float | None = None
    """When :attr:`blocked` was set."""
    last_success_at: float | None = None
    """When an iteration last succeeded (for the health check and a metric)."""
    last_refresh_at: float | None = None
    """When ``refresh`` last ran."""
    scaling: Mapping[str, ScalingState] = field(default_factory=lambda: MappingProxyType({}))
    """Per autoscaled worker, the autoscaler's state."""

    @property
    def next_attempt(self) -> int:
        """The attempt number to give :func:`~twc.loop.outcome.outcome_of` if the
        current iteration fails."""
        return self.consecutive_failures + 1

    def finished(
        self, outcome: Outcome, *, now: float, attempted: DesiredState | None = None
    ) -> LoopState:
        """Return the state after an iteration.

        Args:
            outcome: How the iteration ended.
            now: The current time.
            attempted: The desired state the iteration ran ``up`` for; ``None`` when it
                skipped or failed before hashing.

        Returns:
            The new state: a success with ``attempted`` records it as applied and lifts
            any block; a success without (a skip) keeps both; a failure with
            ``attempted`` forgets what was applied (the next ``up`` is a full one), and
            a permanent one blocks that hash.
        """
        state = replace(self, iteration=self.iteration + 1, last_outcome=outcome)
        if outcome.kind is OutcomeKind.SUCCESS:
            if attempted is None:
                # A skipped iteration (often: skipped *because* the hash is blocked)
                # succeeds without applying anything, so the block stays.
                return replace(state, consecutive_failures=0, last_success_at=now)
            return replace(
                state,
                consecutive_failures=0,
                applied=attempted,
                blocked=None,
                blocked_at=None,
                last_success_at=now,
            )
        state = replace(state, consecutive_failures=self.consecutive_failures + 1)
        if attempted is not None:
            # A failed up may have applied part of its changes (and a new worker's early
            # objects): the stack is somewhere between the two states, so whatever is
            # desired next, even the old state again, needs a full up.
            state = replace(state, applied=None)
        if outcome.kind is OutcomeKind.PERMANENT and attempted is not None:
            state = replace(state, blocked=attempted.fleet, blocked_at=now)
        return state

    def refreshed(self, *, now: float) -> LoopState:
        """Return the state after a ``refresh`` ran."""
        return replace(self, last_refresh_at=now)

    def with_scaling(self, scaling: Mapping[str, ScalingState]) -> LoopState:
        """Return the state with the autoscaler's per-worker states replaced."""
        return replace(self, scaling=MappingProxyType(dict(scaling)))

    def blocked_hash(self, *, now: float, settings: DaemonSettings) -> str | None:
        """Return the hash not to retry, or ``None`` once the resync interval passed.

        A permanent failure may still be fixed outside the desired state (a secret
        repaired in the cluster), so the block expires with the resync safety net.
        """
        if self.blocked is None or self.blocked_at is None:
            return None
        if now - self.blocked_at >= settings.resync_interval:
            return None
        return self.blocked

    def refresh_due(self, *, now: float, settings: DaemonSettings) -> bool:
        """Whether a drift-detecting ``refresh`` should run now."""
        return now >= self._next_refresh_at(settings)

    def refresh_due_at(self, settings: DaemonSettings) -> float:
        """When the next ``refresh`` comes due (monotonic)."""
        return self._next_refresh_at(settings)

    def next_delay(
        self, *, now: float, settings: DaemonSettings, sample_due_in: float | None = None
    ) -> float:
        """Seconds to sleep before the next iteration.

        A temporary failure waits its backoff delay; otherwise the reconcile interval,
        or less when an autoscaled queue's backlog sample is due sooner
        (``sample_due_in``). Either is shortened so a ``refresh`` coming due is not
        late. One already due and not started (the engine runs: its end wakes the loop)
        does not shorten the sleep, so the loop never spins.
        """
        outcome = self.last_outcome
        if outcome is not None and outcome.kind is OutcomeKind.TEMPORARY:
            wait = outcome.delay if outcome.delay is not None else settings.reconcile_interval
        else:
            wait = settings.reconcile_interval
            if sample_due_in is not None:
                wait = min(wait, sample_due_in)
        until_refresh = self._next_refresh_at(settings) - now
        if until_refresh > 0:
            wait = min(wait, until_refresh)
        return max(0.0, wait)

    def _next_refresh_at(self, settings: DaemonSettings) -> float:
        since = self.last_refresh_at if self.last_refresh_at is not None else self.started_at
        return since + settings.refresh_interval
