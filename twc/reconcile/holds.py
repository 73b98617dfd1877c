"""The daemon's hold on mass deletions: :func:`twc.desired.judge_deletions` kept across iterations.

Held workers stay desired with the inputs they last came from; ``DeletionsHeld`` names them
(on the stack's record too, for ``twc approve``). A released set stays released while its
deletions are under way; the same set coming back later is held again.
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
    """One stack's hold, previous desired state and release, across iterations."""

    def __init__(
        self,
        *,
        registry: Registry,
        file: str,
        record: RecordStore | None = None,
        stack: str = "",
        on_verdict: Callable[[GuardVerdict], None] | None = None,
    ) -> None:
        self._registry = registry
        self._file = file
        self._record = record
        self._stack = stack
        self._on_verdict = on_verdict
        self.hold: Hold | None = None
        self.previous: DesiredFleet | None = None
        self.verdict: GuardVerdict | None = None
        self._releasing: frozenset[str] = frozenset()

    def remember(self, accepted: Mapping[str, Any], fleet: Mapping[str, Any] | None) -> None:
        """Start from the desired state the record's last accepted objects and fleet make."""
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
        except Exception as exc:  # noqa: BLE001 - held workers cannot come back; the guard still holds
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
        """``desired`` with held workers put back; ``existing``: workers running now, or None."""
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
            names = ", ".join(sorted(verdict.deleting))
            logger.warning(
                "[%s] deleting %d workers (%s): %s",
                self._stack,
                len(verdict.deleting),
                verdict.released,
                names,
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
        """The desired state this iteration planned with: where held workers come from."""
        self.previous = desired

    def _approved(self) -> str | None:
        if self._record is None:
            return None
        try:
            return self._record.approved()
        except Exception as exc:  # noqa: BLE001 - no approval read is no approval: still held
            logger.warning(
                "[%s] could not read approvals from %s: %s", self._stack, self._record, exc
            )
            return None
