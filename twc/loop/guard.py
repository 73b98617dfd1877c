"""The daemon's deletion guard: the verdict of :func:`twc.desired.judge_deletions` kept
across iterations.

While deletions are held the workers stay in the desired state with the inputs they
last came from (:func:`twc.desired.held_objects`), everything else is applied, and
``DeletionsHeld`` is reported with the workers named (on the stack's record too, for
``twc approve``). A released set (approved, or ``deletionGuard.releaseAfter`` when the
fleet opts in) stays released while the deletions are under way; once none of them is
wanted any more the release is spent, so the same set coming back later is held again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from twc.connections import Registry
from twc.desired import (
    DesiredFleet,
    DesiredInputs,
    GuardVerdict,
    Hold,
    HoldFailed,
    ObjectList,
    deletion_digest,
    desired_fleet,
    held_objects,
    judge_deletions,
)
from twc.kube.record import RecordStore
from twc.spec import Fleet, load_fleet

__all__ = ["DeletionGuard", "GuardVerdict", "Hold"]

logger = logging.getLogger(__name__)


class DeletionGuard:
    """The guard across iterations: the hold, the previous desired state, approvals."""

    def __init__(
        self,
        *,
        registry: Registry,
        file: str,
        record: RecordStore | None = None,
        stack: str = "",
        on_verdict: Callable[[GuardVerdict], None] | None = None,
    ) -> None:
        """Guard one stack (its share and release are the fleet's ``deletionGuard``).

        Args:
            registry: The connection-provider registry (to recompute desired states).
            file: The fleet file's name, for messages.
            record: The stack's record (approvals, and the previous state after a
                restart); ``None`` without a cluster.
            stack: The stack's name, for logs.
            on_verdict: Told each verdict at once, so a hold is reported even when the
                iteration cannot go on (its held workers cannot be put back).
        """
        self._registry = registry
        self._file = file
        self._record = record
        self._stack = stack
        self.hold: Hold | None = None
        self.previous: DesiredFleet | None = None
        self.verdict: GuardVerdict | None = None
        self._releasing: frozenset[str] = frozenset()
        """The deletions released and under way: a part of them still wanted stays
        released (an ``up`` that failed midway does not ask again)."""
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
            fleet: The fleet file this iteration read (its ``deletionGuard``).
            desired: The desired state as observed.
            existing: The workers the stack runs now (their Deployments); ``None``
                when unknown, then the previous desired state's workers count.
            now: Monotonic time.
            wall: Unix time.

        Raises:
            HoldFailed: Held workers cannot be put back (nothing says what they were):
                nothing may be applied until the hold is approved.
        """
        if existing is None:
            existing = set(self.previous.workers) if self.previous is not None else set()
        running = set(existing)
        deleting = frozenset(running - set(desired.workers))
        settings = fleet.deletion_guard
        if not deleting or not deleting <= self._releasing:
            self._releasing = frozenset()
        approved: str | None = None
        if len(deleting) > settings.allowed(len(running)):
            approved = deletion_digest(deleting) if self._releasing else self._approved()
        verdict = judge_deletions(
            deleting,
            len(running),
            self.hold,
            now=now,
            wall=wall,
            settings=settings,
            approved=approved,
        )
        self.verdict = verdict
        if verdict.released and not self._releasing:
            self._releasing = verdict.deleting
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
        except Exception as exc:  # noqa: BLE001 - no approval read is no approval: the deletions stay held
            logger.warning(
                "[%s] could not read approvals from %s: %s", self._stack, self._record, exc
            )
            return None
