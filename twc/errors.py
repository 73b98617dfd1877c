"""The twc exception tree.

Every error twc raises on purpose derives from :class:`TwcError` and carries structured
fields, so callers branch on data (``error.reason``, ``error.issues``) rather than on
message text. Two families exist:

* :class:`SpecError`: the fleet file (or a cluster object feeding it) is invalid. It is
  permanent: retrying without editing the input cannot succeed. It lists *every* problem
  found, one :class:`SpecIssue` each, so a user fixes a file in one round trip.
* :class:`TwcConnectionError`: a Temporal connection could not be resolved or opened.
  It carries a stable :class:`Reason` that becomes a condition reason in worker status,
  and says whether retrying may help.

Code inside a daemon step says how to retry by what it raises, as in kopf:
:class:`TemporaryError` (try again, optionally after a given delay) or
:class:`PermanentError` (retrying the same desired state cannot succeed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "PermanentError",
    "Reason",
    "SpecError",
    "SpecIssue",
    "TemporaryError",
    "TwcConnectionError",
    "TwcError",
]


class Reason(StrEnum):
    """Stable condition reasons surfaced in worker status and error messages.

    Values never change once released: dashboards and alerts match on them.
    """

    UNKNOWN_CONNECTION_KIND = "UnknownConnectionKind"
    """No connection provider is registered for the reference's (apiGroup, kind)."""
    CONNECTION_NOT_FOUND = "ConnectionNotFound"
    """The referenced connection object does not exist (where the reference looks)."""
    AUTH_SECRET_INVALID = "AuthSecretInvalid"  # noqa: S105 - a reason's name, not a secret
    """The credential secret is missing keys or holds unusable certificates/keys."""
    TEMPORAL_CLIENT_CREATION_FAILED = "TemporalClientCreationFailed"
    """The Temporal frontend could not be reached or refused the connection."""
    INVALID_SPEC = "InvalidSpec"
    """The fleet file failed validation."""
    OBJECT_EXISTS = "ObjectExists"
    """A new worker's Deployment or ServiceAccount exists already and twc did not create
    it (or another stack did): twc does not take it over."""
    NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
    """The ClusterConnection does not allow workers of the worker's namespace
    (``allowedNamespaces``)."""
    STACK_CONFLICT = "StackConflict"
    """Another stack's ``select`` takes the object too: both refuse it."""


# Reasons for which an immediate retry cannot succeed: the input has to change first.
_PERMANENT_REASONS = frozenset(
    {
        Reason.UNKNOWN_CONNECTION_KIND,
        Reason.CONNECTION_NOT_FOUND,
        Reason.AUTH_SECRET_INVALID,
        Reason.INVALID_SPEC,
        Reason.NAMESPACE_NOT_ALLOWED,
        Reason.STACK_CONFLICT,
    }
)


class TwcError(Exception):
    """Base class of every error twc raises deliberately."""

    @property
    def retryable(self) -> bool:
        """Whether retrying the same operation later may succeed."""
        return False


@dataclass(frozen=True, order=True)
class SpecIssue:
    """One problem in a fleet file.

    Attributes:
        file: The file (or object description) the problem is in.
        path: The field path inside it, e.g. ``workers[2].connectionRef.objectRef``;
            empty for problems with the document as a whole.
        reason: What is wrong, phrased so the user knows what to change.
    """

    file: str
    path: str
    reason: str

    def __str__(self) -> str:
        if self.path:
            return f"{self.file}: {self.path}: {self.reason}"
        return f"{self.file}: {self.reason}"


class SpecError(TwcError):
    """A fleet file (or a cluster object feeding the fleet) is invalid.

    The whole input is rejected; :attr:`issues` lists every problem found.
    """

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        """Create the error.

        Args:
            issues: The problems found; must not be empty.

        Raises:
            ValueError: If ``issues`` is empty (an error with nothing wrong is a bug).
        """
        self.issues: tuple[SpecIssue, ...] = tuple(issues)
        if not self.issues:
            raise ValueError("SpecError needs at least one issue")
        super().__init__("\n".join(self.lines()))

    @property
    def reason(self) -> Reason:
        """The condition reason for status reporting."""
        return Reason.INVALID_SPEC

    def lines(self) -> list[str]:
        """Return one human-readable line per issue, in the order found."""
        return [str(issue) for issue in self.issues]


class TwcConnectionError(TwcError):
    """A Temporal connection could not be resolved or opened.

    Named ``TwcConnectionError`` so it never shadows the builtin ``ConnectionError``.
    """

    def __init__(self, reason: Reason, message: str) -> None:
        """Create the error.

        Args:
            reason: The stable condition reason.
            message: Human-readable detail; must never contain secret material.
        """
        self.reason: Reason = reason
        self.message: str = message
        super().__init__(f"{reason}: {message}")

    @property
    def retryable(self) -> bool:
        """Only transport failures are worth retrying unchanged."""
        return self.reason not in _PERMANENT_REASONS


class TemporaryError(Exception):
    """A failure worth retrying unchanged, optionally after a specific delay."""

    def __init__(self, message: str = "", *, delay: float | None = None) -> None:
        """Create the error.

        Args:
            message: What went wrong.
            delay: Seconds to wait before retrying; ``None`` uses the backoff schedule.

        Raises:
            ValueError: If ``delay`` is negative.
        """
        if delay is not None and delay < 0:
            raise ValueError(f"delay must not be negative, got {delay}")
        super().__init__(message)
        self.delay: float | None = delay


class PermanentError(Exception):
    """A failure that retrying the same desired state cannot fix; the input must change."""
