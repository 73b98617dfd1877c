"""Errors that carry their retry meaning, and the frozen outcome of a reconcile step.

:class:`TemporaryError` retries, :class:`PermanentError` waits for the desired state to
change, anything else is :func:`classify`-ed (by name: Pulumi and temporalio are not
imported); :func:`outcome_of` makes the :class:`Outcome` with its backoff.

The faults the daemon survives are named, so they can be reported while they last: a
:class:`FaultBook` keeps the active ones (since when, latest message, which parts see
them); each is logged once when it starts and once when it clears. :func:`engine_fault`
and :func:`sample_fault` read class names and error text only.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from twc.errors import PermanentError as PermanentError
from twc.errors import TemporaryError as TemporaryError
from twc.reconcile.settings import BackoffSettings


class EngineNotStarted(TemporaryError):
    """An engine run that waited for a slot while the daemon stopped: it never started."""


class OutcomeKind(StrEnum):
    """How a step ended."""

    SUCCESS = "success"
    TEMPORARY = "temporary"
    PERMANENT = "permanent"


class FailureReason(StrEnum):
    """Stable labels for failures, used in logs and the error-count metric."""

    TEMPORARY = "Temporary"
    PERMANENT = "Permanent"
    CONCURRENT_UPDATE = "ConcurrentUpdate"
    STATE_BACKEND = "StateBackendUnwritable"
    CONNECTION = "ConnectionFailed"
    DELETIONS_HELD = "DeletionsHeld"  # the ownership check refused deletions beyond the share
    TIMEOUT = "Timeout"
    INVALID_SPEC = "InvalidSpec"
    ENGINE_DEADLINE = "EngineDeadlineExceeded"
    ENGINE_INTERRUPTED = "EngineInterrupted"
    NOT_RETRYABLE = "NotRetryable"
    UNEXPECTED = "Unexpected"


@dataclass(frozen=True, slots=True)
class Classification:
    """What an exception means for retrying, before any delay is computed."""

    kind: OutcomeKind
    reason: FailureReason
    delay: float | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """The immutable result of one reconcile step."""

    kind: OutcomeKind
    delay: float | None = None  # before retrying; temporary failures only
    attempt: int = 0  # consecutive failures including this one
    reason: FailureReason | None = None
    message: str = ""
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        """Whether the step succeeded."""
        return self.kind is OutcomeKind.SUCCESS

    @classmethod
    def success(cls) -> Outcome:
        """Return the outcome of a successful step."""
        return cls(kind=OutcomeKind.SUCCESS)


# Error text (the engine's stderr) that sharpens the label; unknown errors retry anyway.
_CONNECTION_TEXT = (
    "connection refused",
    "connection reset",
    "no route to host",
    "broken pipe",
    "server is currently unable to handle the request",
)
# The state backend's own files could not be written.
UNWRITABLE_TEXT = (
    "permission denied",
    "read-only file system",
    "no space left on device",
    "disk quota exceeded",
)
_TIMEOUT_TEXT = ("i/o timeout", "deadline exceeded", "timed out", "handshake timeout")
_TEXTS = (
    (("deletionsheld:",), FailureReason.DELETIONS_HELD),
    (UNWRITABLE_TEXT, FailureReason.STATE_BACKEND),
    (_CONNECTION_TEXT, FailureReason.CONNECTION),
    (_TIMEOUT_TEXT, FailureReason.TIMEOUT),
)


def classify(exc: BaseException) -> Classification:
    """What an exception (or a cause in its chain) means for retrying; else temporary."""
    cause: BaseException | None = exc
    for _ in range(8):
        if cause is None:
            break
        found = _classify_one(cause)
        if found is not None:
            return found
        cause = cause.__cause__
    return Classification(OutcomeKind.TEMPORARY, FailureReason.UNEXPECTED)


def _classify_one(exc: BaseException) -> Classification | None:
    temporary, permanent = OutcomeKind.TEMPORARY, OutcomeKind.PERMANENT
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "EngineDeadlineExceeded" in names:
        return Classification(temporary, FailureReason.ENGINE_DEADLINE)
    if "EngineInterrupted" in names:
        return Classification(temporary, FailureReason.ENGINE_INTERRUPTED)
    if isinstance(exc, TemporaryError):
        return Classification(temporary, FailureReason.TEMPORARY, exc.delay)
    if isinstance(exc, PermanentError):
        return Classification(permanent, FailureReason.PERMANENT)
    if "ConcurrentUpdateError" in names:
        return Classification(temporary, FailureReason.CONCURRENT_UPDATE)
    if "SpecError" in names or hasattr(exc, "issues"):
        return Classification(permanent, FailureReason.INVALID_SPEC)
    retryable = getattr(exc, "retryable", None)
    if retryable is False:
        return Classification(permanent, FailureReason.NOT_RETRYABLE)
    if retryable is True or isinstance(exc, ConnectionError):
        return Classification(temporary, FailureReason.CONNECTION)
    if isinstance(exc, TimeoutError):
        return Classification(temporary, FailureReason.TIMEOUT)
    text = str(exc).lower()
    for parts, reason in _TEXTS:
        if any(part in text for part in parts):
            return Classification(temporary, reason)
    return None


BACKOFF_FACTOR = 2.0
BACKOFF_JITTER = 0.1  # a delay d becomes uniform in [0.9 d, 1.1 d]


def backoff_delay(
    attempt: int, settings: BackoffSettings, jitter: Callable[[], float] | None = None
) -> float:
    """The delay after ``attempt`` (from 1) failures: exponential, jittered, capped."""
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    try:
        raw = settings.base * BACKOFF_FACTOR ** (attempt - 1)
    except OverflowError:  # days of failures
        raw = math.inf
    delay = min(raw, settings.max_delay)
    if jitter is not None:
        u = jitter()
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"jitter source must return values in [0, 1], got {u}")
        delay *= 1.0 + BACKOFF_JITTER * (2.0 * u - 1.0)
    return min(delay, settings.max_delay)


def outcome_of(
    exc: BaseException | None,
    *,
    attempt: int,
    settings: BackoffSettings,
    jitter: Callable[[], float] | None = None,
    classifier: Callable[[BaseException], Classification] = classify,
) -> Outcome:
    """What a step raised (``None``: nothing) as an :class:`Outcome` with its delay."""
    if exc is None:
        return Outcome.success()
    found = classifier(exc)
    message = str(exc) or type(exc).__name__
    if found.kind is OutcomeKind.PERMANENT:
        return Outcome(found.kind, None, attempt, found.reason, message, exc)
    if found.delay is not None:
        delay = found.delay
    elif found.reason is FailureReason.CONCURRENT_UPDATE:
        # Another update holds the lock: a fixed wait, not a growing one.
        delay = settings.concurrent_update_delay
    else:
        delay = backoff_delay(attempt, settings, jitter)
    return Outcome(OutcomeKind.TEMPORARY, delay, attempt, found.reason, message, exc)


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
    """A fault (its key in the book) while it lasts: since when, latest message, who sees it."""

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
                self._active[fault] = ActiveFault(now, wall, message, frozenset({source}))
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
