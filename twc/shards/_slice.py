"""One shard's part of the fleet file, of the cluster's objects and of a desired fleet."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

from twc.desired import DesiredFleet, DesiredInputs, ObjectList
from twc.spec import Fleet

__all__ = [
    "NamespaceGroups",
    "restrict",
    "slice_fleet",
    "slice_inputs",
    "slice_objects",
]


def slice_fleet(fleet: Fleet, namespaces: Collection[str]) -> Fleet:
    """The fleet file as one shard sees it.

    Kept: the workers and queues of the shard's namespaces, the queues its workers
    reference in other namespaces (a worker's ``queueRef`` must resolve; the program
    never builds such a queue, see :func:`restrict`), the namespaced Connections of its
    namespaces (a worker names only a Connection of its own namespace), and every
    cluster-scoped or plugin connection. A change elsewhere then changes nothing here.

    The fleet was validated whole; a slice of it is valid as well.
    """
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
    out = []
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        ns = meta.get("namespace") if isinstance(meta, Mapping) else None
        if not ns or ns in wanted:
            out.append(obj)
    return tuple(out)


def _namespace_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return ns if isinstance(ns, str) else ""


class NamespaceGroups:
    """Cuts a shared list of objects into one shard's part, by namespace."""

    CLUSTER = ""
    """The group of cluster-scoped objects (every shard's)."""

    def of(
        self, key: Hashable, objects: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, tuple[Any, ...]]:
        """The groups of ``objects`` (the list of kind ``key``), by namespace; the
        cluster-scoped objects under :attr:`CLUSTER`."""
        grouped: dict[str, list[Mapping[str, Any]]] = {}
        for obj in objects:
            grouped.setdefault(_namespace_of(obj), []).append(obj)
        return {ns: tuple(items) for ns, items in grouped.items()}

    def parts(
        self, key: Hashable, objects: Sequence[Mapping[str, Any]], namespaces: Collection[str]
    ) -> tuple[tuple[Any, ...], ...]:
        """One shard's part of ``objects``: the cluster-scoped group, then its
        namespaces' groups in the order given (empty ones included)."""
        groups = self.of(key, objects)
        return tuple(groups.get(ns, ()) for ns in (self.CLUSTER, *namespaces))


def restrict(desired: DesiredFleet, namespaces: Collection[str]) -> DesiredFleet:
    """What one shard's program builds: the workers and queues of its namespaces.

    Queues of other namespaces that its workers reference stay out of the build (their
    shard owns their objects); connections are built from the workers, so each shard
    copies secrets into, and fingerprints for, its own namespaces only.
    """
    wanted = set(namespaces)
    return desired.narrowed(
        {k: w for k, w in desired.workers.items() if w.namespace in wanted},
        tuple(q for q in desired.fleet.queues if q.namespace in wanted),
    )


def _in(key: str, wanted: set[str]) -> bool:
    # Object keys are `<namespace>/<name>`, or `<name>` for cluster-scoped objects.
    namespace, sep, _ = key.partition("/")
    return not sep or namespace in wanted


def slice_inputs(inputs: DesiredInputs, fleet: Fleet, namespaces: Collection[str]) -> DesiredInputs:
    """The desired state's inputs as one shard's program is handed them: its slice of
    the fleet file (``fleet`` is the validated whole) and of the cluster's objects, the
    replicas and last accepted specs of its namespaces."""
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
