"""Shards: one stack split by namespace into Pulumi stacks ``<stack>.s00``, ``.s01``...,
each with its own state, lock and Lease and everything its namespaces need. Pure:
:func:`assign` extends the :class:`ShardMap` without ever moving a namespace, and the
slicers cut the fleet file, the cluster's objects and a desired fleet to one shard."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from twc.desired import DesiredFleet, DesiredInputs, ObjectList
from twc.native.objects import metadata
from twc.spec import Fleet, part
from twc.spec.crds import VIEW_LABEL


def shard_stack(stack: str, index: int) -> str:
    """The Pulumi stack of shard ``index`` of ``stack``: ``<stack>.s00``, ``.s01``..."""
    if index < 0:
        raise ValueError(f"a shard index is not negative, got {index}")
    return f"{stack}.s{index:02d}"


@dataclass(frozen=True)
class ShardMap:
    """The assignment: per namespace, its shard. It only ever grows."""

    namespaces: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    shards: int = 1
    """How many shards exist (indexes ``0 .. shards - 1``)."""

    def __post_init__(self) -> None:
        highest = max(self.namespaces.values(), default=-1)
        if self.shards < 1 or self.shards <= highest:
            raise ValueError(f"{self.shards} shard(s) cannot hold shard index {highest}")
        if any(i < 0 for i in self.namespaces.values()):
            raise ValueError("a shard index is not negative")
        object.__setattr__(self, "namespaces", MappingProxyType(dict(self.namespaces)))

    def shard_of(self, namespace: str) -> int | None:
        return self.namespaces.get(namespace)

    def namespaces_of(self, index: int) -> tuple[str, ...]:
        return tuple(sorted(ns for ns, i in self.namespaces.items() if i == index))

    def to_json(self) -> dict[str, Any]:
        return {"shards": self.shards, "namespaces": dict(sorted(self.namespaces.items()))}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShardMap:
        """Read :meth:`to_json`'s output (ValueError if it is not one)."""
        namespaces = data.get("namespaces") or {}
        if not isinstance(namespaces, Mapping):
            raise ValueError("namespaces: expected a mapping of namespace to shard index")
        return cls(
            namespaces={str(k): int(v) for k, v in namespaces.items()},
            shards=int(data.get("shards") or 1),
        )


def assign(current: ShardMap, load: Mapping[str, int], *, max_workers_per_shard: int) -> ShardMap:
    """Give every namespace of ``load`` (workers per namespace) that has no shard one; move none.

    New namespaces, in name order, join the least-filled shard with room (lowest index on
    a tie), else a new shard; assigned ones keep theirs, even when over the limit or gone.
    """
    if max_workers_per_shard < 1:
        raise ValueError("max_workers_per_shard must be at least 1")
    new = sorted(ns for ns in load if ns not in current.namespaces)
    if not new:
        return current
    namespaces = dict(current.namespaces)
    shards = current.shards
    filled = [0] * shards
    for ns, index in namespaces.items():
        filled[index] += load.get(ns, 0)
    for ns in new:
        workers = load[ns]
        fits = [i for i in range(shards) if filled[i] + workers <= max_workers_per_shard]
        if fits:
            index = min(fits, key=lambda i: (filled[i], i))
        elif all(f == 0 for f in filled):
            index = 0  # empty shards take any namespace, however large
        else:
            index = shards
            shards += 1
            filled.append(0)
        namespaces[ns] = index
        filled[index] += workers
    return ShardMap(namespaces=namespaces, shards=shards)


def namespace_of(obj: Mapping[str, Any]) -> str:
    """An object's namespace; empty for a cluster-scoped (or malformed) one."""
    ns = metadata(obj).get("namespace")
    return ns if isinstance(ns, str) else ""


def namespace_load(
    fleet: Fleet,
    queues: Iterable[Mapping[str, Any]] = (),
    workers: Iterable[Mapping[str, Any]] = (),
) -> dict[str, int]:
    """Workers per namespace (the file's, and one per Queue and non-view TemporalWorker
    object when the fleet uses cluster objects): where a *new* namespace goes."""
    load: dict[str, int] = {}
    for worker in fleet.resolved_workers():
        load[worker.namespace] = load.get(worker.namespace, 0) + 1
    for queue in fleet.queues:
        load.setdefault(queue.namespace, 0)
    if not fleet.cluster_objects:
        return load
    for obj in (*queues, *(w for w in workers if VIEW_LABEL not in part(metadata(w), "labels"))):
        if ns := namespace_of(obj):
            load[ns] = load.get(ns, 0) + 1
    return load


