"""Faults the daemon survives, named, so they can be reported while they last.

A failing step already becomes an :class:`~twc.loop.outcome.Outcome` with a
backoff. Some failures are not one step's, though: Temporal down makes every backlog
sample fail while iterations still succeed (replicas are held), and an unreachable
kube-apiserver breaks the Queue watch in its own thread. A :class:`FaultBook` keeps the
faults active right now, each with when it started, its latest message and which parts
of the daemon saw it (its *sources*); the loop publishes them on ``/status``, as the
``twc_fault_active`` metric, and logs each fault once when it starts and once when it
clears, with how long it lasted.

:func:`engine_fault` and :func:`sample_fault` say which fault an error is. They read
class names and error text only, so this module imports neither Pulumi nor temporalio.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType

from twc.loop.outcome import UNWRITABLE_TEXT, FailureReason, classify

__all__ = [
    "BLOCKING",
    "ActiveFault",
    "Fault",
    "FaultBook",
    "FaultChange",
    "engine_fault",
    "sample_fault",
]


class Fault(StrEnum):
    """What is broken outside the daemon; stable values for logs, metrics and status."""

    TEMPORAL_UNAVAILABLE = "TemporalUnavailable"
    """Temporal does not answer backlog samples; autoscaled replicas are held."""
    BACKLOG_SAMPLING_FAILED = "BacklogSamplingFailed"
    """Temporal answers, but refused a backlog sample; those replicas are held."""
    KUBERNETES_UNAVAILABLE = "KubernetesUnavailable"
    """The kube-apiserver cannot be reached (Queue watch, replica reads or the engine)."""
    STATE_BACKEND_UNWRITABLE = "StateBackendUnwritable"
    """The engine cannot write the stack's state (lock, checkpoint) to its backend."""
    OBJECTS_UNKNOWN = "ClusterObjectsUnknown"
    """A kind's list failed (denied, an error, a timeout, a 404 while its CRD exists):
    its objects are unknown, so nothing of that kind is created, changed or deleted; the
    last accepted objects stay (sources: the kind keys)."""


# Faults during which the daemon cannot apply the stack: /readyz says so.
BLOCKING: frozenset[Fault] = frozenset(
    {Fault.KUBERNETES_UNAVAILABLE, Fault.STATE_BACKEND_UNWRITABLE}
)


@dataclass(frozen=True, slots=True)
class ActiveFault:
    """One fault while it lasts."""

    fault: Fault
    """Which fault."""
    since: float
    """When it was first seen, on the loop's monotonic clock."""
    since_wall: float
    """The same moment in Unix time, for people."""
    message: str
    """The latest error text that reported it."""
    sources: frozenset[str]
    """Which parts of the daemon see it now (``queue-watch``, ``replicas``, ``engine``...)."""


@dataclass(frozen=True, slots=True)
class FaultChange:
    """A fault started or cleared; the loop logs it and updates the metrics."""

    fault: Fault
    """Which fault."""
    raised: bool
    """True when it started, False when it cleared."""
    message: str
    """The error text (raised) or the last one seen (cleared)."""
    duration: float = 0.0
    """How long it lasted, in seconds (cleared only)."""


class FaultBook:
    """The faults active right now; safe to read from the HTTP thread."""

    def __init__(self, clock: Callable[[], float], wall: Callable[[], float]) -> None:
        """Start with no fault.

        Args:
            clock: Monotonic time in seconds.
            wall: Unix time in seconds.
        """
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._active: dict[Fault, ActiveFault] = {}

    def report(self, fault: Fault, source: str, message: str) -> FaultChange | None:
        """Record that ``source`` sees ``fault`` now.

        Returns:
            The change when the fault was not active before, else ``None``.
        """
        with self._lock:
            current = self._active.get(fault)
            if current is None:
                self._active[fault] = ActiveFault(
                    fault, self._clock(), self._wall(), message, frozenset({source})
                )
                return FaultChange(fault, raised=True, message=message)
            self._active[fault] = replace(
                current, message=message, sources=current.sources | {source}
            )
            return None

    def clear(self, fault: Fault, source: str) -> FaultChange | None:
        """Record that ``source`` no longer sees ``fault``.

        Returns:
            The change when no source sees the fault any more, else ``None``.
        """
        with self._lock:
            current = self._active.get(fault)
            if current is None or source not in current.sources:
                return None
            left = current.sources - {source}
            if left:
                self._active[fault] = replace(current, sources=left)
                return None
            del self._active[fault]
            return FaultChange(
                fault, raised=False, message=current.message, duration=self._clock() - current.since
            )

    def active(self) -> Mapping[Fault, ActiveFault]:
        """The active faults (a read-only copy)."""
        with self._lock:
            return MappingProxyType(dict(self._active))


_KUBERNETES_TEXT = ("kubernetes", "kube-apiserver", "k8s")
# temporalio's RPCError carries a status code enum; these mean "no server there".
_UNREACHABLE_STATUS = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def engine_fault(reason: FailureReason | None, message: str) -> Fault | None:
    """Which fault a failed engine run (``up``/``refresh``) shows, if any.

    Args:
        reason: The outcome's failure label.
        message: The error text (the engine's stderr).

    Returns:
        ``StateBackendUnwritable`` when the backend could not write, or
        ``KubernetesUnavailable`` when the cluster could not be reached; ``None`` for
        any other failure.
    """
    text = message.lower()
    if reason is FailureReason.STATE_BACKEND or any(t in text for t in UNWRITABLE_TEXT):
        return Fault.STATE_BACKEND_UNWRITABLE
    if reason in (FailureReason.CONNECTION, FailureReason.TIMEOUT) and any(
        t in text for t in _KUBERNETES_TEXT
    ):
        return Fault.KUBERNETES_UNAVAILABLE
    return None


def sample_fault(error: BaseException) -> Fault:
    """Which fault a failed backlog sample shows.

    Args:
        error: What the sample raised.

    Returns:
        ``TemporalUnavailable`` for transport failures (connection refused, timeouts,
        gRPC ``UNAVAILABLE``/``DEADLINE_EXCEEDED``), else ``BacklogSamplingFailed``.
    """
    status = getattr(getattr(error, "status", None), "name", None)
    if status in _UNREACHABLE_STATUS:
        return Fault.TEMPORAL_UNAVAILABLE
    if classify(error).reason in (FailureReason.CONNECTION, FailureReason.TIMEOUT):
        return Fault.TEMPORAL_UNAVAILABLE
    return Fault.BACKLOG_SAMPLING_FAILED
