"""The desired state's hashes, and whether (and how widely) to run ``up``.

Hashes are over canonical JSON (keys and sets sorted, tuples as lists, list order kept);
workers are keyed by name, so reordering them in a file changes nothing. An unchanged
hash skips the engine; a few changed workers get a targeted ``up``; more, a full one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

__all__ = [
    "DesiredState",
    "ReconcileAction",
    "ReconcileDecision",
    "canonical_json",
    "changed_workers",
    "decide_reconcile",
    "desired_state",
    "state_hash",
]


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
    desired: DesiredState  # recorded once the up succeeds
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
            ReconcileAction.SKIP, "desired state failed permanently; waiting for a change", new
        )
    if previous is None:
        return ReconcileDecision(ReconcileAction.FULL, "nothing applied yet", new)
    if new.fleet == previous.fleet:
        return ReconcileDecision(ReconcileAction.SKIP, "desired state unchanged", new)
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
    return ReconcileDecision(action, reason, new, added, removed, modified)
