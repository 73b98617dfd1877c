"""Kubernetes-native objects in the desired state (issue 9): merge and finalizer decisions.

The daemon reads three more sources next to the fleet file and the labelled Queues:
``TemporalWorker`` objects (``temporal.kmsvc.io/v1``) and the objects of every
connection kind the provider registry knows (``Connection``, ``ClusterConnection`` and
plugin kinds). They are merged in a fixed order, the same the program uses:

1. connection objects (a connection the fleet file declares under the same identity
   wins; the object is then left out);
2. the labelled Queue objects (:func:`~twc.controller.queues.merge_queue_objects`);
3. TemporalWorker objects, each of which must validate, keep the fleet valid and have a
   connectionRef that resolves through the registry.

An object that fails is rejected alone, with a stable reason (``InvalidSpec``,
``UnknownConnectionKind``, ``ConnectionNotFound``...), and never blocks the others.

Pure: no client, no clock; the daemon does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twc.connections import ConnectionIdentity, Registry, WatchedKind
from twc.errors import Reason, SpecError, TwcConnectionError
from twc.spec import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    Fleet,
    load_cluster_connection_object,
    load_connection_object,
    load_custom_connection_object,
    load_fleet,
    load_worker_object,
)
from twc.spec.crds import WORKER_GROUP, WORKER_KIND

__all__ = [
    "FINALIZER",
    "WORKER_PLURAL",
    "IdentityKey",
    "NativeMerge",
    "NativeObject",
    "NativeSnapshot",
    "RejectedObject",
    "finalizer_updates",
    "merge_connection_objects",
    "merge_worker_objects",
    "with_objects",
]

FINALIZER = "temporal.io/delete-protection"
"""Kept on every connection object some worker references."""
WORKER_PLURAL = "temporalworkers"
"""Resource name of TemporalWorker objects."""

IdentityKey = tuple[str, str, str, str | None]
"""(apiGroup, kind, name, namespace or ``None``): a connection's identity as a key."""

# Fleet-file sections, in the order the program merges them.
CONNECTION_SECTIONS = ("clusterConnections", "connections", "customConnections")


def identity_key(identity: ConnectionIdentity) -> IdentityKey:
    """The hashable form of a resolved connection's identity."""
    return (identity.api_group, identity.kind, identity.name, identity.namespace)


