"""The versions of versioned workers as the cluster runs them (Deployments labelled with
worker and build ID, annotated with their version spec, always read back), and gate
inputs."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twc.builders import LABEL_WORKER
from twc.kube.client import KubeClient, read_json
from twc.kube.workloads import WORKER_SELECTOR
from twc.rollout import (
    BUILD_ID_LABEL,
    TARGET_ANNOTATION,
    VERSION_ANNOTATION,
    VersionDeployment,
)

VERSION_SELECTOR = f"{WORKER_SELECTOR},{BUILD_ID_LABEL}"


@dataclass(frozen=True, slots=True)
class ObservedVersion:
    """One version's Deployment, as read from the cluster."""

    deployment: VersionDeployment
    spec: dict[str, Any] | None  # None when missing or unreadable
    target: bool  # the target when last applied


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
        try:
            spec = json.loads(annotations.get(VERSION_ANNOTATION) or "null")
        except ValueError:
            spec = None
        replicas = (dep.get("spec") or {}).get("replicas")
        ready = int((dep.get("status") or {}).get("readyReplicas") or 0)
        name, count = str(meta.get("name")), int(1 if replicas is None else replicas)
        out.setdefault(f"{meta.get('namespace')}/{worker}", {})[str(build)] = ObservedVersion(
            VersionDeployment(str(build), name, count, ready),
            spec if isinstance(spec, dict) else None,
            annotations.get(TARGET_ANNOTATION) == "true",
        )
    return out


def versions(kube: KubeClient) -> dict[str, dict[str, ObservedVersion]]:
    """Every version Deployment, per worker and build ID (raises when the list fails)."""
    response = kube.apps.list_deployment_for_all_namespaces(
        label_selector=VERSION_SELECTOR, _preload_content=False
    )
    items = json.loads(response.data).get("items") or []
    return parse_versions(dep for dep in items if isinstance(dep, dict))


def read_gate_input(kube: KubeClient, namespace: str, source: Mapping[str, Any]) -> Any:
    """A gate's ``inputFrom``: the JSON in a ConfigMap or Secret key (LookupError when
    missing and not ``optional``; ValueError when not JSON)."""
    ref = source.get("configMapKeyRef") or source.get("secretKeyRef") or {}
    name, key = str(ref.get("name", "")), str(ref.get("key", ""))
    secret = "secretKeyRef" in source
    what = f"{'Secret' if secret else 'ConfigMap'} {namespace}/{name} key {key!r}"
    read = kube.core.read_namespaced_secret if secret else kube.core.read_namespaced_config_map
    obj = read_json(read, name, namespace) or {}
    raw = None if secret else (obj.get("data") or {}).get(key)
    encoded = (obj.get("data") if secret else obj.get("binaryData")) or {}
    if raw is None and key in encoded:
        raw = base64.b64decode(encoded[key]).decode()
    if raw is None:
        if ref.get("optional"):
            return None
        raise LookupError(f"gate input {what} not found")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"gate input {what} is not JSON: {exc}") from exc
