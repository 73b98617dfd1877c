"""The versions of versioned workers as the cluster runs them, and gate inputs.

Every version of a worker with ``rollout`` is a Deployment labelled with its worker
(``twc.temporal.io/worker``) and build ID (``temporal.io/build-id``) and annotated with
its version spec. Reading them back is how the daemon, ``twc up`` and the program learn
which versions exist — never from memory, so a restart loses nothing.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twc.builders import LABEL_WORKER
from twc.kube.client import KubeClient, status_of
from twc.kube.workloads import WORKER_SELECTOR
from twc.rollout import (
    BUILD_ID_LABEL,
    TARGET_ANNOTATION,
    VERSION_ANNOTATION,
    VersionDeployment,
)

__all__ = ["VERSION_SELECTOR", "ObservedVersion", "parse_versions", "read_gate_input", "versions"]

VERSION_SELECTOR = f"{WORKER_SELECTOR},{BUILD_ID_LABEL}"
"""Every version Deployment twc created."""


@dataclass(frozen=True, slots=True)
class ObservedVersion:
    """One version's Deployment, as read from the cluster."""

    deployment: VersionDeployment
    """Build ID, name, replicas, ready replicas."""
    spec: dict[str, Any] | None
    """Its recorded version spec; ``None`` when the annotation is missing or unreadable."""
    target: bool
    """Whether it was the target when last applied."""


def parse_versions(items: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, ObservedVersion]]:
    """Per worker key (``<ns>/<worker>``), per build ID, its version Deployment."""
    out: dict[str, dict[str, ObservedVersion]] = {}
    for dep in items:
        meta = dep.get("metadata") or {}
        labels = meta.get("labels") or {}
        build, worker = labels.get(BUILD_ID_LABEL), labels.get(LABEL_WORKER)
        if not build or not worker:
            continue
        annotations = meta.get("annotations") or {}
        spec: dict[str, Any] | None = None
        try:
            loaded = json.loads(annotations.get(VERSION_ANNOTATION) or "null")
            spec = loaded if isinstance(loaded, dict) else None
        except ValueError:
            spec = None
        replicas = (dep.get("spec") or {}).get("replicas")
        ready = (dep.get("status") or {}).get("readyReplicas")
        key = f"{meta.get('namespace')}/{worker}"
        out.setdefault(key, {})[str(build)] = ObservedVersion(
            deployment=VersionDeployment(
                build_id=str(build),
                name=str(meta.get("name")),
                replicas=int(1 if replicas is None else replicas),
                ready=int(ready or 0),
            ),
            spec=spec,
            target=annotations.get(TARGET_ANNOTATION) == "true",
        )
    return out


def versions(kube: KubeClient) -> dict[str, dict[str, ObservedVersion]]:
    """Every version Deployment in the cluster, per worker and build ID.

    Raises:
        Exception: The list failed (unknown is not "no versions").
    """
    response = kube.apps.list_deployment_for_all_namespaces(
        label_selector=VERSION_SELECTOR, _preload_content=False
    )
    items = json.loads(response.data).get("items") or []
    return parse_versions(dep for dep in items if isinstance(dep, dict))


def read_gate_input(kube: KubeClient, namespace: str, source: Mapping[str, Any]) -> Any:
    """A gate's ``inputFrom``: the JSON document in a ConfigMap or Secret key.

    Raises:
        LookupError: The object or key is missing (and not ``optional``).
        ValueError: The value is not JSON.
    """
    ref = source.get("configMapKeyRef") or source.get("secretKeyRef") or {}
    name, key = str(ref.get("name", "")), str(ref.get("key", ""))
    secret = "secretKeyRef" in source
    what = f"{'Secret' if secret else 'ConfigMap'} {namespace}/{name} key {key!r}"
    try:
        if secret:
            data = kube.core.read_namespaced_secret(name, namespace).data or {}
            raw = base64.b64decode(data[key]).decode() if key in data else None
        else:
            obj = kube.core.read_namespaced_config_map(name, namespace)
            raw = (obj.data or {}).get(key)
            if raw is None and key in (obj.binary_data or {}):
                raw = base64.b64decode(obj.binary_data[key]).decode()
    except Exception as exc:
        if status_of(exc) != 404:
            raise
        raw = None
    if raw is None:
        if ref.get("optional"):
            return None
        raise LookupError(f"gate input {what} not found")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"gate input {what} is not JSON: {exc}") from exc
