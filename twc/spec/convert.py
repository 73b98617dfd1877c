"""``twc convert``: the official worker controller's manifests as fleet-file entries;
what a fleet file has no place for is left out with a :class:`Note`."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twc.spec._load import WORKER_API_VERSION
from twc.spec._models import API_GROUP, API_VERSION, RESERVED_ENV_NAMES
from twc.spec._template import RESERVED_POD_LABELS, RESERVED_POD_SPEC_FIELDS, worker_container_index
from twc.spec.crds import OFFICIAL_WORKER_KIND, WORKER_KIND

WORKER_KINDS = frozenset({"WorkerDeployment", "TemporalWorkerDeployment"})
CONNECTION_KINDS = frozenset({"Connection", "TemporalConnection"})
_DEFAULT_PROGRESS_DEADLINE = 600  # what twc's Deployments use, as the official default


@dataclass(frozen=True, slots=True)
class Note:
    """Something of the input the fleet file does not carry (or carries changed)."""

    source: str
    """The object, e.g. ``WorkerDeployment default/payment-processor``."""
    field: str
    """Its field, e.g. ``spec.minReadySeconds``; empty for the object as a whole."""
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.field + ': ' if self.field else ''}{self.message}"


@dataclass(frozen=True, slots=True)
class Conversion:
    """The fleet document, a note per field left out or changed, and the entries made."""

    fleet: dict[str, Any]
    notes: tuple[Note, ...]
    converted: int


def convert_manifests(documents: Iterable[object]) -> Conversion:
    """The official controller's objects among ``documents`` as fleet entries; never raises."""
    notes: list[Note] = []
    connections: list[dict[str, Any]] = []
    workers: list[dict[str, Any]] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            notes.append(Note(f"document {index + 1}", "", "not a mapping: skipped"))
            continue
        kind = str(doc.get("kind", ""))
        meta = doc["metadata"] if isinstance(doc.get("metadata"), Mapping) else {}
        name = str(meta.get("name") or "")
        namespace = meta["namespace"] if isinstance(meta.get("namespace"), str) else ""
        source = f"{kind or 'object'} {namespace + '/' if namespace else ''}{name or '?'}"
        group = str(doc.get("apiVersion", "")).partition("/")[0]
        if group != API_GROUP or kind not in WORKER_KINDS | CONNECTION_KINDS:
            skipped = "not one of the official controller's Connection or WorkerDeployment objects"
            notes.append(Note(source, "", f"{skipped}: skipped"))
            continue
        if not namespace:
            assumed = (
                "not set: namespace `default` assumed (kubectl would use its current namespace)"
            )
            notes.append(Note(source, "metadata.namespace", assumed))
            namespace = "default"
        spec = doc.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        if kind in CONNECTION_KINDS:
            # The official ConnectionSpec is the fleet file's Connection, field for field.
            connections.append({"name": name, "namespace": namespace, **copy.deepcopy(dict(spec))})
        else:
            workers.append(_worker(name, namespace, meta, spec, source, notes))
    fleet: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "Fleet"}
    fleet |= {"connections": connections} if connections else {}
    fleet |= {"workers": workers} if workers else {}
    return Conversion(fleet=fleet, notes=tuple(notes), converted=len(connections) + len(workers))


