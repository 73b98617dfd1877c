"""Generated TemporalWorker objects ("views") that show each worker from a Queue or the
fleet file to ``kubectl``, never a second source of it: the desired state skips them, an
edit of their spec is undone, a Queue's view is garbage-collected with it. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from twc.native.objects import NativeObject, metadata, worker_native
from twc.spec import (
    QUEUE_API_VERSION,
    QUEUE_KIND,
    WORKER_API_VERSION,
    ResolvedWorker,
    TemporalWorker,
    label_value,
    part,
)
from twc.spec.crds import MANAGED_BY_LABEL, WORKER_KIND
from twc.spec.crds import VIEW_LABEL as VIEW_LABEL
from twc.spec.labels import STACK_LABEL as STACK_LABEL

FROM_QUEUE = "Queue"
""":data:`VIEW_LABEL` of a view of a worker derived from a labelled kmsvc Queue."""
FROM_FLEET = "Fleet"
""":data:`VIEW_LABEL` of a view of a worker in the fleet file."""
VIEW_ANNOTATION = "twc.temporal.io/view-of"
"""Where the worker is declared: ``Queue <ns>/<name>`` or ``fleet of stack <stack>``."""
VIEW_FIELD_MANAGER = "twc-views"

_QUEUE_ORIGIN = "Queue "


def is_view(obj: Mapping[str, Any]) -> bool:
    """Whether a TemporalWorker object is a view twc generated (of any stack)."""
    return part(metadata(obj), "labels").get(VIEW_LABEL) in (FROM_QUEUE, FROM_FLEET)


def _pruned(value: Any) -> Any:
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    if not isinstance(value, dict):
        return value
    items = ((k, _pruned(v)) for k, v in value.items())
    return {k: v for k, v in items if v is not None and v != {} and v != []}


def _spec_value(worker: ResolvedWorker, name: str) -> Any:
    if name == "connection_ref":
        target = worker.connection
        if target.kind == "Connection" and target.api_group == "temporal.io":
            return {"name": target.name}
        ref = {"apiGroup": target.api_group, "kind": target.kind, "name": target.name}
        return {"objectRef": ref}
    if name == "queue_ref":
        queue = worker.queue
        return None if queue is None else {"name": queue.name, "namespace": queue.namespace}
    if name == "dlq":
        dlq = worker.dlq
        if dlq is None:
            return None
        fields = {"image": dlq.image, "replicas": dlq.replicas, "resources": dlq.resources}
        return {"enabled": True, "taskQueueName": dlq.task_queue_name, **fields}
    if name == "replicas":
        # The autoscaler's count is status: writing it would rewrite the view each step.
        return None if worker.autoscaling is not None else worker.replicas
    return getattr(worker, name) if name in type(worker).model_fields else None


_SPECS: dict[str, tuple[ResolvedWorker, dict[str, Any]]] = {}
"""The last spec made of each worker (by key): most iterations make every view again."""


def view_spec(worker: ResolvedWorker) -> dict[str, Any]:
    """The TemporalWorker spec of the worker as resolved; ValueError when it is invalid."""
    last = _SPECS.get(worker.stack_key)
    if last is not None and last[0] == worker:
        return dict(last[1])
    data = {
        info.alias or name: _spec_value(worker, name)
        for name, info in TemporalWorker.model_fields.items()
        if name not in ("name", "namespace")
    }
    data = _pruned(to_jsonable_python(data, by_alias=True, exclude_none=True))
    try:
        model = _model(data, worker.name, worker.namespace)
    except ValidationError as exc:
        raise ValueError(f"not a valid TemporalWorker spec: {exc}") from None
    spec = model.model_dump(mode="json", by_alias=True, exclude={"name", "namespace"})
    _SPECS[worker.stack_key] = (worker, cast(dict[str, Any], _pruned(spec)))
    return dict(_SPECS[worker.stack_key][1])


def _model(spec: Any, name: str, namespace: str) -> TemporalWorker:
    return TemporalWorker.model_validate({**spec, "name": name, "namespace": namespace})


def spec_matches(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s spec says what ``spec`` says, compared as worker models."""
    current = obj.get("spec") if isinstance(obj, Mapping) else None
    if current == spec:
        return True
    meta = metadata(obj)
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
    try:
        return _model(current, name, namespace) == _model(spec, name, namespace)
    except (TypeError, ValidationError):
        return False


