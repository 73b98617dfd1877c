"""Per-version companion objects (the official ``WorkerResourceTemplate``): what a template may hold
(:func:`check_resource_template`) and its copy for one version (:func:`render_resource`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

RESOURCE_KINDS = frozenset(
    {"autoscaling/HorizontalPodAutoscaler", "policy/PodDisruptionBudget", "keda.sh/ScaledObject"}
)
"""``<group>/<kind>`` a template may make: autoscalers and disruption budgets (the chart's
RBAC grants these, as the official chart's default ``allowedResources`` grants its list)."""
METRIC_LABELS = (
    "temporal_worker_deployment_name",
    "temporal_worker_build_id",
    "temporal_namespace",
)
"""Labels twc adds to each External metric selector that has ``matchLabels``."""
PLACEHOLDERS = frozenset(
    {"DeploymentName", "BuildID", "Namespace", "TemporalNamespace", "WorkerDeploymentName"}
)
"""``{{ .Name }}`` in any string of a template: the versioned Deployment, its build ID, the
Kubernetes namespace, the Temporal namespace and the Temporal worker deployment."""
_PLACEHOLDER = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
MAX_NAME = 47
"""A copy's name: short enough for every kind (the official controller's limit)."""


def _walk(node: Any) -> Any:
    """Every ``(key, value)`` pair and string under ``node``."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)
    elif isinstance(node, str):
        yield None, node


def scales(template: Mapping[str, Any]) -> bool:
    """Whether the template's copies own their version's replicas (a ``scaleTargetRef``)."""
    return any(key == "scaleTargetRef" for key, _ in _walk(template.get("spec")))


def _selectors(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    metrics = spec.get("metrics")
    if not isinstance(metrics, list):
        return []
    found = [((m.get("external") or {}).get("metric") or {}).get("selector") for m in metrics]
    return [s for s in found if isinstance(s, dict) and "matchLabels" in s]


def check_resource_template(template: Mapping[str, Any]) -> list[str]:
    """What is wrong with a template (an empty list: nothing)."""
    api, kind, spec = template.get("apiVersion"), template.get("kind"), template.get("spec")
    if not isinstance(api, str) or not isinstance(kind, str) or not isinstance(spec, dict):
        return ["needs apiVersion, kind and spec"]
    problems = []
    if f"{api.rpartition('/')[0]}/{kind}" not in RESOURCE_KINDS:
        allowed = ", ".join(sorted(RESOURCE_KINDS))
        problems.append(f"{kind} ({api}) is not a kind twc makes per version: one of {allowed}")
    metadata = template.get("metadata") or {}
    if isinstance(metadata, dict) and {"name", "namespace"} & set(metadata):
        problems.append("metadata.name and metadata.namespace are twc's to set")
    for key, value in _walk(spec):
        if key == "scaleTargetRef" and value != {}:
            problems.append("scaleTargetRef must be {}: twc sets it to the version's Deployment")
        if key is None:
            unknown = sorted(set(_PLACEHOLDER.findall(value)) - PLACEHOLDERS)
            problems += [f"unknown placeholder {{{{ .{name} }}}}" for name in unknown]
    for selector in _selectors(spec):
        taken = sorted(set(METRIC_LABELS) & set(selector.get("matchLabels") or {}))
        problems += [f"metric selector label {label} is twc's to set" for label in taken]
    return problems


def resource_name(worker: str, template: str, build_id: str) -> str:
    """A copy's name: ``<worker>-<template>`` cut to fit, ending with a hash of the three."""
    digest = hashlib.sha256(f"{worker}/{template}/{build_id}".encode()).hexdigest()[:8]
    return f"{f'{worker}-{template}'[: MAX_NAME - 9].rstrip('-')}-{digest}"


def _filled(node: Any, values: Mapping[str, str], target: Mapping[str, str]) -> Any:
    if isinstance(node, Mapping):
        return {
            k: dict(target) if k == "scaleTargetRef" else _filled(v, values, target)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_filled(item, values, target) for item in node]
    return _PLACEHOLDER.sub(lambda m: values[m[1]], node) if isinstance(node, str) else node


def render_resource(
    template: Mapping[str, Any],
    *,
    deployment: Mapping[str, Any],
    build_id: str,
    temporal_namespace: str,
    worker_deployment: str,
) -> dict[str, Any]:
    """The template's ``apiVersion``, ``kind`` and ``spec`` for the version whose Deployment is
    ``deployment``: ``scaleTargetRef`` names it, ``spec.selector.matchLabels: {}`` selects its pods,
    External metric selectors get :data:`METRIC_LABELS` and placeholders their values."""
    meta, build = deployment["metadata"], build_id
    values = {
        "DeploymentName": meta["name"],
        "BuildID": build,
        "Namespace": meta["namespace"],
        "TemporalNamespace": temporal_namespace,
        "WorkerDeploymentName": worker_deployment,
    }
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"]}
    spec = _filled(template["spec"], values, target)
    selector = spec.get("selector")
    if isinstance(selector, dict) and selector.get("matchLabels") == {}:
        selector["matchLabels"] = dict(deployment["spec"]["selector"]["matchLabels"])
    metric = worker_deployment.replace("/", "_")
    ours = dict(zip(METRIC_LABELS, (metric, build, temporal_namespace), strict=True))
    for found in _selectors(spec):
        found["matchLabels"] = {**(found["matchLabels"] or {}), **ours}
    return {"apiVersion": template["apiVersion"], "kind": template["kind"], "spec": spec}
