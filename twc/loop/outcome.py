"""Errors that carry their retry meaning, and the frozen outcome of a reconcile step.

As in kopf, code inside a step says how to retry by what it raises:
:class:`TemporaryError` (try again, optionally after a given delay) or
:class:`PermanentError` (retrying the same desired state cannot succeed). Anything else
is classified by :func:`classify`, and :func:`outcome_of` turns the exception into an
immutable :class:`Outcome` with the delay before the next attempt. The loop never lets
an exception escape an iteration; it records the outcome and sleeps.

Nothing here imports Pulumi or temporalio: their errors are recognised by class name and
attributes, so this module stays importable (and testable) without them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from twc.errors import PermanentError, TemporaryError
from twc.loop.settings import BackoffSettings

__all__ = [
    "Classification",
    "EngineNotStarted",
    "FailureReason",
    "Outcome",
    "OutcomeKind",
    "PermanentError",
    "TemporaryError",
    "backoff_delay",
    "classify",
    "outcome_of",
]


class EngineNotStarted(TemporaryError):
    """An engine run that waited for a slot while the daemon was told to stop: it never
    started (a stopping daemon starts no engine run; the next one does what it would
    have done, from the same desired state)."""


class OutcomeKind(StrEnum):
    """How a step ended."""

    SUCCESS = "success"
    """The step did what it should."""
    TEMPORARY = "temporary"
    """The step failed; retry after :attr:`Outcome.delay`."""
    PERMANENT = "permanent"
    """The step failed; do not retry until the desired state changes."""


class FailureReason(StrEnum):
    """Stable labels for failures, used in logs and the error-count metric."""

    TEMPORARY = "Temporary"
    """A :class:`TemporaryError` was raised."""
    PERMANENT = "Permanent"
    """A :class:`PermanentError` was raised."""
    CONCURRENT_UPDATE = "ConcurrentUpdate"
    """Another update holds the stack's lock."""
    STATE_BACKEND = "StateBackendUnwritable"
    """The engine could not write the stack's state (permission denied, read-only, a
    full disk)."""
    CONNECTION = "ConnectionFailed"
    """A connection was refused, reset or could not be opened."""
    TIMEOUT = "Timeout"
    """An operation timed out."""
    INVALID_SPEC = "InvalidSpec"
    """The desired state is invalid."""
    ENGINE_DEADLINE = "EngineDeadlineExceeded"
    """An engine run took longer than ``engine.deadline`` and was interrupted."""
    ENGINE_INTERRUPTED = "EngineInterrupted"
    """The engine guard stopped a run for another reason (its Lease term ended)."""
    NOT_RETRYABLE = "NotRetryable"
    """A twc error that says retrying cannot help (``retryable`` is false)."""
    UNEXPECTED = "Unexpected"
    """Anything else: retried with backoff, because a daemon must not give up on a
    failure it does not understand."""


@dataclass(frozen=True, slots=True)
class Classification:
    """What an exception means for retrying, before any delay is computed."""

    kind: OutcomeKind
    """Temporary or permanent (never success)."""
    reason: FailureReason
    """The label."""
    delay: float | None = None
    """A delay the error itself asked for (``TemporaryError(delay=...)``), if any."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The immutable result of one reconcile step."""

    kind: OutcomeKind
    """How the step ended."""
    delay: float | None = None
    """Seconds to wait before retrying; set only for temporary failures."""
    attempt: int = 0
    """Consecutive failures including this one; 0 for a success."""
    reason: FailureReason | None = None
    """The failure label; ``None`` for a success."""
    message: str = ""
    """The error's text; empty for a success."""
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """The exception itself, for logging with a traceback; not part of equality."""

    @property
    def ok(self) -> bool:
        """Whether the step succeeded."""
        return self.kind is OutcomeKind.SUCCESS

    @classmethod
    def success(cls) -> Outcome:
        """Return the outcome of a successful step."""
        return cls(kind=OutcomeKind.SUCCESS)


# Substrings of error text (Pulumi's CommandError carries the engine's stderr) that name
# a transport failure; they only sharpen the label, since unknown errors are retried too.
_CONNECTION_TEXT = (
    "connection refused",
    "connection reset",
    "no route to host",
    "broken pipe",
    "server is currently unable to handle the request",
)
# The backend's own files (lock, checkpoint, history) could not be written: a
# permission-denied or read-only directory, or a full disk.
UNWRITABLE_TEXT = (
    "permission denied",
    "read-only file system",
    "no space left on device",
    "disk quota exceeded",
)
_TIMEOUT_TEXT = ("i/o timeout", "deadline exceeded", "timed out", "handshake timeout")
# How far down `raise ... from` chains to look for a more telling cause.
_MAX_CAUSE_DEPTH = 8


