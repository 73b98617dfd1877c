"""A worker's versions, named and specified: the names the official worker controller derives
(build IDs, Deployments, labels, env, gate IDs) and, from a resolved worker, its rollout
policy, build ID and *version spec* (what its pods run, hashed into the build ID and recorded
on the Deployment so an older version is rebuilt exactly while it drains). The connection is
not part of it: it reaches every live version."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from twc.rollout._model import (
    FailureRatePolicy,
    GatePolicy,
    RolloutPolicy,
    StepPolicy,
    Strategy,
    SunsetPolicy,
)
from twc.spec import GateWorkflow, ResolvedWorker, parse_duration

BUILD_ID_LABEL: Final = "temporal.io/build-id"
DEPLOYMENT_NAME_LABEL: Final = "temporal.io/deployment-name"
ENV_DEPLOYMENT_NAME: Final = "TEMPORAL_DEPLOYMENT_NAME"
ENV_BUILD_ID: Final = "TEMPORAL_WORKER_BUILD_ID"
VERSION_ANNOTATION: Final = "twc.temporal.io/version-spec"
"""On a version's Deployment: its version spec (JSON), to rebuild it exactly while it drains."""
POLICY_ANNOTATION: Final = "twc.temporal.io/rollout"
"""On a version's Deployment: the rollout policy in effect (JSON), for previews."""
TARGET_ANNOTATION: Final = "twc.temporal.io/target-version"
"""On the target version's Deployment only (``"true"``)."""
MAX_BUILD_ID: Final = 63
MAX_DEPLOYMENT_NAME: Final = 63
_HASH_LENGTH: Final = 8
_INVALID_BUILD_ID = re.compile(r"[^a-zA-Z0-9._-]+")
_INVALID_DNS = re.compile(r"[^a-z0-9-]+")


def _clean_build_id(text: str) -> str:
    return _INVALID_BUILD_ID.sub("-", text).strip("-._")


def image_prefix(image: str) -> str:
    """The part of an image reference a build ID starts with: the tag, else the digest,
    else the repository path (without the registry host)."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[colon + 1 :]
    if digest:
        return digest.partition(":")[2] or digest
    first, sep, rest = name.partition("/")
    return rest if sep and ("." in first or ":" in first or first == "localhost") else name


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def derive_build_id(image: str, version_fields: Mapping[str, Any], given: str | None = None) -> str:
    """``<image tag>-<8 hex digits of version_fields>`` within 63 characters, or ``given``
    cleaned."""
    if given:
        cleaned = _clean_build_id(given)[:MAX_BUILD_ID].strip("-._")
        if cleaned:
            return cleaned
    suffix = _digest(version_fields)[:_HASH_LENGTH]
    prefix = _clean_build_id(image_prefix(image))[: MAX_BUILD_ID - _HASH_LENGTH - 1]
    prefix = prefix.strip("-._")
    return f"{prefix}-{suffix}" if prefix else suffix


def version_deployment_name(worker: str, build_id: str) -> str:
    """``<worker>-<buildID>`` as a DNS label; when too long, cut and ended with a hash."""
    full = _INVALID_DNS.sub("-", f"{worker}-{build_id}".lower()).strip("-")
    if len(full) <= MAX_DEPLOYMENT_NAME:
        return full
    digest = _digest(f"{worker}/{build_id}")[:_HASH_LENGTH]
    head = full[: MAX_DEPLOYMENT_NAME - _HASH_LENGTH - 1].rstrip("-")
    return f"{head}-{digest}"


def temporal_deployment_name(namespace: str, worker: str) -> str:
    """The worker's Temporal worker deployment: ``<namespace>/<worker>``."""
    return f"{namespace}/{worker}"


def gate_workflow_id(deployment: str, build_id: str, task_queue: str, stage: int = 0) -> str:
    """The deterministic workflow ID of a gate run (stage 0: before traffic, the official
    controller's ID; stage ``n``: step ``n``)."""
    base = f"test-{deployment}:{build_id}-{task_queue}"
    return base if stage == 0 else f"{base}-step{stage}"


VERSION_FIELDS: Final = (
    "image",
    "image_pull_policy",
    "resources",
    "node_selector",
    "affinity",
    "tolerations",
    "lifecycle",
    "env",
    "termination_grace_period_seconds",
    "task_queue_name",
    "temporal_namespace",
    "pod_template",
)
"""The resolved worker's fields a version's pods are built from (changing it changes build IDs)."""


_FIELDS: Final = set(VERSION_FIELDS) & set(ResolvedWorker.model_fields)


def version_spec(worker: ResolvedWorker) -> dict[str, Any]:
    """What the worker's version runs, as plain data."""
    return worker.model_dump(mode="json", include=_FIELDS)


def with_version_spec(worker: ResolvedWorker, spec: dict[str, Any]) -> ResolvedWorker:
    """The worker as it was at an older version (ValueError if ``spec`` is not a version spec)."""
    unknown = sorted(set(spec) - _FIELDS)
    if unknown:
        raise ValueError(f"unknown version spec fields: {', '.join(unknown)}")
    try:
        return ResolvedWorker.model_validate({**worker.model_dump(), **spec})
    except Exception as exc:
        raise ValueError(f"not a version spec: {exc}") from exc


def _gate(gate: GateWorkflow | None) -> GatePolicy | None:
    if gate is None:
        return None
    source = gate.input_from
    dump = source.model_dump(mode="json", by_alias=True, exclude_none=True) if source else None
    return GatePolicy(workflow_type=gate.workflow_type, input=gate.input, input_from=dump)


def policy_of(worker: ResolvedWorker) -> RolloutPolicy | None:
    """The worker's rollout policy; ``None`` for a worker that rolls in place."""
    rollout = worker.rollout
    if rollout is None:
        return None
    sunset = worker.sunset
    scaling = worker.autoscaling
    draining = scaling.for_status("Draining") if scaling and scaling.by_status else None
    return RolloutPolicy(
        strategy=Strategy(rollout.strategy.value),
        steps=tuple(
            StepPolicy(
                ramp_percentage=step.ramp_percentage,
                pause_seconds=float(parse_duration(step.pause_duration)),
                gate=_gate(step.gate),
            )
            for step in rollout.steps
        ),
        gate=_gate(rollout.gate),
        sunset=(
            SunsetPolicy(
                scaledown_seconds=float(parse_duration(sunset.scaledown_delay)),
                delete_seconds=float(parse_duration(sunset.delete_delay)),
            )
            if sunset is not None
            else SunsetPolicy()
        ),
        build_id=rollout.build_id,
        failure_rate=(
            FailureRatePolicy(
                rule.margin_percent, rule.min_sample, float(parse_duration(rule.window))
            )
            if (rule := rollout.failure_rate)
            else None
        ),
        draining_replicas=draining.widest() if draining and draining is not scaling else None,
    )


def build_id_of(worker: ResolvedWorker) -> str:
    """The build ID of the worker's spec as it is now (given, or derived)."""
    given = worker.rollout.build_id if worker.rollout is not None else None
    return derive_build_id(worker.image, version_spec(worker), given)


def deployment_name_of(worker: ResolvedWorker) -> str:
    """The worker's Temporal worker deployment."""
    return temporal_deployment_name(worker.namespace, worker.name)