@dataclass(frozen=True, slots=True)
class NativeObject:
    """What the daemon needs to know of one cluster object to write back to it."""

    group: str
    """API group."""
    version: str
    """Version it was read at."""
    plural: str
    """Resource name in URLs."""
    kind: str
    """Kind."""
    name: str
    """``metadata.name``."""
    namespace: str | None
    """``metadata.namespace``; ``None`` for cluster-scoped kinds."""
    uid: str = ""
    """``metadata.uid``."""
    generation: int | None = None
    """``metadata.generation``."""
    resource_version: str = ""
    """``metadata.resourceVersion`` (finalizer patches are conditional on it)."""
    finalizers: tuple[str, ...] = ()
    """``metadata.finalizers``."""
    deleting: bool = False
    """Whether ``metadata.deletionTimestamp`` is set."""
    status: Mapping[str, Any] = field(default_factory=dict)
    """The object's current ``status`` (TemporalWorkers)."""

    @property
    def key(self) -> str:
        """``<namespace>/<name>``, or ``<name>`` for a cluster-scoped object."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def identity(self) -> IdentityKey:
        """The connection identity this object provides (connection kinds)."""
        return (self.group, self.kind, self.name, self.namespace)

    @property
    def api_version(self) -> str:
        """``<group>/<version>``."""
        return f"{self.group}/{self.version}"

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"

    @classmethod
    def of(
        cls, obj: Mapping[str, Any], *, group: str, version: str, plural: str, kind: str
    ) -> NativeObject:
        """Read the bookkeeping of ``obj``, tolerating malformed metadata."""
        meta_raw = obj.get("metadata") if isinstance(obj, Mapping) else None
        meta: Mapping[str, Any] = meta_raw if isinstance(meta_raw, Mapping) else {}
        status_raw = obj.get("status") if isinstance(obj, Mapping) else None
        generation = meta.get("generation")
        finalizers = meta.get("finalizers")
        return cls(
            group=group,
            version=version,
            plural=plural,
            kind=kind,
            name=str(meta.get("name", "?")),
            namespace=str(meta["namespace"]) if meta.get("namespace") else None,
            uid=str(meta.get("uid", "")),
            generation=generation if isinstance(generation, int) else None,
            resource_version=str(meta.get("resourceVersion", "")),
            finalizers=tuple(str(f) for f in finalizers) if isinstance(finalizers, list) else (),
            deleting=bool(meta.get("deletionTimestamp")),
            status=dict(status_raw) if isinstance(status_raw, Mapping) else {},
        )


@dataclass(frozen=True, slots=True)
class RejectedObject:
    """A cluster object left out of the desired state, and why."""

    obj: NativeObject
    """The object."""
    reason: str
    """Stable CamelCase reason (``InvalidSpec``, ``UnknownConnectionKind``...)."""
    message: str
    """What is wrong, in words."""


@dataclass(frozen=True, slots=True)
class NativeSnapshot:
    """The TemporalWorker and connection objects read from the cluster."""

    workers: tuple[Mapping[str, Any], ...] = ()
    """TemporalWorker objects."""
    connections: Mapping[WatchedKind, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    """Objects of each watched connection kind."""


@dataclass(frozen=True, slots=True)
class NativeMerge:
    """The outcome of merging the native objects into a fleet."""

    fleet: Fleet
    """The merged fleet."""
    entries: Mapping[str, tuple[Mapping[str, Any], ...]]
    """Fleet-file entries per section (``clusterConnections``, ``connections``,
    ``customConnections``, ``workers``): what the program merges in the same order."""
    accepted: Mapping[str, NativeObject]
    """Accepted objects: connection objects by identity text, workers by ``ns/name``."""
    rejected: tuple[RejectedObject, ...] = ()
    """Objects left out."""


def _dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def with_objects(
    fleet: Fleet, entries: Mapping[str, Sequence[Mapping[str, Any]]], file: str
) -> Fleet:
    """``fleet`` with extra entries appended to its sections (re-validated whole).

    Raises:
        SpecError: The result is not a valid fleet.
    """
    if not any(entries.values()):
        return fleet
    data = fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
    for section, items in entries.items():
        if items:
            data[section] = [*data.get(section, []), *(dict(i) for i in items)]
    return load_fleet(data, file)


def _connection_model(watched: WatchedKind, obj: Mapping[str, Any]) -> tuple[str, Any, IdentityKey]:
    builtin = watched.api_group == API_GROUP and watched.kind in (
        CONNECTION_KIND,
        CLUSTER_CONNECTION_KIND,
    )
    if builtin and watched.kind == CONNECTION_KIND:
        conn = load_connection_object(obj)
        return "connections", conn, (API_GROUP, CONNECTION_KIND, conn.name, conn.namespace)
    if builtin:
        cc = load_cluster_connection_object(obj)
        return "clusterConnections", cc, (API_GROUP, CLUSTER_CONNECTION_KIND, cc.name, None)
    custom = load_custom_connection_object(
        obj,
        api_group=watched.api_group,
        kind=watched.kind,
        namespaced=watched.namespaced,
        version=watched.version,
    )
    return (
        "customConnections",
        custom,
        (custom.api_group, custom.kind, custom.name, custom.namespace),
    )


def _declared(fleet: Fleet) -> set[IdentityKey]:
    out: set[IdentityKey] = set()
    out.update(
        (API_GROUP, CLUSTER_CONNECTION_KIND, c.name, None) for c in fleet.cluster_connections
    )
    out.update((API_GROUP, CONNECTION_KIND, c.name, c.namespace) for c in fleet.connections)
    out.update((c.api_group, c.kind, c.name, c.namespace) for c in fleet.custom_connections)
    return out


def merge_connection_objects(
    fleet: Fleet,
    objects: Mapping[WatchedKind, Iterable[Mapping[str, Any]]],
    *,
    file: str,
) -> NativeMerge:
    """Add connection objects from the cluster to ``fleet``.

    A connection the fleet file declares under the same identity wins (the object is
    left out, not rejected). Each object must validate through its model; one that
    does not is rejected with ``InvalidSpec``.

    Args:
        fleet: The fleet file.
        objects: Objects per watched kind, as the API returns them.
        file: The fleet file's name for messages.

    Returns:
        The fleet with the accepted connections.
    """
    declared = _declared(fleet)
    rejected: list[RejectedObject] = []
    candidates: list[tuple[str, dict[str, Any], NativeObject]] = []
    for watched in sorted(objects):
        for obj in objects[watched]:
            native = NativeObject.of(
                obj,
                group=watched.api_group,
                version=watched.version,
                plural=watched.plural,
                kind=watched.kind,
            )
            try:
                section, model, ident = _connection_model(watched, obj)
            except SpecError as exc:
                rejected.append(RejectedObject(native, Reason.INVALID_SPEC, "; ".join(exc.lines())))
                continue
            if ident in declared:
                continue
            candidates.append((section, _dump(model), native))
    merged, accepted, more = _add_each(fleet, candidates, file)
    rejected.extend(more)
    entries: dict[str, list[Mapping[str, Any]]] = {s: [] for s in CONNECTION_SECTIONS}
    for section, entry, _ in accepted:
        entries[section].append(entry)
    return NativeMerge(
        fleet=merged,
        entries={k: tuple(v) for k, v in entries.items()},
        accepted={_ident_text(n.identity): n for _, _, n in accepted},
        rejected=tuple(rejected),
    )


def _ident_text(ident: IdentityKey) -> str:
    group, kind, name, namespace = ident
    return f"{kind}.{group} {namespace}/{name}" if namespace else f"{kind}.{group} {name}"


def _add_each(
    fleet: Fleet,
    candidates: Sequence[tuple[str, dict[str, Any], NativeObject]],
    file: str,
) -> tuple[Fleet, list[tuple[str, dict[str, Any], NativeObject]], list[RejectedObject]]:
    def entries(items: Iterable[tuple[str, dict[str, Any], NativeObject]]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for section, entry, _ in items:
            out.setdefault(section, []).append(entry)
        return out

    if not candidates:
        return fleet, [], []
    try:
        return with_objects(fleet, entries(candidates), file), list(candidates), []
    except SpecError:
        pass
    # Find the misfits one by one; each accepted object keeps the fleet valid.
    accepted: list[tuple[str, dict[str, Any], NativeObject]] = []
    rejected: list[RejectedObject] = []
    merged = fleet
    for candidate in candidates:
        try:
            trial = with_objects(fleet, entries([*accepted, candidate]), file)
        except SpecError as exc:
            rejected.append(
                RejectedObject(candidate[2], Reason.INVALID_SPEC, "; ".join(exc.lines()))
            )
            continue
        accepted.append(candidate)
        merged = trial
    return merged, accepted, rejected


def worker_native(obj: Mapping[str, Any], version: str = "v1") -> NativeObject:
    """The bookkeeping of a TemporalWorker object."""
    return NativeObject.of(
        obj, group=WORKER_GROUP, version=version, plural=WORKER_PLURAL, kind=WORKER_KIND
    )


def merge_worker_objects(
    fleet: Fleet,
    objects: Iterable[Mapping[str, Any]],
    *,
    registry: Registry,
    file: str,
) -> NativeMerge:
    """Add TemporalWorker objects to ``fleet`` (already holding connections and queues).

    Each object must validate (``InvalidSpec``), not clash with a worker of the fleet
    file or a Queue (``InvalidSpec``), and have a connectionRef that resolves through
    ``registry`` (its reason, e.g. ``UnknownConnectionKind``). A failing object is
    rejected alone; nothing is created for it.

    Returns:
        The fleet with the accepted workers; ``accepted`` is keyed ``<ns>/<name>``.
    """
    rejected: list[RejectedObject] = []
    candidates: list[tuple[str, dict[str, Any], NativeObject]] = []
    for obj in objects:
        native = worker_native(obj)
        try:
            worker = load_worker_object(obj)
        except SpecError as exc:
            rejected.append(RejectedObject(native, Reason.INVALID_SPEC, "; ".join(exc.lines())))
            continue
        ref = worker.connection_ref or fleet.defaults.connection_ref
        if ref is not None:
            # Resolved first, so a missing or unknown connection is named as such rather
            # than as the fleet validation error it would also cause.
            try:
                registry.resolve(ref.target(worker.namespace), fleet)
            except TwcConnectionError as exc:
                rejected.append(RejectedObject(native, str(exc.reason), exc.message))
                continue
        candidates.append(("workers", _dump(worker), native))
    candidates.sort(key=lambda c: c[2].key)

    def unresolved(trial: Fleet, natives: Iterable[NativeObject]) -> dict[str, TwcConnectionError]:
        wanted = {n.key for n in natives}
        out: dict[str, TwcConnectionError] = {}
        for worker in trial.resolved_workers():
            key = f"{worker.namespace}/{worker.name}"
            if key not in wanted:
                continue
            try:
                registry.resolve_worker(worker, trial)
            except TwcConnectionError as exc:
                out[key] = exc
        return out

    merged = fleet
    accepted: list[tuple[str, dict[str, Any], NativeObject]] = []
    try:
        trial = with_objects(fleet, {"workers": [c[1] for c in candidates]}, file)
        failing = unresolved(trial, (c[2] for c in candidates))
        if not failing:
            merged, accepted = trial, list(candidates)
            candidates = []
    except SpecError:
        pass
    for candidate in candidates:
        native = candidate[2]
        try:
            trial = with_objects(fleet, {"workers": [c[1] for c in [*accepted, candidate]]}, file)
        except SpecError as exc:
            rejected.append(RejectedObject(native, Reason.INVALID_SPEC, "; ".join(exc.lines())))
            continue
        failing = unresolved(trial, [native])
        if native.key in failing:
            err = failing[native.key]
            rejected.append(RejectedObject(native, str(err.reason), err.message))
            continue
        accepted.append(candidate)
        merged = trial
    return NativeMerge(
        fleet=merged,
        entries={"workers": tuple(c[1] for c in accepted)},
        accepted={c[2].key: c[2] for c in accepted},
        rejected=tuple(sorted(rejected, key=lambda r: r.obj.key)),
    )


def finalizer_updates(
    objects: Iterable[NativeObject], referenced: Iterable[IdentityKey]
) -> list[tuple[NativeObject, list[str]]]:
    """Which connection objects need their finalizers changed, and to what.

    A referenced object gets :data:`FINALIZER` (unless it is already being deleted: the
    API server refuses new finalizers then, and a referenced object being deleted keeps
    the one it has); an unreferenced object loses it, which lets a pending deletion
    complete. Other finalizers are kept as they are.

    Args:
        objects: The connection objects in the cluster.
        referenced: Identities some worker uses (now, or as last applied).

    Returns:
        ``(object, new finalizer list)`` for each object to patch.
    """
    wanted = set(referenced)
    out: list[tuple[NativeObject, list[str]]] = []
    for obj in objects:
        has = FINALIZER in obj.finalizers
        want = obj.identity in wanted
        if want and not has and not obj.deleting:
            out.append((obj, [*obj.finalizers, FINALIZER]))
        elif has and not want:
            out.append((obj, [f for f in obj.finalizers if f != FINALIZER]))
    return out
