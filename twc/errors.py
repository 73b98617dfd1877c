"""The twc exception tree: callers branch on data (``reason``, ``issues``), not on text.

:class:`SpecError` lists every problem of an invalid fleet file or object;
:class:`TwcConnectionError` carries a stable :class:`Reason`; a daemon step raises
:class:`TemporaryError` (retry, maybe after a delay) or :class:`PermanentError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    """Stable condition reasons in worker status and errors; dashboards match on them."""

    UNKNOWN_CONNECTION_KIND = "UnknownConnectionKind"  # no provider for (apiGroup, kind)
    CONNECTION_NOT_FOUND = "ConnectionNotFound"
    AUTH_SECRET_INVALID = "AuthSecretInvalid"  # noqa: S105 - a reason's name, not a secret
    TWC_CREDENTIAL_INVALID = "TwcCredentialInvalid"  # twcCredentials refused; workers' not
    TEMPORAL_CLIENT_CREATION_FAILED = "TemporalClientCreationFailed"
    INVALID_SPEC = "InvalidSpec"
    OBJECT_EXISTS = "ObjectExists"  # a new worker's object exists, made by someone else
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"  # not in the allowedNamespaces
    STACK_CONFLICT = "StackConflict"  # another stack's select takes the object too


class TwcError(Exception):
    """Base class of every error twc raises deliberately."""

    @property
    def retryable(self) -> bool:
        """Whether retrying the same operation later may succeed."""
        return False


@dataclass(frozen=True, order=True)
class SpecIssue:
    """One problem: the file (or object), the field path (may be empty), what to change."""

    file: str
    path: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}: {where}{self.reason}"


class SpecError(TwcError):
    """A fleet file (or a cluster object feeding it) is invalid: ``issues`` lists them all."""

    reason = Reason.INVALID_SPEC

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues: tuple[SpecIssue, ...] = tuple(issues)
        if not self.issues:
            raise ValueError("SpecError needs at least one issue")
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One human-readable line per issue, in the order found."""
        return [str(issue) for issue in self.issues]


class TwcConnectionError(TwcError):
    """A Temporal connection could not be resolved or opened (``message`` holds no secret)."""

    def __init__(self, reason: Reason, message: str) -> None:
        self.reason: Reason = reason
        self.message: str = message
        super().__init__(f"{reason}: {message}")

    @property
    def retryable(self) -> bool:
        """Whether retrying unchanged may help (the reason is not a permanent one)."""
        return self.reason in (Reason.TEMPORAL_CLIENT_CREATION_FAILED, Reason.OBJECT_EXISTS)


class TemporaryError(Exception):
    """A failure worth retrying unchanged, after ``delay`` seconds if given (not negative)."""

    def __init__(self, message: str = "", *, delay: float | None = None) -> None:
        if delay is not None and delay < 0:
            raise ValueError(f"delay must not be negative, got {delay}")
        super().__init__(message)
        self.delay: float | None = delay


class PermanentError(Exception):
    """A failure that retrying the same desired state cannot fix; the input must change."""