def foreign_spec_managers(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """Field managers other than twc's that own part of ``obj``'s spec (who edited it)."""
    entries = metadata(obj).get("managedFields")
    found = {
        str(entry.get("manager") or "") or "unknown"
        for entry in (entries if isinstance(entries, list) else ())
        if isinstance(entry, Mapping)
        and not entry.get("subresource")
        and entry.get("manager") != VIEW_FIELD_MANAGER
        and isinstance(entry.get("fieldsV1"), Mapping)
        and "f:spec" in entry["fieldsV1"]
    }
    return tuple(sorted(found))


@dataclass(frozen=True, slots=True)
class View:
    """One generated TemporalWorker object as it should be, and where its worker is declared."""

    key: str
    source: str
    body: Mapping[str, Any]

    @property
    def spec(self) -> Mapping[str, Any]:
        return cast(Mapping[str, Any], self.body["spec"])


def desired_views(
    workers: Mapping[str, ResolvedWorker],
    origins: Mapping[str, str],
    queues: Mapping[str, NativeObject],
    *,
    stack: str,
) -> tuple[dict[str, View], dict[str, str]]:
    """The views by key, and why a worker's view cannot be made now (``held``)."""
    views: dict[str, View] = {}
    held: dict[str, str] = {}
    # Forget the specs of gone workers (a shard's namespaces are whole: keep other shards').
    namespaces = {w.namespace for w in workers.values()}
    for gone in [k for k in _SPECS if k not in workers and k.split("/")[0] in namespaces]:
        del _SPECS[gone]
    for key, worker in sorted(workers.items()):
        origin = origins.get(key, "file")
        owners: list[dict[str, Any]] = []
        if origin.startswith(_QUEUE_ORIGIN):
            queue = queues.get(origin[len(_QUEUE_ORIGIN) :])
            if queue is None or not queue.uid:
                held[key] = f"the uid of {origin} is not known"
                continue
            derived, source = FROM_QUEUE, origin
            # No blockOwnerDeletion: deleting the Queue never waits for the view.
            owner = {"apiVersion": QUEUE_API_VERSION, "kind": QUEUE_KIND, "name": queue.name}
            owners.append({**owner, "uid": queue.uid, "controller": True})
        elif origin == "file":
            derived, source = FROM_FLEET, f"fleet of stack {stack}"
        else:
            continue
        try:
            spec = view_spec(worker)
        except ValueError as exc:
            held[key] = str(exc)
            continue
        labels = {MANAGED_BY_LABEL: "twc", VIEW_LABEL: derived, STACK_LABEL: label_value(stack)}
        metadata: dict[str, Any] = {"name": worker.name, "namespace": worker.namespace}
        metadata.update(labels=labels, annotations={VIEW_ANNOTATION: source})
        if owners:
            metadata["ownerReferences"] = owners
        body = {"apiVersion": WORKER_API_VERSION, "kind": WORKER_KIND, "metadata": metadata}
        views[key] = View(key=key, source=source, body={**body, "spec": spec})
    return views, held


@dataclass(frozen=True, slots=True)
class ViewWrite:
    """A server-side apply of a view over ``current`` (``None``: create), undoing ``edited_by``."""

    view: View
    current: Mapping[str, Any] | None = None
    edited_by: tuple[str, ...] = ()

    @property
    def create(self) -> bool:
        return self.current is None

    @property
    def resource_version(self) -> str | None:
        """The observed ``resourceVersion``: the apply is conditional on it."""
        version = metadata(self.current).get("resourceVersion")
        return str(version) if version else None


@dataclass(frozen=True, slots=True)
class ViewDelete:
    """A view whose worker is gone (its uid is the delete's precondition)."""

    obj: NativeObject
    source: str


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """The views to write and delete, those shown, and why a worker has none."""

    writes: tuple[ViewWrite, ...] = ()
    deletes: tuple[ViewDelete, ...] = ()
    shown: Mapping[str, NativeObject] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)


def _owned_by(obj: Mapping[str, Any], stack: str, *, adopt: bool = False) -> bool:
    """Whether ``obj`` is this stack's view (with ``adopt``, also one without a stack label)."""
    found = part(metadata(obj), "labels").get(STACK_LABEL)
    return is_view(obj) and (found == label_value(stack) or (adopt and found is None))


def _refs(found: Any) -> set[tuple[Any, ...]]:
    return {
        (o.get("kind"), o.get("name"), o.get("uid"), bool(o.get("controller")))
        for o in (found if isinstance(found, list) else ())
        if isinstance(o, Mapping)
    }


def _metadata_matches(obj: Mapping[str, Any], view: View) -> bool:
    wanted = view.body["metadata"]
    return all(
        part(metadata(obj), key).get(k) == v
        for key in ("labels", "annotations")
        for k, v in wanted[key].items()
    ) and _refs(wanted.get("ownerReferences")) <= _refs(metadata(obj).get("ownerReferences"))


def plan_views(
    views: Mapping[str, View],
    held: Mapping[str, str],
    objects: Sequence[Mapping[str, Any]] | None,
    *,
    stack: str,
) -> ViewPlan:
    """Write missing or changed views, delete orphans; nothing while ``objects`` is unknown."""
    if objects is None:
        return ViewPlan(skipped=dict(held))
    observed = {n.key: (obj, n) for obj in objects for n in (worker_native(obj),)}
    writes: list[ViewWrite] = []
    shown: dict[str, NativeObject] = {}
    skipped: dict[str, str] = dict(held)
    for key, view in sorted(views.items()):
        current, native = observed.get(key, ({}, None))
        if native is None:
            writes.append(ViewWrite(view))
        elif not _owned_by(current, stack, adopt=True):
            other = is_view(current) and part(metadata(current), "labels").get(STACK_LABEL)
            skipped[key] = (
                "another stack's view of that name exists"
                if other
                else "a TemporalWorker of that name exists that twc did not generate"
            )
        elif native.deleting:
            skipped[key] = "its view is being deleted; it is made again once gone"
        else:
            shown[key] = native
            same_spec = spec_matches(current, view.spec)
            if not same_spec or not _metadata_matches(current, view):
                edited = () if same_spec else foreign_spec_managers(current)
                writes.append(ViewWrite(view, current, edited))
    deletes = [
        ViewDelete(native, str(part(metadata(obj), "annotations").get(VIEW_ANNOTATION, "?")))
        for key, (obj, native) in sorted(observed.items())
        if key not in views and key not in held and _owned_by(obj, stack) and not native.deleting
    ]
    return ViewPlan(tuple(writes), tuple(deletes), shown, skipped)
