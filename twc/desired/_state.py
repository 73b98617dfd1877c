"""The desired state: one pure function over the fleet file and the cluster's objects."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from twc.connections import Registry, resolve_fleet_connections
from twc.desired._inputs import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredInputs,
    HeldObjects,
    ObjectList,
    kind_key,
    object_key,
)
from twc.desired._merge import (
    KindMerge,
    Rejection,
    merge_connections,
    merge_queues,
    merge_workers,
    queue_key,
    taken_objects,
    with_entries,
)
from twc.errors import Reason, SpecError, TemporaryError, TwcConnectionError, TwcError
from twc.native.objects import IdentityKey, NativeObject
from twc.spec import Fleet, Queue, ResolvedWorker


class ObjectsUnknown(TemporaryError, TwcError):
    """A kind's objects are unknown (its list failed) and none of them was ever accepted."""

    def __init__(self, kinds: Mapping[str, str]) -> None:
        self.kinds = dict(kinds)
        text = "; ".join(f"{kind}: {why}" for kind, why in sorted(self.kinds.items()))
        super().__init__(f"cluster objects unknown, nothing of them is known yet ({text})")


class HoldFailed(TemporaryError, TwcError):
    """Held workers could not be kept (their last inputs do not fit): nothing is applied."""

    def __init__(self, workers: Iterable[str], why: str) -> None:
        self.workers = tuple(sorted(workers))
        super().__init__(f"held workers cannot be kept ({', '.join(self.workers)}): {why}")


@dataclass(frozen=True, slots=True)
class DesiredFleet:
    """What should run: the fleet with every accepted cluster object, and how it came to be."""

    fleet: Fleet
    workers: Mapping[str, ResolvedWorker]
    """Every worker, keyed ``<namespace>/<name>``."""
    replicas: Mapping[str, int]
    """Replicas given in the inputs of autoscaled workers that exist."""
    origins: Mapping[str, str]
    """Per worker: ``file``, ``Queue <ns>/<name>`` or ``TemporalWorker <ns>/<name>``."""
    kinds: Mapping[str, KindMerge] = field(default_factory=dict)
    references: Mapping[str, IdentityKey] = field(default_factory=dict)
    """Per worker, the identity of the connection it uses."""
    inputs: DesiredInputs = field(default_factory=DesiredInputs)
    held: frozenset[str] = frozenset()
    """Workers kept only because their deletion is held."""
    conflicts: Mapping[str, str] = field(default_factory=dict)

    @property
    def rejected(self) -> tuple[Rejection, ...]:
        """Every object whose current spec is not in use (kept or left out)."""
        return tuple(r for merge in self.kinds.values() for r in merge.rejected)

    @property
    def unknown(self) -> tuple[str, ...]:
        """Kinds whose list failed this time."""
        return tuple(sorted(k for k, m in self.kinds.items() if not m.known))

    @property
    def accepted(self) -> dict[str, dict[str, Mapping[str, Any]]]:
        """The last accepted spec of every object, per kind: the next inputs' store."""
        return {kind: dict(merge.store) for kind, merge in self.kinds.items()}

    def accepted_objects(self, kind: str) -> Mapping[str, NativeObject]:
        """Objects of ``kind`` in the desired state, by object key."""
        merge = self.kinds.get(kind)
        return merge.accepted if merge is not None else {}

    @property
    def cluster_managed(self) -> bool:
        return self.inputs.cluster is not None

    def only(self, keys: Collection[str]) -> DesiredFleet:
        """The part a targeted ``up`` builds: the workers named and the queues they hang on."""
        wanted = set(keys)
        workers = {k: w for k, w in self.workers.items() if k in wanted}
        parents = {queue_key(w) for w in workers.values()}
        queues = tuple(q for q in self.fleet.queues if f"{q.namespace}/{q.name}" in parents)
        return self.narrowed(workers, queues)

    def narrowed(
        self, workers: Mapping[str, ResolvedWorker], queues: tuple[Queue, ...]
    ) -> DesiredFleet:
        """The same desired state with only ``workers`` and the fleet's ``queues``."""
        return replace(
            self,
            fleet=self.fleet.model_copy(update={"queues": queues}),
            workers=dict(workers),
            replicas={k: n for k, n in self.replicas.items() if k in workers},
            origins={k: o for k, o in self.origins.items() if k in workers},
            references={k: r for k, r in self.references.items() if k in workers},
        )


