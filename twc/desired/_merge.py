"""Merging the cluster's objects into the fleet, kind by kind, object by object.

An object's current spec is used when it validates and fits the fleet; else its *last accepted* spec
when that still fits (reported with ``kept``); else it is left out and reported. A kind whose list
failed keeps every last accepted object. Objects are tried one by one only when all of them at once
do not fit.

One stack per cluster object (:func:`taken_objects`): a stack takes the Queue and TemporalWorker
objects its ``select`` selects; one another stack selects too is refused by both (``StackConflict``;
one it ran keeps its last accepted spec). Unknown selections make both kinds unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any

from twc.connections import Registry, WatchedKind
from twc.desired._inputs import QUEUE_KIND_KEY, WORKER_KIND_KEY, ObjectList, object_key, trimmed
from twc.errors import Reason, SpecError, TwcConnectionError
from twc.native.objects import IdentityKey, NativeObject, metadata, worker_native
from twc.native.views import is_view
from twc.spec import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    Fleet,
    ResolvedWorker,
    StackSelector,
    load_cluster_connection_object,
    load_connection_object,
    load_custom_connection_object,
    load_fleet,
    load_queue_object,
    load_worker_object,
    pod_security_problems,
)
from twc.spec.convert import as_temporal_worker

QUEUE_GROUP = "kmsvc.io"
QUEUE_VERSION = "v1"
QUEUE_PLURAL = "queues"


@dataclass(frozen=True, slots=True)
class Rejection:
    """An object whose current spec is not in the desired state, and why."""

    obj: NativeObject
    reason: str
    """Stable CamelCase reason (``InvalidSpec``, ``UnknownConnectionKind``...)."""
    message: str
    kept: bool = False
    """Whether its last accepted spec stays in the desired state (rather than left out)."""
    kept_generation: int | None = None
    """When kept: the ``metadata.generation`` of the spec that keeps running."""

    @property
    def key(self) -> str:
        return self.obj.key


@dataclass(frozen=True, slots=True)
class KindMerge:
    """What one kind's objects added to the fleet."""

    fleet: Fleet
    entries: Mapping[str, tuple[Mapping[str, Any], ...]]
    """Fleet-file entries added, per section."""
    accepted: Mapping[str, NativeObject]
    """Objects in the desired state (current or last accepted spec), by object key."""
    store: Mapping[str, Mapping[str, Any]]
    """The last accepted spec of each object, by object key, after this merge."""
    rejected: tuple[Rejection, ...] = ()
    known: bool = True
    """False when the kind's list failed and its last accepted objects were used."""
    identities: Mapping[str, IdentityKey] = field(default_factory=dict)
    """Connection kinds: the connection identity each accepted object provides."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    section: str
    entry: Mapping[str, Any]
    obj: NativeObject
    raw: Mapping[str, Any]
    identity: IdentityKey | None = None


# Object → candidate entry (``None``: not ours to merge); raises when invalid on its own.
_Convert = Callable[[Mapping[str, Any]], "_Candidate | None"]
# The fleet with the candidates added, and the candidates that do not fit, by key.
_Fits = Callable[[Sequence[_Candidate]], tuple[Fleet, dict[str, Exception]]]


def with_entries(
    fleet: Fleet, entries: Mapping[str, Sequence[Mapping[str, Any]]], file: str
) -> Fleet:
    """``fleet`` with extra entries appended to its sections, validated whole (SpecError)."""
    if not any(entries.values()):
        return fleet
    data = fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
    for section, items in entries.items():
        if items:
            data[section] = [*data.get(section, []), *(dict(i) for i in items)]
    return load_fleet(data, file)


def _sections(candidates: Iterable[_Candidate]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for c in candidates:
        out.setdefault(c.section, []).append(c.entry)
    return out


def _failure(exc: Exception) -> tuple[str, str]:
    if isinstance(exc, TwcConnectionError):
        return str(exc.reason), exc.message
    if isinstance(exc, SpecError):
        return Reason.INVALID_SPEC.value, "; ".join(exc.lines())
    return Reason.INVALID_SPEC.value, str(exc)


def _merge_kind(
    fleet: Fleet,
    observed: ObjectList,
    accepted: Mapping[str, Mapping[str, Any]],
    *,
    convert: _Convert,
    native: Callable[[Mapping[str, Any]], NativeObject],
    fits: _Fits,
) -> KindMerge:
    current = list(observed.objects) if observed.objects is not None else list(accepted.values())
    rows = [(obj, _converted(convert, obj)) for obj in sorted(current, key=object_key)]

    chosen: list[_Candidate] = []
    rejected: list[Rejection] = []
    merged = fleet
    candidates = [p for _, p in rows if isinstance(p, _Candidate)]
    if rows and len(candidates) == len(rows):
        # The common case: every object valid, all of them fit at once.
        with suppress(SpecError):
            trial, failing = fits(candidates)
            if not failing:
                merged, chosen, rows = trial, candidates, []

    def take(candidate: _Candidate) -> Exception | None:
        """Add ``candidate`` when the fleet takes it next to those chosen; else why not."""
        nonlocal merged
        try:
            trial, failing = fits([*chosen, candidate])
        except SpecError as exc:
            return exc
        if failing:
            return failing.get(candidate.obj.key) or next(iter(failing.values()))
        chosen.append(candidate)
        merged = trial
        return None

    # An object not ours to merge (None) is neither taken nor rejected; the last accepted
    # spec of one rejected is tried in its place.
    for obj, primary in rows:
        error = take(primary) if isinstance(primary, _Candidate) else primary
        if error is None:
            continue
        reason, message = _failure(error)
        nat, last = native(obj), accepted.get(object_key(obj))
        fallback: _Candidate | Exception | None = None
        if last is not None and trimmed(last) != trimmed(obj):
            fallback = _converted(convert, last)  # an invalid last spec keeps nothing
        kept = isinstance(fallback, _Candidate) and take(replace(fallback, obj=nat)) is None
        gen = metadata(last).get("generation") if kept else None
        rejected.append(Rejection(nat, reason, message, kept=kept, kept_generation=gen))

    return KindMerge(
        fleet=merged,
        entries={s: tuple(v) for s, v in _sections(chosen).items()},
        accepted={c.obj.key: c.obj for c in chosen},
        store={c.obj.key: trimmed(c.raw) for c in chosen},
        rejected=tuple(sorted(rejected, key=lambda r: r.key)),
        known=observed.objects is not None,
        identities={c.obj.key: c.identity for c in chosen if c.identity is not None},
    )


def _converted(convert: _Convert, obj: Mapping[str, Any]) -> _Candidate | Exception | None:
    """``convert(obj)``, or the error that makes ``obj`` invalid on its own."""
    try:
        return convert(obj)
    except (SpecError, TwcConnectionError) as exc:
        return exc


def queue_key(worker: ResolvedWorker) -> str | None:
    """The key (``<namespace>/<name>``) of the queue a derived worker comes from."""
    queue = worker.queue
    return f"{queue.namespace}/{queue.name}" if worker.derived and queue is not None else None


def _fits(
    fleet: Fleet,
    file: str,
    registry: Registry | None = None,
    key_of: Callable[[ResolvedWorker], str | None] = queue_key,
) -> _Fits:
    """Candidates fit when ``fleet`` with them validates; with ``registry``, the worker of
    each (``key_of``) must also resolve its connection and pass pod security."""

    def fits(candidates: Sequence[_Candidate]) -> tuple[Fleet, dict[str, Exception]]:
        trial = with_entries(fleet, _sections(candidates), file)
        wanted = {c.obj.key for c in candidates}
        failing: dict[str, Exception] = {}
        if registry is None:
            return trial, failing
        for worker in trial.resolved_workers():
            key = key_of(worker)
            if key is None or key not in wanted:
                continue
            try:
                registry.resolve_worker(worker, trial)
            except TwcConnectionError as exc:
                failing[key] = exc
                continue
            level = trial.pod_security_level(worker.namespace, worker.name)
            if problems := pod_security_problems(worker.pod_template, level):
                inherited = (worker.template_source or "").startswith("defaults")
                where = "defaults.template" if inherited or worker.derived else "spec.template"
                failing[key] = ValueError(
                    "; ".join(f"{where}.{p}" for p in problems)
                    + f" (the fleet file's podSecurity may allow more for {worker.stack_key})"
                )
        return trial, failing

    return fits


def _dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def connection_native(watched: WatchedKind, obj: Mapping[str, Any]) -> NativeObject:
    """The bookkeeping of a connection object of ``watched``."""
    return NativeObject.of(
        obj,
        group=watched.api_group,
        version=watched.version,
        plural=watched.plural,
        kind=watched.kind,
    )


def merge_connections(
    fleet: Fleet,
    watched: WatchedKind,
    observed: ObjectList,
    accepted: Mapping[str, Mapping[str, Any]],
    *,
    file: str,
) -> KindMerge:
    """Add one connection kind's objects to ``fleet`` (one the file declares is left out)."""
    declared: set[IdentityKey] = {
        *((API_GROUP, CLUSTER_CONNECTION_KIND, c.name, None) for c in fleet.cluster_connections),
        *((API_GROUP, CONNECTION_KIND, c.name, c.namespace) for c in fleet.connections),
        *((c.api_group, c.kind, c.name, c.namespace) for c in fleet.custom_connections),
    }

    def convert(obj: Mapping[str, Any]) -> _Candidate | None:
        model: Any
        if watched.api_group == API_GROUP and watched.kind == CONNECTION_KIND:
            section, model = "connections", load_connection_object(obj)
        elif watched.api_group == API_GROUP and watched.kind == CLUSTER_CONNECTION_KIND:
            section, model = "clusterConnections", load_cluster_connection_object(obj)
        else:
            section = "customConnections"
            model = load_custom_connection_object(
                obj,
                api_group=watched.api_group,
                kind=watched.kind,
                namespaced=watched.namespaced,
                version=watched.version,
            )
        # The loaders take the group and kind watched, name and namespace from the metadata.
        ident = (watched.api_group, watched.kind, model.name, getattr(model, "namespace", None))
        if ident in declared:
            return None
        return _Candidate(section, _dump(model), connection_native(watched, obj), obj, ident)

    return _merge_kind(
        fleet,
        observed,
        accepted,
        convert=convert,
        native=lambda obj: connection_native(watched, obj),
        fits=_fits(fleet, file),
    )


