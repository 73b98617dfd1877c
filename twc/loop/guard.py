"""The deletion guard: one ``up`` deletes at most a share of the stack's workers.

Deleting many running workers at once is almost never what someone meant: a CRD was
deleted (and with it every object of its kind), a list answered wrongly, a fleet file
lost half its workers in a bad merge. So when the desired state would delete more than
``max_share`` of the workers the stack runs (at least one is always allowed), those
deletions are *held*: the workers stay in the desired state with the inputs they last
came from (:func:`twc.desired.held_objects`), everything else is applied, and
``DeletionsHeld`` is reported with the workers named. The deletions proceed when the
same set was wanted for ``confirm_after`` seconds over ``confirm_observations``
iterations (the situation is stable, not a blip), or when an operator approves exactly
that set (``twc approve --stack S`` writes its digest on the stack's record).

:func:`judge_deletions` is the pure decision; :class:`DeletionGuard` keeps the hold
between iterations, the previous desired state the held workers come back from, and
reads approvals. Time is an argument.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from twc.connections import Registry
from twc.desired import (
    DesiredFleet,
    DesiredInputs,
    HoldFailed,
    ObjectList,
    desired_fleet,
    held_objects,
)
from twc.kube.record import HeldRecord, RecordStore
from twc.loop.settings import DeletionGuardSettings
from twc.spec import Fleet, load_fleet

__all__ = ["DeletionGuard", "GuardVerdict", "Hold", "deletion_digest", "judge_deletions"]

logger = logging.getLogger(__name__)


def deletion_digest(workers: Collection[str]) -> str:
    """Names one exact set of deletions (what an approval refers to)."""
    return hashlib.sha256("\n".join(sorted(workers)).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Hold:
    """Deletions held, and since when."""

    workers: frozenset[str]
    """The workers whose deletion is held."""
    digest: str
    """:func:`deletion_digest` of :attr:`workers`."""
    since: float
    """When this exact set was first wanted (monotonic)."""
    since_wall: float
    """The same moment in Unix time, for people."""
    observations: int
    """Iterations that wanted this exact set."""
    total: int
    """The stack's workers when it was last judged."""
    allowed: int
    """How many of them one ``up`` may delete."""

    @property
    def reason(self) -> str:
        """Why, in words."""
        return (
            f"{len(self.workers)} of {self.total} workers would be deleted at once, more than "
            f"the {self.allowed} allowed; held until confirmed (twc approve) or still wanted "
            "after the confirmation period"
        )

    def record(self) -> HeldRecord:
        """What the daemon publishes for ``twc approve``."""
        return HeldRecord(
            digest=self.digest, workers=tuple(sorted(self.workers)), reason=self.reason
        )


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """What the guard decided this iteration."""

    deleting: frozenset[str]
    """Workers the desired state would delete."""
    hold: Hold | None
    """The deletions held now; ``None`` when they may proceed (or there are none)."""
    released: str = ""
    """When held deletions proceed this time: why (``confirmed``, ``approved``)."""


def judge_deletions(
    deleting: Collection[str],
    total: int,
    previous: Hold | None,
    *,
    now: float,
    wall: float,
    settings: DeletionGuardSettings,
    approved: str | None,
) -> GuardVerdict:
    """Decide whether the deletions of this iteration may proceed.

    Args:
        deleting: Workers the stack runs that the desired state no longer has.
        total: How many workers the stack runs.
        previous: The hold of the previous iteration, if any.
        now: Monotonic time.
        wall: Unix time.
        settings: The share allowed and the confirmation period.
        approved: The digest an operator approved, if any.

    Returns:
        The verdict; a hold keeps its start time while the set stays the same, and
        starts again when it changes.
    """
    gone = frozenset(deleting)
    allowed = settings.allowed(total)
    if not settings.enabled or len(gone) <= allowed:
        return GuardVerdict(gone, None)
    digest = deletion_digest(gone)
    if previous is not None and previous.digest == digest:
        hold = Hold(
            gone,
            digest,
            previous.since,
            previous.since_wall,
            previous.observations + 1,
            total,
            allowed,
        )
    else:
        hold = Hold(gone, digest, now, wall, 1, total, allowed)
    if approved == digest:
        return GuardVerdict(gone, None, released="approved")
    if (
        now - hold.since >= settings.confirm_after
        and hold.observations >= settings.confirm_observations
    ):
        return GuardVerdict(gone, None, released="confirmed")
    return GuardVerdict(gone, hold)


