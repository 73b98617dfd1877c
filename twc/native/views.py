"""Generated TemporalWorker objects ("views"): every worker twc runs, visible to ``kubectl``.

A worker from a labelled Queue or the fleet file gets one TemporalWorker object showing
it, never a second source of it:

* its ``spec`` is the worker as resolved; its status is written back as for any
  TemporalWorker;
* it carries :data:`VIEW_LABEL`, :data:`STACK_LABEL` and ``managed-by: twc``; a Queue's
  view is owned by the Queue (garbage-collected with it), a file worker's view is
  deleted by twc when the worker leaves the file;
* the desired state skips every object labelled :data:`VIEW_LABEL` (:func:`is_view`);
* an edit of a view's spec is undone, and an Event says where to make it instead.

:func:`desired_views` decides which views should exist; :func:`plan_views` what to write.
Pure: no client, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from twc.native.objects import NativeObject, worker_native
from twc.spec import (
    QUEUE_API_VERSION,
    QUEUE_KIND,
    WORKER_API_VERSION,
    ResolvedWorker,
    TemporalWorker,
    label_value,
)
from twc.spec.crds import VIEW_LABEL as CRD_VIEW_LABEL
from twc.spec.crds import WORKER_KIND
from twc.spec.labels import STACK_LABEL

__all__ = [
    "FROM_FLEET",
    "FROM_QUEUE",
    "MANAGED_BY_LABEL",
    "STACK_LABEL",
    "VIEW_ANNOTATION",
    "VIEW_FIELD_MANAGER",
    "VIEW_LABEL",
    "View",
    "ViewDelete",
    "ViewPlan",
    "ViewWrite",
    "desired_views",
    "foreign_spec_managers",
    "is_view",
    "plan_views",
    "spec_matches",
    "view_spec",
]

VIEW_LABEL = CRD_VIEW_LABEL
"""On every generated TemporalWorker: where its worker comes from (:data:`FROM_QUEUE`
or :data:`FROM_FLEET`). The desired state never reads such an object as a source."""
FROM_QUEUE = "Queue"
"""The worker is derived from a labelled kmsvc Queue object (the view's owner)."""
FROM_FLEET = "Fleet"
"""The worker is in the fleet file (a ``workers:`` entry or a ``queues:`` entry's
derived worker)."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""``twc`` on every object twc creates."""
VIEW_ANNOTATION = "twc.temporal.io/view-of"
"""Where the worker is declared, in words: ``Queue <ns>/<name>`` or ``fleet of stack
<stack>``."""
VIEW_FIELD_MANAGER = "twc-views"
"""The field manager of the daemon's server-side applies of views."""

_SOURCES = frozenset({FROM_QUEUE, FROM_FLEET})
_QUEUE_ORIGIN = "Queue "
_FILE_ORIGIN = "file"


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def is_view(obj: Mapping[str, Any]) -> bool:
    """Whether a TemporalWorker object is a view twc generated (of any stack): the
    label decides, as every entry point sees labels."""
    return _labels(obj).get(VIEW_LABEL) in _SOURCES


# ------------------------------------------------------------------------ spec
def _json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return value


def _pruned(value: Any) -> Any:
    """Without empty mappings and lists, so a view reads like a hand-written object."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            item = _pruned(item)
            if item is not None and item != {} and item != []:
                out[key] = item
        return out
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _connection_ref(worker: ResolvedWorker) -> dict[str, Any]:
    target = worker.connection
    if target.kind == "Connection" and target.api_group == "temporal.io":
        return {"name": target.name}
    return {"objectRef": {"apiGroup": target.api_group, "kind": target.kind, "name": target.name}}


def view_spec(worker: ResolvedWorker) -> dict[str, Any]:
    """The TemporalWorker spec of the worker twc runs: every setting as resolved.

    Shared fields are copied by name; the connection, queue, DLQ and replicas (left
    out while autoscaled) are written back in the spec's form.

    Raises:
        ValueError: The result is not a valid TemporalWorker spec.
    """
    data: dict[str, Any] = {}
    for name, info in TemporalWorker.model_fields.items():
        if name in ("name", "namespace"):
            continue
        value: Any
        if name == "connection_ref":
            value = _connection_ref(worker)
        elif name == "queue_ref":
            queue = worker.queue
            value = None if queue is None else {"name": queue.name, "namespace": queue.namespace}
        elif name == "dlq":
            dlq = worker.dlq
            value = (
                None
                if dlq is None
                else {
                    "enabled": True,
                    "image": dlq.image,
                    "replicas": dlq.replicas,
                    "taskQueueName": dlq.task_queue_name,
                    "resources": _json(dlq.resources),
                }
            )
        elif name == "replicas":
            # The autoscaler's count is status, not spec: writing it would rewrite the
            # view on every scaling step.
            value = None if worker.autoscaling is not None else worker.replicas
        elif name in type(worker).model_fields:
            value = _json(getattr(worker, name))
        else:
            continue
        if value is not None:
            data[info.alias or name] = value
    data = _pruned(data)
    try:
        model = TemporalWorker.model_validate(
            {**data, "name": worker.name, "namespace": worker.namespace}
        )
    except ValidationError as exc:
        raise ValueError(f"not a valid TemporalWorker spec: {exc}") from None
    spec = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    spec.pop("name", None)
    spec.pop("namespace", None)
    out: dict[str, Any] = _pruned(spec)
    return out


def _model(spec: object, name: str, namespace: str) -> TemporalWorker | None:
    if not isinstance(spec, Mapping):
        return None
    try:
        return TemporalWorker.model_validate({**spec, "name": name, "namespace": namespace})
    except ValidationError:
        return None


def spec_matches(obj: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether ``obj``'s spec says what ``spec`` says, compared as worker models (the
    API server fills in the CRD's defaults, the view leaves empty fields out)."""
    current_spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if current_spec == spec:
        return True  # the common case, without building two models
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    current = _model(current_spec, name, namespace)
    return current is not None and current == _model(spec, name, namespace)


def foreign_spec_managers(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """Field managers other than twc's that own part of ``obj``'s spec (who edited it)."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    entries = meta.get("managedFields") if isinstance(meta, Mapping) else None
    found: set[str] = set()
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or entry.get("subresource"):
            continue
        manager = str(entry.get("manager") or "")
        owned = entry.get("fieldsV1")
        if manager != VIEW_FIELD_MANAGER and isinstance(owned, Mapping) and "f:spec" in owned:
            found.add(manager or "unknown")
    return tuple(sorted(found))


# ---------------------------------------------------------------------- desired
@dataclass(frozen=True, slots=True)
class View:
    """One generated TemporalWorker object as it should be."""

    key: str
    """``<namespace>/<name>``: the worker's key, and the object's."""
    source: str
    """Where the worker is declared, in words (also the :data:`VIEW_ANNOTATION`)."""
    body: Mapping[str, Any]
    """The whole object to apply: apiVersion, kind, metadata (labels, annotation,
    owner reference) and spec."""

    @property
    def spec(self) -> Mapping[str, Any]:
        """The derived spec."""
        spec: Mapping[str, Any] = self.body["spec"]
        return spec

    @property
    def labels(self) -> Mapping[str, str]:
        """The labels twc sets."""
        labels: Mapping[str, str] = self.body["metadata"]["labels"]
        return labels


def desired_views(
    workers: Mapping[str, ResolvedWorker],
    origins: Mapping[str, str],
    queues: Mapping[str, NativeObject],
    *,
    stack: str,
) -> tuple[dict[str, View], dict[str, str]]:
    """The views the cluster should hold: one per worker from a Queue or the file.

    Workers that come from a TemporalWorker object have it already and get none.

    Args:
        workers: Every worker of the desired state, by key.
        origins: Per worker, where it comes from (``file``, ``Queue <ns>/<name>``,
            ``TemporalWorker <ns>/<name>``), as the desired state says.
        queues: The Queue objects in the desired state, by ``<ns>/<name>`` (their uid
            becomes the owner reference).
        stack: The stack (its label).

    Returns:
        The views by key, and per worker whose view cannot be made now, why (its
        existing view, if any, is then left as it is: neither changed nor deleted).
    """
    stack_value = label_value(stack)
    views: dict[str, View] = {}
    held: dict[str, str] = {}
    for key, worker in sorted(workers.items()):
        origin = origins.get(key, _FILE_ORIGIN)
        owner: dict[str, Any] | None = None
        if origin.startswith(_QUEUE_ORIGIN):
            queue_key = origin[len(_QUEUE_ORIGIN) :]
            queue = queues.get(queue_key)
            if queue is None or not queue.uid:
                held[key] = f"the uid of Queue {queue_key} is not known"
                continue
            derived, source = FROM_QUEUE, origin
            owner = {
                "apiVersion": QUEUE_API_VERSION,
                "kind": QUEUE_KIND,
                "name": queue.name,
                "uid": queue.uid,
                # No blockOwnerDeletion: deleting the Queue never waits for the view.
                "controller": True,
            }
        elif origin == _FILE_ORIGIN:
            derived, source = FROM_FLEET, f"fleet of stack {stack}"
        else:
            continue  # a TemporalWorker object: visible as it is
        try:
            spec = view_spec(worker)
        except ValueError as exc:
            held[key] = str(exc)
            continue
        metadata: dict[str, Any] = {
            "name": worker.name,
            "namespace": worker.namespace,
            "labels": {
                MANAGED_BY_LABEL: "twc",
                VIEW_LABEL: derived,
                STACK_LABEL: stack_value,
            },
            "annotations": {VIEW_ANNOTATION: source},
        }
        if owner is not None:
            metadata["ownerReferences"] = [owner]
        body = {
            "apiVersion": WORKER_API_VERSION,
            "kind": WORKER_KIND,
            "metadata": metadata,
            "spec": spec,
        }
        views[key] = View(key=key, source=source, body=body)
    return views, held


# ------------------------------------------------------------------------- plan
@dataclass(frozen=True, slots=True)
class ViewWrite:
    """A server-side apply of one view."""

    view: View
    """What to apply."""
    current: Mapping[str, Any] | None = None
    """The object as observed; ``None``: create it."""
    edited_by: tuple[str, ...] = ()
    """Field managers other than twc's that changed its spec (their change is undone)."""

    @property
    def create(self) -> bool:
        """Whether the object does not exist yet."""
        return self.current is None

    @property
    def resource_version(self) -> str | None:
        """The observed ``resourceVersion``: the apply is conditional on it."""
        if self.current is None:
            return None
        version = (self.current.get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None


@dataclass(frozen=True, slots=True)
class ViewDelete:
    """A view whose worker is gone."""

    obj: NativeObject
    """The object (its uid is the delete's precondition)."""
    source: str
    """Where its worker was declared."""


@dataclass(frozen=True, slots=True)
class ViewPlan:
    """What to write so the cluster holds exactly the desired views."""

    writes: tuple[ViewWrite, ...] = ()
    """Views to create or to put back."""
    deletes: tuple[ViewDelete, ...] = ()
    """Views of workers that are gone."""
    shown: Mapping[str, NativeObject] = field(default_factory=dict)
    """Views that exist now, by key: their status is written back."""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Per worker without a view, why (an object of that name that is not twc's...)."""


def _owned_by(obj: Mapping[str, Any], stack: str, *, adopt: bool = False) -> bool:
    """Whether ``obj`` is a view this stack keeps, by its labels; with ``adopt``, also
    a view that lost only its stack label (put back, never deleted on that ground)."""
    if not is_view(obj):
        return False
    found = _labels(obj).get(STACK_LABEL)
    return found == label_value(stack) or (adopt and found is None)


def _metadata_matches(obj: Mapping[str, Any], view: View) -> bool:
    """Whether ``obj`` carries twc's labels, annotation and owner reference (what others
    added is ignored)."""
    raw = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    labels = _labels(obj)
    if any(labels.get(k) != v for k, v in view.labels.items()):
        return False
    found = meta.get("annotations")
    annotations: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    wanted_annotations = view.body["metadata"]["annotations"]
    if any(annotations.get(k) != v for k, v in wanted_annotations.items()):
        return False
    found = meta.get("ownerReferences")
    owners: list[Any] = found if isinstance(found, list) else []
    have = {
        (o.get("kind"), o.get("name"), o.get("uid"), bool(o.get("controller")))
        for o in owners
        if isinstance(o, Mapping)
    }
    wanted_owners = view.body["metadata"].get("ownerReferences") or []
    want = {(o["kind"], o["name"], o["uid"], bool(o.get("controller"))) for o in wanted_owners}
    return want <= have


def plan_views(
    views: Mapping[str, View],
    held: Mapping[str, str],
    objects: Sequence[Mapping[str, Any]] | None,
    *,
    stack: str,
) -> ViewPlan:
    """What to write: create the missing views, put back the changed ones, delete the
    ones whose worker is gone. A view that already says what it should costs nothing.

    Args:
        views: The desired views (:func:`desired_views`).
        held: Workers whose view cannot be made now: theirs is left as it is.
        objects: Every TemporalWorker object in the cluster, as the watch holds them;
            ``None`` when they are unknown (nothing is written then).
        stack: The stack whose views these are.

    Returns:
        The plan.
    """
    if objects is None:
        return ViewPlan(skipped=dict(held))
    observed: dict[str, Mapping[str, Any]] = {}
    for obj in objects:
        nat = worker_native(obj)
        observed[nat.key] = obj
    writes: list[ViewWrite] = []
    deletes: list[ViewDelete] = []
    shown: dict[str, NativeObject] = {}
    skipped: dict[str, str] = dict(held)
    for key, view in sorted(views.items()):
        current = observed.get(key)
        if current is None:
            writes.append(ViewWrite(view))
            continue
        nat = worker_native(current)
        if not _owned_by(current, stack, adopt=True):
            other = _labels(current).get(STACK_LABEL)
            skipped[key] = (
                "another stack's view of that name exists"
                if is_view(current) and other
                else "a TemporalWorker of that name exists that twc did not generate"
            )
            continue
        if nat.deleting:
            skipped[key] = "its view is being deleted; it is made again once gone"
            continue
        shown[key] = nat
        if spec_matches(current, view.spec) and _metadata_matches(current, view):
            continue
        edited = () if spec_matches(current, view.spec) else foreign_spec_managers(current)
        writes.append(ViewWrite(view, current, edited))
    for key, current in sorted(observed.items()):
        if key in views or key in held or not _owned_by(current, stack):
            continue
        nat = worker_native(current)
        if nat.deleting:
            continue
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        deletes.append(ViewDelete(nat, str(annotations.get(VIEW_ANNOTATION, "?"))))
    return ViewPlan(writes=tuple(writes), deletes=tuple(deletes), shown=shown, skipped=skipped)