def queue_native(obj: Mapping[str, Any]) -> NativeObject:
    """The bookkeeping of a kmsvc Queue object."""
    return NativeObject.of(
        obj, group=QUEUE_GROUP, version=QUEUE_VERSION, plural=QUEUE_PLURAL, kind="Queue"
    )


def merge_queues(
    fleet: Fleet,
    observed: ObjectList,
    accepted: Mapping[str, Mapping[str, Any]],
    *,
    file: str,
    registry: Registry | None = None,
) -> KindMerge:
    """Add the labelled Queue objects the file does not declare to ``fleet``; with
    ``registry``, one whose derived worker's connection does not resolve is rejected."""
    declared = {(q.namespace, q.name) for q in fleet.queues}

    def convert(obj: Mapping[str, Any]) -> _Candidate | None:
        queue = load_queue_object(obj)
        if not queue.worker_enabled or (queue.namespace, queue.name) in declared:
            return None
        return _Candidate("queues", _dump(queue), queue_native(obj), obj)

    fits = _fits(fleet, file, registry)
    return _merge_kind(fleet, observed, accepted, convert=convert, native=queue_native, fits=fits)


def merge_workers(
    fleet: Fleet,
    observed: ObjectList,
    accepted: Mapping[str, Mapping[str, Any]],
    *,
    registry: Registry,
    file: str,
) -> KindMerge:
    """Add TemporalWorker objects to ``fleet`` (views, which twc generated, are no source)."""
    if observed.objects is not None and any(is_view(o) for o in observed.objects):
        observed = ObjectList.known((o for o in observed.objects if not is_view(o)), trim=False)

    def convert(obj: Mapping[str, Any]) -> _Candidate | None:
        worker = load_worker_object(as_temporal_worker(obj))
        ref = worker.connection_ref or fleet.defaults.connection_ref
        if ref is not None:
            # First, so a bad connection is named as such, not as a fleet error.
            registry.resolve(ref.target(worker.namespace), fleet)
        return _Candidate("workers", _dump(worker), worker_native(obj), obj)

    fits = _fits(fleet, file, registry, lambda w: w.stack_key)
    return _merge_kind(fleet, observed, accepted, convert=convert, native=worker_native, fits=fits)


