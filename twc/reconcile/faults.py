"""Faults the daemon survives, named, so they can be reported while they last.

A :class:`FaultBook` keeps the active faults (since when, latest message, which parts see
them); each is logged once when it starts and once when it clears. :func:`engine_fault`
and :func:`sample_fault` read class names and error text only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType

from twc.reconcile.outcome import UNWRITABLE_TEXT, FailureReason, classify


class Fault(StrEnum):
    """What is broken outside the daemon; stable values for logs, metrics and status."""

    TEMPORAL_UNAVAILABLE = "TemporalUnavailable"
    BACKLOG_SAMPLING_FAILED = "BacklogSamplingFailed"
    KUBERNETES_UNAVAILABLE = "KubernetesUnavailable"
    STATE_BACKEND_UNWRITABLE = "StateBackendUnwritable"
    OBJECTS_UNKNOWN = "ClusterObjectsUnknown"


BLOCKING = frozenset({Fault.KUBERNETES_UNAVAILABLE, Fault.STATE_BACKEND_UNWRITABLE})
"""Faults during which the daemon cannot apply the stack (``/readyz`` says so)."""


@dataclass(frozen=True, slots=True)
class ActiveFault:
    """One fault while it lasts: since when, latest message, which parts see it."""

    fault: Fault
    since: float
    since_wall: float
    message: str
    sources: frozenset[str]


@dataclass(frozen=True, slots=True)
class FaultChange:
    """A fault started (``raised``) or cleared after ``duration`` seconds."""

    fault: Fault
    raised: bool
    message: str
    duration: float = 0.0


class FaultBook:
    """The faults active right now; safe to read from the HTTP thread."""

    def __init__(self, clock: Callable[[], float], wall: Callable[[], float]) -> None:
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._active: dict[Fault, ActiveFault] = {}

    def report(self, fault: Fault, source: str, message: str) -> FaultChange | None:
        """``source`` sees ``fault`` now; the change when it was not active before."""
        with self._lock:
            current = self._active.get(fault)
            if current is None:
                now, wall = self._clock(), self._wall()
                self._active[fault] = ActiveFault(fault, now, wall, message, frozenset({source}))
                return FaultChange(fault, raised=True, message=message)
            sources = current.sources | {source}
            self._active[fault] = replace(current, message=message, sources=sources)
            return None

    def clear(self, fault: Fault, source: str) -> FaultChange | None:
        """``source`` no longer sees ``fault``; the change when no source does."""
        with self._lock:
            current = self._active.get(fault)
            if current is None or source not in current.sources:
                return None
            left = current.sources - {source}
            if left:
                self._active[fault] = replace(current, sources=left)
                return None
            del self._active[fault]
            took = self._clock() - current.since
            return FaultChange(fault, raised=False, message=current.message, duration=took)

    def active(self) -> Mapping[Fault, ActiveFault]:
        """The active faults (a read-only copy)."""
        with self._lock:
            return MappingProxyType(dict(self._active))


def engine_fault(reason: FailureReason | None, message: str) -> Fault | None:
    """The fault a failed engine run shows (backend unwritable, cluster unreachable) or ``None``."""
    text = message.lower()
    if reason is FailureReason.STATE_BACKEND or any(t in text for t in UNWRITABLE_TEXT):
        return Fault.STATE_BACKEND_UNWRITABLE
    if reason in (FailureReason.CONNECTION, FailureReason.TIMEOUT) and any(
        t in text for t in ("kubernetes", "kube-apiserver", "k8s")
    ):
        return Fault.KUBERNETES_UNAVAILABLE
    return None


def sample_fault(error: BaseException) -> Fault:
    """``TemporalUnavailable`` for a sample's transport failure, else ``BacklogSamplingFailed``."""
    status = getattr(getattr(error, "status", None), "name", None)
    transport = (FailureReason.CONNECTION, FailureReason.TIMEOUT)
    if status in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or classify(error).reason in transport:
        return Fault.TEMPORAL_UNAVAILABLE
    return Fault.BACKLOG_SAMPLING_FAILED
