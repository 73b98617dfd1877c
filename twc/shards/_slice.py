"""One shard's part of the fleet file, of the cluster's objects and of a desired fleet."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from twc.desired import DesiredFleet, DesiredInputs, ObjectList
from twc.shards._assign import namespace_of
from twc.spec import Fleet


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
