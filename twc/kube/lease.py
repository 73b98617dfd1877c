"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

With ``--leader-elect`` only the daemon holding the Lease applies the stack; the others
wait as hot standbys. The protocol is client-go's ``leaderelection``: a candidate takes
the Lease when it is free or when its record has not changed for ``lease_duration``
seconds *as observed on the candidate's own clock* (so clock skew between pods does not
matter); the leader renews every ``retry_period`` and stops leading when it could not
renew for ``renew_deadline``. Writes carry the ``resourceVersion`` they read, so two
candidates can never both win the same round. On a clean stop the leader releases the
Lease, and a standby takes over within one ``retry_period``.

:func:`lease_action` holds the decision and is pure (time is an argument).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from twc.timestamps import rfc3339_micro

__all__ = [
    "LeaseAction",
    "LeaseElector",
    "LeaseRecord",
    "LeaseTimings",
    "lease_action",
    "lease_name_for",
]

logger = logging.getLogger(__name__)


class LeaseTimings(Protocol):
    """The election's timings (the daemon's ``LeaderElectionSettings``)."""

    @property
    def lease_duration(self) -> float:
        """Seconds a non-leader waits after the last renewal before taking the lease."""
        ...

    @property
    def renew_deadline(self) -> float:
        """Seconds the leader keeps retrying a renewal before it stops leading."""
        ...

    @property
    def retry_period(self) -> float:
        """Seconds between attempts to acquire or renew."""
        ...


