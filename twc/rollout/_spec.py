"""From a resolved worker to its rollout policy, build ID and *version spec* (what its pods
run, hashed into the build ID and recorded on the Deployment so an older version is rebuilt
exactly while it drains). The connection is not part of it: it reaches every live version."""

from __future__ import annotations

import json
from typing import Any, Final

from twc.rollout._model import GatePolicy, RolloutPolicy, StepPolicy, Strategy, SunsetPolicy
from twc.rollout._names import derive_build_id, temporal_deployment_name
from twc.spec import GateWorkflow, ResolvedWorker, parse_duration

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


def _fields() -> set[str]:
    return set(VERSION_FIELDS) & set(ResolvedWorker.model_fields)


def version_spec(worker: ResolvedWorker) -> dict[str, Any]:
    """What the worker's version runs, as plain data."""
    return worker.model_dump(mode="json", include=_fields())


def version_spec_json(worker: ResolvedWorker) -> str:
    """:func:`version_spec` as compact, canonical JSON (the Deployment's annotation)."""
    return json.dumps(version_spec(worker), sort_keys=True, separators=(",", ":"))


def with_version_spec(worker: ResolvedWorker, spec: dict[str, Any]) -> ResolvedWorker:
    """The worker as it was at an older version (ValueError if ``spec`` is not a version spec)."""
    unknown = sorted(set(spec) - _fields())
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
    )


def build_id_of(worker: ResolvedWorker) -> str:
    """The build ID of the worker's spec as it is now (given, or derived)."""
    given = worker.rollout.build_id if worker.rollout is not None else None
    return derive_build_id(worker.image, version_spec(worker), given)


def deployment_name_of(worker: ResolvedWorker) -> str:
    """The worker's Temporal worker deployment."""
    return temporal_deployment_name(worker.namespace, worker.name)
