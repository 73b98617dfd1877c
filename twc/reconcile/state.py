"""The immutable state the reconcile loop carries between iterations, and its sleep;
the desired state's hashes, and whether (and how widely) to run ``up``.

:class:`LoopState` is replaced by pure transitions that take the time as an argument;
:func:`sleep` returns as soon as its ``wakeup`` event is set (SIGTERM, a watch event).
Hashes are over canonical JSON (keys and sets sorted, tuples as lists, list order kept);
workers are keyed by name, so reordering them in a file changes nothing. An unchanged
hash skips the engine; a few changed workers get a targeted ``up``; more, a full one.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Set
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from twc.reconcile.autoscale import ScalingState
from twc.reconcile.outcome import Outcome, OutcomeKind
from twc.reconcile.settings import DaemonSettings


def canonical_json(value: object) -> str:
    """``value`` (plain data) as canonical JSON; TypeError / ValueError for what is not."""
    return json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_sorted_set,
    )


def state_hash(value: object) -> str:
    """The sha256 hex digest of :func:`canonical_json` of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _sorted_set(value: object) -> list[Any]:
    if not isinstance(value, Set):
        raise TypeError(f"{type(value).__name__} is not plain data; dump it first")
    return sorted(value, key=canonical_json)


@dataclass(frozen=True, slots=True)
class DesiredState:
    """Hashes of one rendering of the desired fleet."""

    fleet: str  # of everything below
    shared: str  # of what no one worker owns (connections, queues, secrets' digests)
    workers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def desired_state(workers: Mapping[str, object], *, shared: object = None) -> DesiredState:
    """Hash a desired fleet: per worker its spec, and what every worker shares."""
    per_worker = {name: state_hash({"spec": spec}) for name, spec in workers.items()}
    shared_hash = state_hash(shared)
    return DesiredState(
        fleet=state_hash({"shared": shared_hash, "workers": per_worker}),
        shared=shared_hash,
        workers=MappingProxyType(per_worker),
    )


def changed_workers(old: Mapping[str, str], new: Mapping[str, str]) -> frozenset[str]:
    """The workers whose hash differs, added and removed ones included."""
    return frozenset(name for name in set(old) | set(new) if old.get(name) != new.get(name))


class ReconcileAction(StrEnum):
    """What an iteration does with the engine."""

    SKIP = "skip"
    TARGETED = "targeted"  # up of the changed workers' resources only
    FULL = "full"


@dataclass(frozen=True, slots=True)
class ReconcileDecision:
    """What to do this iteration, and why."""

    action: ReconcileAction
    reason: str
    added: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    modified: frozenset[str] = frozenset()

    @property
    def workers(self) -> frozenset[str]:
        """All changed workers: the targets of a targeted ``up``."""
        return self.added | self.removed | self.modified


TARGET_THRESHOLD = 50
"""At most this many changed workers get a targeted ``up``."""


def decide_reconcile(
    previous: DesiredState | None,
    new: DesiredState,
    *,
    target_threshold: int = TARGET_THRESHOLD,
    blocked: str | None = None,
) -> ReconcileDecision:
    """Whether to run ``up``, and whether to target it."""
    if blocked is not None and new.fleet == blocked:
        # Before "nothing applied yet": a failed first up is not retried every interval.
        return ReconcileDecision(
            ReconcileAction.SKIP, "desired state failed permanently; waiting for a change"
        )
    if previous is None:
        return ReconcileDecision(ReconcileAction.FULL, "nothing applied yet")
    if new.fleet == previous.fleet:
        return ReconcileDecision(ReconcileAction.SKIP, "desired state unchanged")
    added = frozenset(set(new.workers) - set(previous.workers))
    removed = frozenset(set(previous.workers) - set(new.workers))
    modified = changed_workers(previous.workers, new.workers) - added - removed
    count = len(added) + len(removed) + len(modified)
    if new.shared != previous.shared:
        action, reason = ReconcileAction.FULL, "shared resources changed"
    elif 0 < count <= target_threshold:
        action, reason = ReconcileAction.TARGETED, f"{count} worker(s) changed"
    else:
        action, reason = (
            ReconcileAction.FULL,
            f"{count} workers changed (more than {target_threshold})",
        )
    return ReconcileDecision(action, reason, added, removed, modified)


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