def classify(exc: BaseException) -> Classification:
    """Say what an exception means for retrying.

    Rules, first match wins: :class:`TemporaryError` and :class:`PermanentError` mean
    what they say; a class named ``ConcurrentUpdateError`` (Pulumi's stack lock) is
    temporary; an exception with an ``issues`` attribute or a class named ``SpecError``
    is permanent; an exception whose ``retryable`` attribute is a bool follows it
    (``TwcConnectionError``); connection errors, timeouts and a state backend that
    cannot write its files (``StateBackendUnwritable``) are temporary. Otherwise the
    exception's ``__cause__`` chain is tried, and failing that it is temporary
    (``UNEXPECTED``).

    Args:
        exc: The exception a step raised.

    Returns:
        Its classification.
    """
    cause: BaseException | None = exc
    for _ in range(_MAX_CAUSE_DEPTH):
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
    if isinstance(retryable, bool):
        if retryable:
            return Classification(temporary, FailureReason.CONNECTION)
        return Classification(permanent, FailureReason.NOT_RETRYABLE)
    if isinstance(exc, TimeoutError):
        return Classification(temporary, FailureReason.TIMEOUT)
    if isinstance(exc, ConnectionError):
        return Classification(temporary, FailureReason.CONNECTION)
    text = str(exc).lower()
    if any(part in text for part in UNWRITABLE_TEXT):
        return Classification(temporary, FailureReason.STATE_BACKEND)
    if any(part in text for part in _CONNECTION_TEXT):
        return Classification(temporary, FailureReason.CONNECTION)
    if any(part in text for part in _TIMEOUT_TEXT):
        return Classification(temporary, FailureReason.TIMEOUT)
    return None


BACKOFF_FACTOR = 2.0
"""Multiplier of the backoff delay per further consecutive failure."""
BACKOFF_JITTER = 0.1
"""Relative spread of a backoff delay: ``d`` becomes uniform in ``[0.9 d, 1.1 d]``."""


def backoff_delay(
    attempt: int, settings: BackoffSettings, jitter: Callable[[], float] | None = None
) -> float:
    """Return the delay before retrying after ``attempt`` consecutive failures.

    Args:
        attempt: Consecutive failures so far, counting the latest; at least 1.
        settings: Base and cap.
        jitter: Source of uniform numbers in ``[0, 1]`` (e.g. ``random.random``);
            ``None`` gives the exact schedule.

    Returns:
        ``min(max_delay, base * 2 ** (attempt - 1))``, spread by the jitter and
        never above ``max_delay``.

    Raises:
        ValueError: If ``attempt`` is below 1 or the jitter source leaves ``[0, 1]``.
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    try:
        raw = settings.base * BACKOFF_FACTOR ** (attempt - 1)
    except OverflowError:
        # A daemon failing for days reaches exponents floats cannot hold; it is capped.
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
    """Turn what a step raised (or ``None``) into an :class:`Outcome`.

    Args:
        exc: The exception the step raised, or ``None`` if it succeeded.
        attempt: Consecutive failures including this one (1 for a first failure); ignored
            on success.
        settings: Backoff timing.
        jitter: Source of uniform numbers in ``[0, 1]``, or ``None`` for no jitter.
        classifier: The classification rules; the default is :func:`classify`, and the
            loop may wrap it to recognise more errors.

    Returns:
        The outcome; a temporary one carries the delay before the next attempt.
    """
    if exc is None:
        return Outcome.success()
    found = classifier(exc)
    message = str(exc) or type(exc).__name__
    if found.kind is OutcomeKind.PERMANENT:
        return Outcome(
            kind=OutcomeKind.PERMANENT,
            attempt=attempt,
            reason=found.reason,
            message=message,
            exception=exc,
        )
    if found.delay is not None:
        delay = found.delay
    elif found.reason is FailureReason.CONCURRENT_UPDATE:
        # Another update is running; backing off exponentially would only make this
        # daemon lag behind it. Wait a fixed time for the lock instead.
        delay = settings.concurrent_update_delay
    else:
        delay = backoff_delay(attempt, settings, jitter)
    return Outcome(
        kind=OutcomeKind.TEMPORARY,
        delay=delay,
        attempt=attempt,
        reason=found.reason,
        message=message,
        exception=exc,
    )