STACKS_KEY = "Stack.twc.temporal.io"
"""Inputs key of the stacks' selections: ``{metadata: {name: <stack>}, spec: <select>}``."""
OWN_STACK = "twc.temporal.io/this-stack"
"""Annotation marking this stack's own entry among :data:`STACKS_KEY`."""

_NATIVE: Mapping[str, Callable[[Mapping[str, Any]], NativeObject]] = {
    QUEUE_KIND_KEY: queue_native,
    WORKER_KIND_KEY: worker_native,
}


def taken_objects(
    select: StackSelector | None,
    cluster: Mapping[str, ObjectList],
    accepted: Mapping[str, Mapping[str, Any]],
    refused: Mapping[str, str] | None = None,
) -> tuple[dict[str, ObjectList], dict[str, list[Rejection]]]:
    """The observation to merge, and per kind key the objects refused (``select`` ``None``
    takes every object); ``refused``: per TemporalWorker object, the API server's refusal
    of its Deployment (``InvalidSpec``). A refused object keeps its last accepted spec."""
    out, refused = dict(cluster), refused or {}
    if select is None and not refused:
        return out, {}
    stacks = cluster.get(STACKS_KEY) or ObjectList.unknown("not observed")
    if select is not None and stacks.objects is None:
        why = f"other stacks' selections unknown: {stacks.failure}"
        out.update({key: ObjectList.unknown(why) for key in _NATIVE})
        return out, {}
    mine = [o for o in stacks.objects or () if OWN_STACK in (metadata(o).get("annotations") or {})]
    own = object_key(mine[0]) if mine else "this stack"
    others = [
        (object_key(o), StackSelector.model_validate(o.get("spec") or {}))
        for o in stacks.objects or ()
        if o not in mine
    ]
    rejected: dict[str, list[Rejection]] = {}
    for key, native in _NATIVE.items():
        found = cluster.get(key)
        if found is None or found.objects is None:
            continue
        kept = []
        for obj in found.objects:
            meta = metadata(obj)
            namespace, labels = meta.get("namespace"), meta.get("labels") or {}
            if is_view(obj):
                kept.append(obj)
                continue
            if select is not None and not select.selects(namespace, labels):
                continue
            rivals = sorted(name for name, sel in others if sel.selects(namespace, labels))
            invalid = refused.get(object_key(obj)) if key == WORKER_KIND_KEY else None
            if not rivals and invalid is None:
                kept.append(obj)
                continue
            last = accepted.get(key, {}).get(object_key(obj))
            if last is not None:
                kept.append(dict(last))
            reason, message = Reason.INVALID_SPEC.value, str(invalid)
            if rivals:
                names = ", ".join(sorted({own, *rivals}))
                reason = Reason.STACK_CONFLICT.value
                message = f"selected by stacks {names}: exactly one stack may take it"
            gen = metadata(last).get("generation")
            refusal = Rejection(native(obj), reason, message, last is not None, gen)
            rejected.setdefault(key, []).append(refusal)
        out[key] = ObjectList.model_construct(objects=tuple(kept), failure=None)
    return out, rejected
