"""The deletion verdict: one apply deletes at most ``deletionGuard.maxShare`` of the stack's
workers (at least one). More is *held* until a person approves that exact set by its
:func:`deletion_digest` (``twc approve``, ``twc up --yes``), or, when the fleet opts in,
``releaseAfter`` passed. Every entry point asks :func:`judge_deletions`; time is an argument.
A held worker stays in the desired state through the object or fleet-file entry it last
came from, and its queue's and connection's when those went too (:func:`held_objects`)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twc.desired._inputs import QUEUE_KIND_KEY, WORKER_KIND_KEY, HeldObjects
from twc.desired._state import DesiredFleet, entry_id
from twc.native.objects import IdentityKey
from twc.spec import API_GROUP, CLUSTER_CONNECTION_KIND, CONNECTION_KIND, DeletionGuard


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


def object_groups(objects: Any) -> dict[str, set[str]]:
    """Objects by owner (``""``: the fleet's own); a plain list, as states from before the
    grouping hold them, is the fleet's."""
    if isinstance(objects, Mapping):
        return {str(owner): set(group) for owner, group in objects.items()}
    return {"": set(objects or ())}


def _kind(entry: str) -> str:
    return entry.partition(" ")[0]


def deletions_beyond_share(
    old: Any, new: Mapping[str, Any], exists: Callable[[str], bool] | None
) -> tuple[list[str], str]:
    """The objects going from ``old`` to ``new["objects"]`` (by owner: :func:`object_groups`)
    beyond ``new["maxShare"]`` of their kind, and why they are too many. Objects going with
    their owner do not count (a worker's are the worker guard's), ``new["retiring"]`` ones
    go by their sunset, and with ``exists`` only objects still in the cluster count."""
    before, after = object_groups(old), object_groups(new["objects"])
    kept = set().union(*after.values(), new.get("retiring") or ())
    gone = {o for owner, group in before.items() if not owner or owner in after for o in group}
    gone = set(filter(exists, gone - kept)) if exists is not None else gone - kept
    totals = Counter(_kind(o) for group in before.values() for o in group)
    guard = DeletionGuard(maxShare=new.get("maxShare", 0.25))
    counts = Counter(_kind(o) for o in gone)
    over = sorted(k for k, n in counts.items() if n > guard.allowed(totals[k]))
    if not over:
        return [], ""
    held = sorted(o for o in gone if _kind(o) in over)
    total, allowed = sum(totals[k] for k in over), sum(guard.allowed(totals[k]) for k in over)
    return held, (
        f"{len(held)} of {total} {', '.join(over)} objects would be deleted at once, more "
        f"than the {allowed} allowed; held until approved (twc approve, or twc up --yes)"
    )


def refusal(hold: Hold, stack: str) -> str:
    """What an entry point that refuses held deletions says: which, and how to go on."""
    return (
        f"{hold.reason}: {', '.join(sorted(hold.workers))}; nothing was applied. "
        f"To delete them: `twc up --stack {stack} --yes`, or `twc approve --stack {stack}` "
        f"(approves {hold.digest}) and apply again"
    )


def _find(document: Mapping[str, Any], section: str, **ident: Any) -> Mapping[str, Any] | None:
    """The entry of ``section`` with the identity of ``ident``'s fields, if any."""
    key = entry_id(section, ident)
    return next((e for e in document.get(section) or [] if entry_id(section, e) == key), None)


def _connection_entry(
    document: Mapping[str, Any], ident: IdentityKey
) -> tuple[str, Mapping[str, Any] | None]:
    group, kind, name, namespace = ident
    builtin = {CLUSTER_CONNECTION_KIND: "clusterConnections", CONNECTION_KIND: "connections"}
    section = builtin.get(kind, "customConnections") if group == API_GROUP else "customConnections"
    return section, _find(document, section, kind=kind, namespace=namespace, name=name)


class _Holder:
    def __init__(self, previous: DesiredFleet, current: DesiredFleet) -> None:
        self.previous, self.current = previous, current
        self.document: dict[str, Any] = dict(previous.inputs.fleet or {})
        if (held := previous.inputs.held) is not None:  # what was held then is held again
            for section, entries in held.file.items():
                self.document[section] = [*(self.document.get(section) or []), *entries]
        self.cluster: dict[str, dict[str, dict[str, Any]]] = {}
        self.file: dict[str, list[dict[str, Any]]] = {}
        self.present = set(current.references.values())
        for merge in current.kinds.values():
            self.present.update(merge.identities.values())

    def object(self, kind: str, key: str) -> bool:
        merge = self.previous.kinds.get(kind)
        obj = merge.store.get(key) if merge is not None else None
        if obj is not None:
            self.cluster.setdefault(kind, {})[key] = dict(obj)
        return obj is not None

    def entry(self, section: str, match: Mapping[str, Any] | None) -> bool:
        if match is not None and dict(match) not in (entries := self.file.setdefault(section, [])):
            entries.append(dict(match))
        return match is not None

    def file_entry(self, section: str, name: str, namespace: str) -> bool:
        return self.entry(section, _find(self.document, section, namespace=namespace, name=name))

    def worker(self, key: str) -> bool:
        """Holds the worker's own source (and its file queue's, when that went); False if none."""
        worker = self.previous.workers[key]
        kind, _, object_key = self.previous.origins.get(key, "").partition(" ")
        if kind == "TemporalWorker":
            return self.object(WORKER_KIND_KEY, object_key)
        if kind == "Queue":
            return self.object(QUEUE_KIND_KEY, object_key)
        queue = worker.queue
        if worker.derived and queue is not None:
            return self.file_entry("queues", queue.name, queue.namespace)
        if not self.file_entry("workers", worker.name, worker.namespace):
            return False
        if queue is None or self.current.fleet.find_queue(queue.namespace, queue.name) is not None:
            return True
        return self.file_entry("queues", queue.name, queue.namespace) or self.object(
            QUEUE_KIND_KEY, f"{queue.namespace}/{queue.name}"
        )

    def connection(self, key: str) -> bool:
        """Holds the worker's connection when it went too; False if it cannot be found."""
        ident = self.previous.references.get(key)
        if ident is None or ident in self.present:
            return True
        held = False
        for kind_key, merge in self.previous.kinds.items():
            for obj_key, provided in merge.identities.items():
                if provided == ident and self.object(kind_key, obj_key):
                    held = True
        if held or self.entry(*_connection_entry(self.document, ident)):
            self.present.add(ident)
            return True
        return False


def held_objects(
    previous: DesiredFleet, workers: Iterable[str], current: DesiredFleet
) -> tuple[HeldObjects, frozenset[str]]:
    """The inputs that keep ``workers`` of ``previous`` in ``current``, and the workers whose
    inputs were not found."""
    holder = _Holder(previous, current)
    wanted = sorted(set(workers))
    missing = {
        key
        for key in wanted
        if key not in previous.workers or not holder.worker(key) or not holder.connection(key)
    }
    held = HeldObjects(
        workers=tuple(k for k in wanted if k not in missing),
        cluster=holder.cluster,
        file={section: tuple(entries) for section, entries in holder.file.items()},
    )
    return held, frozenset(missing)