def desired_fleet(
    fleet: Fleet,
    inputs: DesiredInputs,
    *,
    registry: Registry,
    file: str,
) -> DesiredFleet:
    """Compute the desired state (``file``: the fleet file's name, for messages).

    Raises:
        SpecError: The fleet file's own connections do not resolve.
        ObjectsUnknown: A kind is unknown and none of its objects was ever accepted.
        HoldFailed: A held worker could not be kept.
    """
    held = inputs.held
    if held is not None and held.file:
        fleet = _with_held_entries(fleet, held, file)
    kinds: dict[str, KindMerge] = {}
    if inputs.cluster is not None:
        cluster, refused = taken_objects(
            fleet.select, inputs.cluster, inputs.accepted, inputs.refused
        )
        taken = inputs.model_copy(update={"cluster": cluster})
        fleet, kinds = _merge_cluster(fleet, taken, registry=registry, file=file)
        for key, rejections in refused.items():
            both = sorted([*kinds[key].rejected, *rejections], key=lambda r: r.key)
            kinds[key] = replace(kinds[key], rejected=tuple(both))
    else:
        resolve_fleet_connections(fleet, file=file, registry=registry)

    workers = {w.stack_key: w for w in fleet.resolved_workers()}
    conflicts = {k: why for k, why in inputs.conflicts.items() if k in workers}
    if conflicts:
        workers = {k: w for k, w in workers.items() if k not in conflicts}
        if WORKER_KIND_KEY in kinds:
            kinds[WORKER_KIND_KEY] = _without(kinds[WORKER_KIND_KEY], conflicts)
    origins = _origins(workers, kinds)
    references: dict[str, IdentityKey] = {}
    for key, worker in workers.items():
        try:
            found = registry.resolve_worker(worker, fleet).identity
        except TwcConnectionError:
            continue  # the program reports it (and the merge kept such objects out)
        references[key] = (found.api_group, found.kind, found.name, found.namespace)
    replicas = {k: n for k, n in inputs.replicas.items() if k in workers and workers[k].autoscaling}
    kept = frozenset(held.workers) if held is not None else frozenset()
    lost = kept - set(workers)
    if lost:
        raise HoldFailed(lost, "their objects or entries no longer fit the fleet")
    return DesiredFleet(
        fleet=fleet,
        workers=workers,
        replicas=replicas,
        origins=origins,
        kinds=kinds,
        references=references,
        inputs=inputs,
        held=kept,
        conflicts=conflicts,
    )


def _merge_cluster(
    fleet: Fleet, inputs: DesiredInputs, *, registry: Registry, file: str
) -> tuple[Fleet, dict[str, KindMerge]]:
    """``fleet`` with connections, then Queues, then TemporalWorkers merged in."""
    cluster, held = inputs.cluster, inputs.held
    assert cluster is not None
    kinds: dict[str, KindMerge] = {}
    watched = sorted(registry.watched_kinds(), key=lambda w: (w.api_group, w.kind))
    order = [kind_key(w.kind, w.api_group) for w in watched]
    missing = {
        key: (cluster[key].failure if key in cluster else "not observed") or "unknown"
        for key in [*order, QUEUE_KIND_KEY, WORKER_KIND_KEY]
        if (key not in cluster or not cluster[key].is_known) and key not in inputs.accepted
    }
    if missing:
        raise ObjectsUnknown(missing)

    def sources(key: str) -> tuple[ObjectList, Mapping[str, Mapping[str, Any]]]:
        found = cluster.get(key) or ObjectList.unknown("not observed")
        store = inputs.accepted.get(key, {})
        kept = (held.cluster.get(key) if held is not None else None) or {}
        if not kept:
            return found, store
        # Held objects were observed gone: they stay as if still observed (accepted while
        # the kind is unknown).
        if found.objects is None:
            return found, {**kept, **store}
        present = {object_key(o) for o in found.objects}
        extra = tuple(dict(o) for k, o in sorted(kept.items()) if k not in present)
        return ObjectList(objects=(*found.objects, *extra)), store

    for watch, key in zip(watched, order, strict=True):
        kinds[key] = merge_connections(fleet, watch, *sources(key), file=file)
        fleet = kinds[key].fleet
    q, w = QUEUE_KIND_KEY, WORKER_KIND_KEY
    kinds[q] = merge_queues(fleet, *sources(q), file=file, registry=registry)
    fleet = kinds[q].fleet
    resolve_fleet_connections(fleet, file=file, registry=registry)
    kinds[w] = merge_workers(fleet, *sources(w), registry=registry, file=file)
    return kinds[w].fleet, kinds


def _origins(
    workers: Mapping[str, ResolvedWorker], kinds: Mapping[str, KindMerge]
) -> dict[str, str]:
    objects = {kind: set(merge.accepted) for kind, merge in kinds.items()}
    origins: dict[str, str] = {}
    for key, worker in workers.items():
        if key in objects.get(WORKER_KIND_KEY, ()):
            origins[key] = f"TemporalWorker {key}"
        elif (queue := queue_key(worker)) in objects.get(QUEUE_KIND_KEY, ()):
            origins[key] = f"Queue {queue}"
        else:
            origins[key] = "file"
    return origins


def _without(merge: KindMerge, conflicts: Mapping[str, str]) -> KindMerge:
    gone = {k: o for k, o in merge.accepted.items() if k in conflicts}
    if not gone:
        return merge
    rejected = [
        *merge.rejected,
        *(Rejection(obj, Reason.OBJECT_EXISTS.value, conflicts[k]) for k, obj in gone.items()),
    ]
    return replace(
        merge,
        accepted={k: o for k, o in merge.accepted.items() if k not in gone},
        rejected=tuple(sorted(rejected, key=lambda r: r.key)),
    )


_IDENTITY_FIELDS = {
    "workers": ("namespace", "name"),
    "queues": ("namespace", "name"),
    "clusterConnections": ("name",),
    "connections": ("namespace", "name"),
    "customConnections": ("kind", "namespace", "name"),
}


def entry_id(section: str, entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """A fleet-file entry's identity in ``section`` (a namespace left out is ``default``)."""
    fields = _IDENTITY_FIELDS.get(section, ("name",))
    return tuple(
        entry.get(f, "default" if f == "namespace" and section != "customConnections" else None)
        for f in fields
    )


def _with_held_entries(fleet: Fleet, held: HeldObjects, file: str) -> Fleet:
    data = fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
    extra: dict[str, list[Mapping[str, Any]]] = {}
    for section, entries in held.file.items():
        present = {entry_id(section, e) for e in data.get(section, [])}
        extra[section] = [e for e in entries if entry_id(section, e) not in present]
    try:
        return with_entries(fleet, extra, file)
    except SpecError as exc:
        raise HoldFailed(held.workers, "; ".join(exc.lines())) from exc
