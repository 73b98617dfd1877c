"""The desired-state hash, and the decision whether (and how widely) to run ``up``.

Each iteration the loop renders the desired fleet as plain data (``model_dump(mode=
"json")`` of the spec, the Queue-derived workers, the replica decisions), hashes it with
:func:`desired_state`, and asks :func:`decide_reconcile` what to do. An unchanged hash
means *skip*: the engine is not started at all. A few changed workers mean a targeted
``up`` of just their resources; anything broader means a full ``up``.

Hashes are over a canonical JSON form: object keys sorted, no whitespace, sets sorted,
tuples as lists. List order is kept, because in a fleet it can mean something (container
commands); the *workers* are keyed by name, so reordering them in a file changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

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
    """Return the canonical JSON text of plain data.

    Args:
        value: Dicts with string keys, lists, tuples, sets, strings, numbers, booleans
            and ``None``, nested freely.

    Returns:
        Compact JSON with sorted keys; equal data gives equal text whatever the
        insertion order of its dicts or the iteration order of its sets.

    Raises:
        TypeError: On anything else (objects, bytes, non-string keys): hashing a
            ``repr`` would silently depend on memory addresses or versions.
        ValueError: On NaN or infinite floats, which JSON cannot represent.
    """
    return json.dumps(
        _plain(value, "$"),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def state_hash(value: object) -> str:
    """Return the sha256 hex digest of :func:`canonical_json` of ``value``.

    Args:
        value: Plain data, as for :func:`canonical_json`.

    Returns:
        64 lowercase hex characters.
    """
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _plain(value: object, path: str) -> object:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value} cannot be hashed as JSON")
        return value
    if isinstance(value, Mapping):
        out: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: key {key!r} is not a string")
            out[key] = _plain(item, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, Set):
        items = [_plain(item, f"{path}{{}}") for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    raise TypeError(f"{path}: {type(value).__name__} is not plain data; dump it first")


@dataclass(frozen=True, slots=True)
class DesiredState:
    """Hashes of one rendering of the desired fleet."""

    fleet: str
    """Hash of everything below; equal fleets have equal hashes."""
    shared: str
    """Hash of the part not owned by one worker (connections, queues, secrets' digests)."""
    workers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Per worker name, the hash of its spec together with its replica decision."""


def desired_state(
    workers: Mapping[str, object],
    *,
    replicas: Mapping[str, int] | None = None,
    shared: object = None,
) -> DesiredState:
    """Hash a desired fleet.

    Args:
        workers: Per worker name, its desired spec as plain data.
        replicas: Per worker name, the replica count decided this iteration (autoscaled
            workers); a changed decision changes only that worker's hash.
        shared: Everything not owned by a single worker, as plain data; a change here
            changes every worker's environment, so it forces a full ``up``.

    Returns:
        The hashes.

    Raises:
        ValueError: If ``replicas`` names a worker not in ``workers``.
        TypeError: If any part is not plain data (see :func:`canonical_json`).
    """
    replicas = replicas or {}
    unknown = sorted(set(replicas) - set(workers))
    if unknown:
        raise ValueError(f"replica decisions for unknown workers: {', '.join(unknown)}")
    per_worker = {
        name: state_hash({"spec": spec, "replicas": replicas.get(name)})
        for name, spec in workers.items()
    }
    shared_hash = state_hash(shared)
    return DesiredState(
        fleet=state_hash({"shared": shared_hash, "workers": per_worker}),
        shared=shared_hash,
        workers=MappingProxyType(per_worker),
    )


def changed_workers(old: Mapping[str, str], new: Mapping[str, str]) -> frozenset[str]:
    """Return the workers whose hash differs, including added and removed ones.

    Args:
        old: Per worker name, the hash last applied.
        new: Per worker name, the hash desired now.

    Returns:
        Names present in only one mapping or with different hashes.
    """
    names = set(old) | set(new)
    return frozenset(name for name in names if old.get(name) != new.get(name))


class ReconcileAction(StrEnum):
    """What an iteration does with the engine."""

    SKIP = "skip"
    """Nothing: the engine is not started."""
    TARGETED = "targeted"
    """``up`` limited to the changed workers' resources."""
    FULL = "full"
    """``up`` of the whole stack."""


@dataclass(frozen=True, slots=True)
class ReconcileDecision:
    """What to do this iteration, and why."""

    action: ReconcileAction
    """Skip, targeted or full ``up``."""
    reason: str
    """One human-readable sentence for the log."""
    desired: DesiredState
    """The hashes the decision was made for; record them once the ``up`` succeeds."""
    added: frozenset[str] = frozenset()
    """Workers desired now but never applied."""
    removed: frozenset[str] = frozenset()
    """Workers applied before but no longer desired (a targeted ``up`` deletes them)."""
    modified: frozenset[str] = frozenset()
    """Workers in both whose hash changed."""

    @property
    def workers(self) -> frozenset[str]:
        """All changed workers: the targets of a targeted ``up``."""
        return self.added | self.removed | self.modified


TARGET_THRESHOLD = 50
"""An ``up`` is targeted at the changed workers when at most this many changed: a
targeted ``up`` builds only its workers, a full one the whole stack (shard)."""


def decide_reconcile(
    previous: DesiredState | None,
    new: DesiredState,
    *,
    target_threshold: int = TARGET_THRESHOLD,
    force: bool = False,
    blocked: str | None = None,
) -> ReconcileDecision:
    """Decide whether to run ``up``, and whether to target it.

    Args:
        previous: The hashes of the last successful ``up``, or ``None`` if there was none
            since the daemon started (then the stack may hold anything: full ``up``).
        new: The hashes desired now.
        target_threshold: Target the ``up`` when at most this many workers changed;
            0 disables targeting.
        force: Run a full ``up`` whatever the hashes say (after drift was found).
        blocked: A fleet hash whose ``up`` failed permanently; it is not retried, so a
            broken desired state is reported once rather than every interval.

    Returns:
        The decision.
    """
    if force:
        return ReconcileDecision(ReconcileAction.FULL, "full up requested", new)
    if blocked is not None and new.fleet == blocked:
        # Checked before "nothing applied yet": a daemon whose very first up failed
        # permanently must not retry it every interval either.
        return ReconcileDecision(
            ReconcileAction.SKIP, "desired state failed permanently; waiting for a change", new
        )
    if previous is None:
        return ReconcileDecision(ReconcileAction.FULL, "nothing applied yet", new)
    if new.fleet == previous.fleet:
        return ReconcileDecision(ReconcileAction.SKIP, "desired state unchanged", new)
    old_names, new_names = set(previous.workers), set(new.workers)
    added = frozenset(new_names - old_names)
    removed = frozenset(old_names - new_names)
    modified = changed_workers(previous.workers, new.workers) - added - removed
    count = len(added) + len(removed) + len(modified)

    def decision(action: ReconcileAction, reason: str) -> ReconcileDecision:
        return ReconcileDecision(action, reason, new, added, removed, modified)

    if new.shared != previous.shared:
        return decision(ReconcileAction.FULL, "shared resources changed")
    if 0 < count <= target_threshold:
        return decision(ReconcileAction.TARGETED, f"{count} worker(s) changed")
    return decision(ReconcileAction.FULL, f"{count} workers changed (more than {target_threshold})")
