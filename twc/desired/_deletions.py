"""The deletion verdict: one apply deletes at most ``deletionGuard.maxShare`` of the stack's
workers (at least one). More is *held* until a person approves that exact set by its
:func:`deletion_digest` (``twc approve``, ``twc up --yes``), or, when the fleet opts in,
``releaseAfter`` passed. Every entry point asks :func:`judge_deletions`; time is an argument."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass

from twc.spec import DeletionGuard


def deletion_digest(workers: Collection[str]) -> str:
    """Names one exact set of deletions (what an approval refers to)."""
    return hashlib.sha256("\n".join(sorted(workers)).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Hold:
    """Deletions held, and since when."""

    workers: frozenset[str]
    digest: str
    since: float
    """When this exact set was first wanted (monotonic); ``since_wall`` in Unix time."""
    since_wall: float
    observations: int
    """Iterations that wanted this exact set."""
    total: int
    allowed: int

    @property
    def reason(self) -> str:
        return (
            f"{len(self.workers)} of {self.total} workers would be deleted at once, more than "
            f"the {self.allowed} allowed; held until approved (twc approve, or twc up --yes)"
        )


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """What the guard decided: ``hold`` ``None`` when the deletions may proceed."""

    deleting: frozenset[str]
    hold: Hold | None
    released: str = ""
    """When deletions beyond the share proceed: why (``approved``, ``confirmed``)."""


def judge_deletions(
    deleting: Collection[str],
    total: int,
    previous: Hold | None,
    *,
    now: float,
    wall: float,
    settings: DeletionGuard,
    approved: str | None,
) -> GuardVerdict:
    """Whether these deletions of ``total`` may proceed; a hold keeps its start time while
    the set stays the same (``now`` monotonic, ``wall`` Unix time)."""
    gone = frozenset(deleting)
    allowed = settings.allowed(total)
    if len(gone) <= allowed:
        return GuardVerdict(gone, None)
    digest = deletion_digest(gone)
    if approved == digest:
        return GuardVerdict(gone, None, released="approved")
    if previous is not None and previous.digest == digest:
        since, since_wall, seen = previous.since, previous.since_wall, previous.observations
    else:
        since, since_wall, seen = now, wall, 0
    if settings.release_after is not None and seen and now - since >= settings.release_after:
        return GuardVerdict(gone, None, released="confirmed")
    return GuardVerdict(gone, Hold(gone, digest, since, since_wall, seen + 1, total, allowed))


def deletion_verdict(
    running: Collection[str],
    wanted: Collection[str],
    settings: DeletionGuard,
    approved: Callable[[], str | None],
) -> GuardVerdict:
    """The verdict of one apply that waits for nobody (``approved`` read only when needed)."""
    gone = set(running) - set(wanted)
    beyond = len(gone) > settings.allowed(len(running))
    return judge_deletions(
        gone,
        len(running),
        None,
        now=0,
        wall=0,
        settings=settings,
        approved=approved() if beyond else None,
    )


def refusal(hold: Hold, stack: str) -> str:
    """What an entry point that refuses held deletions says: which, and how to go on."""
    return (
        f"{hold.reason}: {', '.join(sorted(hold.workers))}; nothing was applied. "
        f"To delete them: `twc up --stack {stack} --yes`, or `twc approve --stack {stack}` "
        f"(approves {hold.digest}) and apply again"
    )
