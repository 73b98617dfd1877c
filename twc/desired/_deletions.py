"""The deletion verdict: one apply deletes at most a share of the stack's workers.

Deleting many running workers at once is almost never what someone meant: a CRD was
deleted (and with it every object of its kind), a list answered wrongly, a fleet file
lost half its workers in a bad merge. So when the desired state would delete more than
the fleet's ``deletionGuard.maxShare`` of the workers the stack runs (at least one is
always allowed), those deletions are *held*. Only a person releases them, naming that
exact set by its :func:`deletion_digest`: ``twc approve`` (or the approval annotation
on the stack's record), or ``twc up --yes``. An approval is consumed by the run it
releases; the same set coming back later is held again. The daemon releases a hold on
its own only when the fleet opts in with ``deletionGuard.releaseAfter``.

Every entry point asks :func:`judge_deletions`: the daemon each iteration (holding the
workers in its desired state, :mod:`twc.loop.guard`), ``twc up`` before the engine
runs, and the program under plain ``pulumi up`` (which fails, applying nothing). Pure:
time is an argument.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from dataclasses import dataclass

from twc.spec import DeletionGuard

__all__ = [
    "GuardVerdict",
    "Hold",
    "deletion_digest",
    "deletion_verdict",
    "judge_deletions",
    "refusal",
]


def deletion_digest(workers: Collection[str]) -> str:
    """Names one exact set of deletions (what an approval refers to)."""
    return hashlib.sha256("\n".join(sorted(workers)).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Hold:
    """Deletions held, and since when."""

    workers: frozenset[str]
    """The workers whose deletion is held."""
    digest: str
    """:func:`deletion_digest` of :attr:`workers`."""
    since: float
    """When this exact set was first wanted (monotonic)."""
    since_wall: float
    """The same moment in Unix time, for people."""
    observations: int
    """Iterations that wanted this exact set."""
    total: int
    """The stack's workers when it was last judged."""
    allowed: int
    """How many of them one apply may delete."""

    @property
    def reason(self) -> str:
        """Why, in words."""
        return (
            f"{len(self.workers)} of {self.total} workers would be deleted at once, more than "
            f"the {self.allowed} allowed; held until approved (twc approve, or twc up --yes)"
        )


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """What the guard decided."""

    deleting: frozenset[str]
    """Workers the desired state would delete."""
    hold: Hold | None
    """The deletions held now; ``None`` when they may proceed (or there are none)."""
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
    """Decide whether these deletions may proceed.

    Args:
        deleting: Workers the stack runs that the desired state no longer has.
        total: How many workers the stack runs.
        previous: The hold of the previous iteration, if any.
        now: Monotonic time.
        wall: Unix time.
        settings: The stack's share and its opt-in automatic release.
        approved: The digest a person approved, if any.

    Returns:
        The verdict; a hold keeps its start time while the set stays the same, and
        starts again when it changes.
    """
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
    """The verdict of one apply that waits for nobody (``twc up``, plain ``pulumi up``):
    the ``running`` workers not ``wanted`` any more, with the approval read only when
    they are beyond the share."""
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