class DeletionGuard:
    """The guard across iterations: the hold, the previous desired state, approvals."""

    def __init__(
        self,
        settings: DeletionGuardSettings,
        *,
        registry: Registry,
        file: str,
        record: RecordStore | None = None,
        stack: str = "",
        on_verdict: Callable[[GuardVerdict], None] | None = None,
    ) -> None:
        """Guard one stack.

        Args:
            settings: The share and the confirmation period.
            registry: The connection-provider registry (to recompute desired states).
            file: The fleet file's name, for messages.
            record: The stack's record (approvals, and the previous state after a
                restart); ``None`` without a cluster.
            stack: The stack's name, for logs.
            on_verdict: Told each verdict at once, so a hold is reported even when the
                iteration cannot go on (its held workers cannot be put back).
        """
        self.settings = settings
        self._registry = registry
        self._file = file
        self._record = record
        self._stack = stack
        self.hold: Hold | None = None
        self.previous: DesiredFleet | None = None
        self.verdict: GuardVerdict | None = None
        self._released: str | None = None
        self._on_verdict = on_verdict

    def remember(self, accepted: Mapping[str, Any], fleet: Mapping[str, Any] | None) -> None:
        """Start from what the stack's record says (after a restart): the desired state
        its last accepted objects and fleet document make."""
        if fleet is None or self.previous is not None:
            return
        try:
            self.previous = desired_fleet(
                load_fleet(dict(fleet), self._file),
                DesiredInputs(
                    fleet=dict(fleet),
                    cluster={k: ObjectList.known(v.values()) for k, v in accepted.items()},
                    accepted={k: dict(v) for k, v in accepted.items()},
                ),
                registry=self._registry,
                file=self._file,
            )
        except Exception as exc:  # noqa: BLE001 - without it, held workers cannot come back; the guard still holds
            logger.warning("[%s] the recorded desired state does not load: %s", self._stack, exc)

    def guard(
        self,
        fleet: Fleet,
        desired: DesiredFleet,
        existing: Collection[str] | None,
        *,
        now: float,
        wall: float,
    ) -> DesiredFleet:
        """``desired``, with the workers whose deletion is held put back.

        Args:
            fleet: The fleet file this iteration read.
            desired: The desired state as observed.
            existing: The workers the stack runs now (their Deployments); ``None``
                when unknown, then the previous desired state's workers count.
            now: Monotonic time.
            wall: Unix time.

        Raises:
            HoldFailed: Held workers cannot be put back (nothing says what they were):
                nothing may be applied until the hold is confirmed or approved.
        """
        if existing is None:
            existing = set(self.previous.workers) if self.previous is not None else set()
        running = set(existing)
        deleting = running - set(desired.workers)
        approved: str | None = None
        if len(deleting) > self.settings.allowed(len(running)):
            # Once released, the same deletions stay released until they are done (an
            # up that fails after a release must not start the wait again).
            digest = deletion_digest(deleting)
            approved = digest if digest == self._released else self._approved()
        verdict = judge_deletions(
            deleting,
            len(running),
            self.hold,
            now=now,
            wall=wall,
            settings=self.settings,
            approved=approved,
        )
        self.verdict = verdict
        if verdict.released and deletion_digest(verdict.deleting) != self._released:
            self._released = deletion_digest(verdict.deleting)
            logger.warning(
                "[%s] deleting %d workers (%s): %s",
                self._stack,
                len(verdict.deleting),
                verdict.released,
                ", ".join(sorted(verdict.deleting)),
            )
        self.hold = verdict.hold
        if self._on_verdict is not None:
            self._on_verdict(verdict)
        if verdict.hold is None:
            return desired
        if self.previous is None:
            raise HoldFailed(verdict.hold.workers, "no earlier desired state knows them")
        held, missing = held_objects(self.previous, verdict.hold.workers, desired)
        if missing:
            raise HoldFailed(missing, "no earlier input of theirs is known")
        inputs = desired.inputs.model_copy(update={"held": held})
        return desired_fleet(fleet, inputs, registry=self._registry, file=self._file)

    def planned(self, desired: DesiredFleet) -> None:
        """The desired state this iteration planned with: where held workers come from
        next time."""
        self.previous = desired

    def _approved(self) -> str | None:
        if self._record is None:
            return None
        try:
            return self._record.approved()
        except Exception as exc:  # noqa: BLE001 - no approval read is no approval
            logger.warning(
                "[%s] could not read approvals from %s: %s", self._stack, self._record, exc
            )
            return None
