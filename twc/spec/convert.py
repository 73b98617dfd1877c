"""The official worker controller's ``WorkerDeployment`` as the TemporalWorker twc
reconciles it as (:func:`as_temporal_worker`): the same versioned worker, with what twc
sets itself (the Temporal env, the pods' names and twc's labels) left to twc."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from twc.spec._load import WORKER_API_VERSION, part
from twc.spec._models import API_GROUP, CLUSTER_CONNECTION_KIND, RESERVED_ENV_NAMES
from twc.spec._template import RESERVED_POD_LABELS, RESERVED_POD_SPEC_FIELDS, worker_container_index
from twc.spec.crds import OFFICIAL_WORKER_KIND, WORKER_KIND


def as_temporal_worker(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``WorkerDeployment`` object as a TemporalWorker; any other object as it is. The official
    kind names no task queue: the worker's is its name; ``spec.resourceTemplates`` (not in the
    official schema) are its WorkerResourceTemplates. Without ``replicas`` it runs one."""
    if obj.get("kind") != OFFICIAL_WORKER_KIND:
        return obj
    spec = part(obj, "spec")
    options = part(spec, "workerOptions")
    worker: dict[str, Any] = {"taskQueueName": str(part(obj, "metadata").get("name", ""))}
    ref = part(options, "connectionRef")
    if ref.get("kind") == CLUSTER_CONNECTION_KIND:
        cluster = {"apiGroup": API_GROUP, "kind": CLUSTER_CONNECTION_KIND}
        worker["connectionRef"] = {"objectRef": {**cluster, "name": str(ref.get("name", ""))}}
    elif ref.get("name"):
        worker["connectionRef"] = {"name": str(ref["name"])}
    if options.get("temporalNamespace"):
        worker["temporalNamespace"] = str(options["temporalNamespace"])
    for key in ("replicas", "minReadySeconds", "progressDeadlineSeconds"):
        if spec.get(key) is not None:
            worker[key] = spec[key]
    worker |= {k: copy.deepcopy(dict(spec[k])) for k in ("rollout", "sunset") if part(spec, k)}
    if spec.get("resourceTemplates"):  # its WorkerResourceTemplates, as the watch reads them
        worker["resourceTemplates"] = copy.deepcopy(list(spec["resourceTemplates"]))
    if options.get("unsafeCustomBuildID") and "rollout" in worker:
        worker["rollout"]["buildID"] = str(options["unsafeCustomBuildID"])
    if part(spec, "template"):
        worker["template"] = _template(spec["template"])
    return {**obj, "apiVersion": WORKER_API_VERSION, "kind": WORKER_KIND, "spec": worker}


def _template(template: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template without what twc sets itself."""
    out = copy.deepcopy(dict(template))
    metadata = part(out, "metadata")
    labels = {k: v for k, v in part(metadata, "labels").items() if k not in RESERVED_POD_LABELS}
    kept = {"labels": labels, "annotations": metadata.get("annotations")}
    out.pop("metadata", None)
    if any(kept.values()):
        out["metadata"] = {k: v for k, v in kept.items() if v}
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out
    for key in RESERVED_POD_SPEC_FIELDS:
        spec.pop(key, None)
    containers = spec.get("containers")
    index = worker_container_index(containers) if isinstance(containers, list) else None
    container = containers[index] if containers and index is not None else None
    if isinstance(container, dict) and isinstance(container.get("env"), list):
        entries = (e for e in container["env"] if isinstance(e, Mapping))
        container["env"] = [e for e in entries if e.get("name") not in RESERVED_ENV_NAMES]
        if not container["env"]:
            del container["env"]
    return out