def slice_fleet(fleet: Fleet, namespaces: Collection[str]) -> Fleet:
    """The fleet file as one shard sees it: its namespaces' workers, queues and
    Connections, the queues its workers reference, every cluster-scoped or plugin connection."""
    wanted = set(namespaces)
    workers = tuple(w for w in fleet.workers if w.namespace in wanted)
    referenced = {
        (w.queue_ref.namespace or w.namespace, w.queue_ref.name)
        for w in workers
        if w.queue_ref is not None
    }
    queues = tuple(
        q for q in fleet.queues if q.namespace in wanted or (q.namespace, q.name) in referenced
    )
    connections = tuple(c for c in fleet.connections if c.namespace in wanted)
    return fleet.model_copy(
        update={"workers": workers, "queues": queues, "connections": connections}
    )


def namespaces_changed(old: Fleet, new: Fleet) -> frozenset[str] | None:
    """The namespaces whose slice (:func:`slice_fleet`) differs between ``old`` and ``new``;
    ``None`` when every shard must look: what every shard sees differs (the defaults,
    cluster-scoped connections), or a namespace is new (the assignment gives it a shard)."""
    lists = {"workers": (), "queues": (), "connections": ()}
    before, after = _by_namespace(old), _by_namespace(new)
    if after.keys() - before.keys() or old.model_copy(update=lists) != new.model_copy(update=lists):
        return None
    return frozenset(ns for ns in before.keys() | after.keys() if before.get(ns) != after.get(ns))


def _by_namespace(fleet: Fleet) -> dict[str, list[object]]:
    # A queue polled from another namespace is part of its workers' namespace too.
    queues = {(q.namespace, q.name): q for q in fleet.queues}
    parts: dict[str, list[object]] = {}
    for namespaced in (fleet.workers, fleet.queues, fleet.connections):
        for entry in namespaced:
            parts.setdefault(entry.namespace, []).append(entry)
    for w in fleet.workers:
        if w.queue_ref is not None:
            parts[w.namespace].append(
                queues.get((w.queue_ref.namespace or w.namespace, w.queue_ref.name))
            )
    return parts


def slice_objects(
    objects: Iterable[Mapping[str, Any]], namespaces: Collection[str]
) -> tuple[Mapping[str, Any], ...]:
    """The cluster objects of the shard's namespaces; cluster-scoped ones are kept."""
    wanted = set(namespaces)
    return tuple(o for o in objects if not (ns := namespace_of(o)) or ns in wanted)


def shard_part(
    objects: Sequence[Mapping[str, Any]], namespaces: Sequence[str]
) -> tuple[Mapping[str, Any], ...]:
    """The cluster-scoped objects of a shared list, then those of ``namespaces``, in order."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for obj in objects:
        grouped.setdefault(namespace_of(obj), []).append(obj)
    return tuple(obj for ns in ("", *namespaces) for obj in grouped.get(ns, ()))


def restrict(desired: DesiredFleet, namespaces: Collection[str]) -> DesiredFleet:
    """What one shard's program builds: the workers and queues of its namespaces."""
    wanted = set(namespaces)
    return desired.narrowed(
        {k: w for k, w in desired.workers.items() if w.namespace in wanted},
        tuple(q for q in desired.fleet.queues if q.namespace in wanted),
    )


def _in(key: str, wanted: set[str]) -> bool:
    namespace, sep, _ = key.partition("/")
    return not sep or namespace in wanted


def slice_inputs(inputs: DesiredInputs, fleet: Fleet, namespaces: Collection[str]) -> DesiredInputs:
    """The desired state's inputs cut to one shard (``fleet``: the validated whole)."""
    wanted = set(namespaces)
    cluster = None
    if inputs.cluster is not None:
        cluster = {
            kind: found
            if found.objects is None
            else ObjectList(objects=tuple(dict(o) for o in slice_objects(found.objects, wanted)))
            for kind, found in inputs.cluster.items()
        }
    return inputs.model_copy(
        update={
            "fleet": slice_fleet(fleet, wanted).model_dump(
                mode="json", by_alias=True, exclude_none=True
            ),
            "cluster": cluster,
            "replicas": {k: n for k, n in inputs.replicas.items() if _in(k, wanted)},
            "accepted": {
                kind: {k: spec for k, spec in specs.items() if _in(k, wanted)}
                for kind, specs in inputs.accepted.items()
            },
        }
    )