def lease_name_for(project: str, stack: str) -> str:
    """The default Lease name of a stack: a valid object name from project and stack."""
    raw = f"{project}-{stack}-daemon".lower()
    cleaned = "".join(c if c.isalnum() or c in "-." else "-" for c in raw).strip("-.")
    return cleaned[:253] or "twc-daemon"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What the Lease says, as far as the election cares."""

    holder: str
    """``spec.holderIdentity``; empty when released."""
    duration: float
    """``spec.leaseDurationSeconds``."""
    renew_time: str
    """``spec.renewTime`` as written; compared for change, never parsed."""
    acquire_time: str
    """``spec.acquireTime`` as written."""
    transitions: int
    """``spec.leaseTransitions``."""

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        """Read the record from a Lease object (camelCase dict)."""
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=float(spec.get("leaseDurationSeconds") or 0),
            renew_time=str(spec.get("renewTime") or ""),
            acquire_time=str(spec.get("acquireTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


class LeaseAction(StrEnum):
    """What a candidate does this round."""

    ACQUIRE = "acquire"
    """Write the Lease with itself as holder (it is free or expired)."""
    RENEW = "renew"
    """It already holds the Lease: write a new renew time."""
    WAIT = "wait"
    """Someone else holds a live Lease."""


def lease_action(
    record: LeaseRecord | None,
    *,
    identity: str,
    observed_at: float | None,
    now: float,
    lease_duration: float,
) -> LeaseAction:
    """Decide this round's move.

    Args:
        record: The Lease's record, or ``None`` if the Lease does not exist.
        identity: This candidate's identity.
        observed_at: When (on this candidate's monotonic clock) the record was last seen
            to change; ``None`` if it was never seen.
        now: The current time on the same clock.
        lease_duration: Seconds a record may stay unchanged before it counts as expired.

    Returns:
        The action.
    """
    if record is None or not record.holder:
        return LeaseAction.ACQUIRE
    if record.holder == identity:
        return LeaseAction.RENEW
    if observed_at is None or now - observed_at < lease_duration:
        # Someone else's record, seen changing within the lease duration (or just now
        # for the first time: give its holder a full duration to renew).
        return LeaseAction.WAIT
    return LeaseAction.ACQUIRE


class LeaseElector:
    """Takes part in the election for one Lease from a background thread."""

    def __init__(
        self,
        coordination_api: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        settings: LeaseTimings,
        on_lost: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """Prepare the elector.

        Args:
            coordination_api: A ``kubernetes.client.CoordinationV1Api``.
            name: The Lease's name.
            namespace: The Lease's namespace.
            identity: This daemon's identity (unique per process).
            settings: Lease duration, renew deadline and retry period.
            on_lost: Called (from the elector thread) when leadership is lost.
            clock: Monotonic time.
            wall: Unix time, for the timestamps written into the Lease.
        """
        self._api = coordination_api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self._settings = settings
        self._on_lost = on_lost
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._leading = False
        self._renewed_at: float | None = None
        self._observed: LeaseRecord | None = None
        self._observed_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def is_leader(self) -> bool:
        """Whether this daemon holds a Lease it renewed within the lease duration."""
        with self._lock:
            if not self._leading or self._renewed_at is None:
                return False
            return self._clock() - self._renewed_at < self._settings.lease_duration

    def start(self) -> LeaseElector:
        """Run the election in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="twc-leader", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, release: bool = True) -> None:
        """Stop taking part; with ``release``, hand the Lease back so a standby takes
        over at once instead of after the lease duration."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._settings.retry_period + 5)
        if release and self._leading:
            try:
                self._write_release()
                logger.info("released lease %s/%s", self.namespace, self.name)
            except Exception as exc:  # the lease then simply expires  # noqa: BLE001 - a failed round is retried; losing the lease is decided by time
                logger.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        with self._lock:
            self._leading = False

    def try_once(self) -> bool:
        """One round: read, decide, maybe write. Returns whether this daemon leads."""
        lease = self._read()
        record = LeaseRecord.from_lease(lease) if lease is not None else None
        now = self._clock()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        action = lease_action(
            record,
            identity=self.identity,
            observed_at=self._observed_at,
            now=now,
            lease_duration=self._settings.lease_duration,
        )
        if action is LeaseAction.WAIT:
            return False
        self._write(lease, record, renew=action is LeaseAction.RENEW)
        with self._lock:
            self._renewed_at = now
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                leading = self.try_once()
            except Exception as exc:  # noqa: BLE001 - a failed round is retried; losing the lease is decided by time
                logger.warning("lease %s/%s: %s", self.namespace, self.name, exc)
                leading = False
            self._update(leading)
            self._stop.wait(self._settings.retry_period)

    def _update(self, succeeded: bool) -> None:
        now = self._clock()
        lost = False
        with self._lock:
            if succeeded and not self._leading:
                self._leading = True
                logger.info("acquired lease %s/%s as %s", self.namespace, self.name, self.identity)
            elif not succeeded and self._leading:
                renewed = self._renewed_at if self._renewed_at is not None else now
                if now - renewed >= self._settings.renew_deadline:
                    self._leading = False
                    lost = True
        if lost:
            logger.error("lost lease %s/%s", self.namespace, self.name)
            self._on_lost()

    def _read(self) -> dict[str, Any] | None:
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise
        return dict(self._api.api_client.sanitize_for_serialization(lease))

    def _write(
        self, lease: dict[str, Any] | None, record: LeaseRecord | None, *, renew: bool
    ) -> None:
        now = rfc3339_micro(self._wall())
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self._settings.lease_duration)),
            "renewTime": now,
            "acquireTime": record.acquire_time if renew and record else now,
            "leaseTransitions": (record.transitions if record else 0) + (0 if renew else 1),
        }
        if lease is None:
            body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
            self._api.create_namespaced_lease(self.namespace, body)
            return
        metadata = {
            "name": self.name,
            "namespace": self.namespace,
            # Optimistic concurrency: a competing write in between makes this one 409.
            "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion"),
        }
        self._api.replace_namespaced_lease(
            self.name, self.namespace, {"metadata": metadata, "spec": spec}
        )

    def _write_release(self) -> None:
        lease = self._read()
        if lease is None or LeaseRecord.from_lease(lease).holder != self.identity:
            return
        spec = dict(lease.get("spec") or {})
        spec.update(
            {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": rfc3339_micro(self._wall()),
            }
        )
        metadata = {
            "name": self.name,
            "namespace": self.namespace,
            "resourceVersion": (lease.get("metadata") or {}).get("resourceVersion"),
        }
        self._api.replace_namespaced_lease(
            self.name, self.namespace, {"metadata": metadata, "spec": spec}
        )