def as_temporal_worker(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A served ``WorkerDeployment`` object as the TemporalWorker twc reconciles it as, by
    :func:`convert_manifests`' rules (notes dropped); any other object as it is."""
    if obj.get("kind") != OFFICIAL_WORKER_KIND:
        return obj
    meta = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    spec = obj["spec"] if isinstance(obj.get("spec"), Mapping) else {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    worker = _worker(name, namespace, {}, spec, "", [])
    del worker["name"], worker["namespace"]
    return {**obj, "apiVersion": WORKER_API_VERSION, "kind": WORKER_KIND, "spec": worker}


def _worker(
    name: str,
    namespace: str,
    meta: Mapping[str, Any],
    spec: Mapping[str, Any],
    source: str,
    notes: list[Note],
) -> dict[str, Any]:
    def note(field: str, message: str) -> None:
        notes.append(Note(source, field, message))

    for key in ("labels", "annotations"):
        if meta.get(key):
            note(
                f"metadata.{key}",
                "a fleet worker has no object labels or annotations: left out (pod ones belong in "
                "template.metadata)",
            )
    worker: dict[str, Any] = {"name": name, "namespace": namespace}
    options = spec.get("workerOptions")
    options = options if isinstance(options, Mapping) else {}
    ref = options.get("connectionRef")
    if isinstance(ref, Mapping) and ref.get("name"):
        worker["connectionRef"] = {"name": str(ref["name"])}
    elif isinstance(options.get("connection"), str):
        # Older manifests (and some of the official docs) name it directly.
        worker["connectionRef"] = {"name": options["connection"]}
        note("spec.workerOptions.connection", "written as connectionRef.name")
    else:
        note("spec.workerOptions.connectionRef", "missing: set connectionRef (or defaults)")
    if options.get("temporalNamespace"):
        worker["temporalNamespace"] = str(options["temporalNamespace"])
    custom_build_id = options.get("unsafeCustomBuildID")
    if custom_build_id:
        note("spec.workerOptions.unsafeCustomBuildID", "written as rollout.buildID (same meaning)")
    worker["taskQueueName"] = name
    note(
        "",
        f"the official WorkerDeployment names no task queue (the worker's code picks it) "
        f"and twc checks that a worker's queue has pollers: taskQueueName is set to {name!r}; "
        "change it to the queue the worker polls",
    )
    if spec.get("replicas") is not None:
        worker["replicas"] = spec["replicas"]
    else:
        note(
            "spec.replicas",
            "not set (the official controller leaves replicas to an external autoscaler): "
            "twc runs 1 replica; set replicas, or autoscaling for backlog-driven scaling",
        )
    if spec.get("minReadySeconds"):
        note("spec.minReadySeconds", "no counterpart: left out (twc's Deployments use 0)")
    deadline = spec.get("progressDeadlineSeconds")
    if deadline is not None and deadline != _DEFAULT_PROGRESS_DEADLINE:
        note(
            "spec.progressDeadlineSeconds",
            f"no counterpart: left out (twc's Deployments use {_DEFAULT_PROGRESS_DEADLINE})",
        )
    for key in ("rollout", "sunset"):
        if isinstance(spec.get(key), Mapping):
            worker[key] = copy.deepcopy(dict(spec[key]))
    if custom_build_id and isinstance(worker.get("rollout"), dict):
        worker["rollout"]["buildID"] = str(custom_build_id)
    template = spec.get("template")
    if isinstance(template, Mapping):
        worker["template"] = _template(template, note)
    else:
        note("spec.template", "missing: the worker needs an image (set image or template)")
    return worker


def _template(template: Mapping[str, Any], note: Callable[[str, str], None]) -> dict[str, Any]:
    """The pod template without what twc sets itself."""
    out = copy.deepcopy(dict(template))
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        for key in [k for k in metadata if k not in ("labels", "annotations")]:
            note(f"spec.template.metadata.{key}", "twc names the pods: left out")
            del metadata[key]
        labels = metadata.get("labels")
        if isinstance(labels, dict):
            for key in sorted(set(labels) & RESERVED_POD_LABELS):
                note(f'spec.template.metadata.labels["{key}"]', "twc sets this label: left out")
                del labels[key]
        if not metadata:
            del out["metadata"]
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    for key, why in RESERVED_POD_SPEC_FIELDS.items():
        if key in spec:
            note(f"spec.template.spec.{key}", f"left out: {why}")
            del spec[key]
    containers = spec.get("containers")
    if isinstance(containers, list):
        index = worker_container_index(containers)
        container = containers[index] if index is not None else None
        if isinstance(container, dict) and isinstance(container.get("env"), list):
            kept = []
            for entry in container["env"]:
                if isinstance(entry, Mapping) and entry.get("name") in RESERVED_ENV_NAMES:
                    note(
                        f"spec.template.spec.containers[{index}].env.{entry['name']}",
                        "twc sets it from the connection: left out",
                    )
                    continue
                kept.append(entry)
            container["env"] = kept
            if not kept:
                del container["env"]
    return out
