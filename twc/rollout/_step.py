"""One versioned worker's rollout step around the planner: the worker as observed in one
iteration (what the planner needs) and its plan; the versions the program declares of the plan
(per build ID, the replicas and the version spec to rebuild it from); and the status record
shaped like the official controller's (``targetVersion``, ``currentVersion``,
``rampingVersion``, ``deprecatedVersions``, the rollout's phase), in the stack outputs, a
TemporalWorker's status and ``twc status``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from twc.rollout._model import (
    GateRun,
    RolloutPolicy,
    RolloutSettings,
    Routing,
    VersionDeployment,
    VersionStatus,
)
from twc.rollout._planner import RolloutPlan, gate_runs, hold_versions, plan_rollout
from twc.timestamps import rfc3339


def _version(
    build: str,
    routing: Routing | None,
    deployments: Mapping[str, VersionDeployment],
) -> dict[str, Any]:
    status = routing.status(build) if routing is not None else VersionStatus.NOT_REGISTERED
    out: dict[str, Any] = {"buildID": build, "status": status.value}
    dep = deployments.get(build)
    if dep is not None:
        out["deployment"] = dep.name
        out["replicas"] = dep.replicas
        out["readyReplicas"] = dep.ready
    found = routing.versions.get(build) if routing is not None else None
    if found is not None and found.status is VersionStatus.DRAINED and found.drained_since:
        out["drainedSince"] = rfc3339(found.drained_since)
    if routing is not None and routing.ramping == build:
        out["rampPercentage"] = routing.ramp_percentage
    return out


def rollout_status(
    *,
    target: str,
    deployment_name: str,
    routing: Routing | None,
    deployments: Mapping[str, VersionDeployment],
    plan: RolloutPlan | None = None,
    gates: Mapping[str, GateRun] | None = None,
    task_queues: Sequence[str] = (),
) -> dict[str, Any]:
    """The versions of one worker, as the official controller reports them (camelCase)."""
    target_out = _version(target, routing, deployments)
    if routing is not None and routing.ramping == target and routing.ramp_changed_at:
        target_out["rampLastModifiedAt"] = rfc3339(routing.ramp_changed_at)
    if runs := gate_runs(gates or {}, deployment_name, target, task_queues):
        target_out["testWorkflows"] = [
            {"workflowID": r.workflow_id, "taskQueue": r.task_queue, "status": r.status.value}
            for r in runs
        ]
    out: dict[str, Any] = {"deploymentName": deployment_name, "targetVersion": target_out}
    current = routing.current if routing is not None else None
    if current:
        out["currentVersion"] = _version(current, routing, deployments)
    ramping = routing.ramping if routing is not None else None
    if ramping and ramping != target:
        out["rampingVersion"] = _version(ramping, routing, deployments)
    deprecated = [
        _version(build, routing, deployments)
        for build in sorted(deployments)
        if build not in (target, current, ramping)
    ]
    if deprecated:
        out["deprecatedVersions"] = deprecated
    if plan is not None:
        out["rollout"] = {"phase": plan.phase.value, "reason": plan.reason, "message": plan.message}
    if routing is not None:
        out["versionCount"] = len(routing.versions)
    return out


def version_rows(status: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(role, build ID, status)`` of each version of a :func:`rollout_status`, target first."""
    rows: list[tuple[str, str, str]] = []
    versions = [
        ("target", status.get("targetVersion")),
        ("current", status.get("currentVersion")),
        ("ramping", status.get("rampingVersion")),
        *(("deprecated", v) for v in status.get("deprecatedVersions") or ()),
    ]
    for role, version in versions:
        if not isinstance(version, Mapping) or not version.get("buildID"):
            continue
        build = str(version["buildID"])
        if build in {b for _, b, _ in rows}:
            continue
        text = str(version.get("status", ""))
        if version.get("rampPercentage") is not None:
            text += f" {version['rampPercentage']:g} %"
        if version.get("deployment"):
            text += f", {version.get('readyReplicas', 0)}/{version.get('replicas', 0)} ready"
        else:
            text += ", no Deployment"
        rows.append((role, build, text))
    return rows


@dataclass(frozen=True, slots=True)
class RolloutObservation:
    """A versioned worker's rollout as observed now."""

    worker: str
    target: str
    policy: RolloutPolicy
    deployment_name: str
    task_queue: str
    deployments: Mapping[str, VersionDeployment] = field(
        default_factory=lambda: MappingProxyType({})
    )
    routing: Routing | None = None
    """``None``: no version registered yet (or not asked)."""
    error: str | None = None
    """Why Temporal could not be asked; then every version is held as it runs."""
    task_queues: tuple[str, ...] = ()
    """The target version's workflow task queues, as Temporal reports them."""
    gates: Mapping[str, GateRun] = field(default_factory=lambda: MappingProxyType({}))
    backlogs: Mapping[str, int | None] = field(default_factory=lambda: MappingProxyType({}))
    failures: Mapping[str, Mapping[str, tuple[int, int]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """While the target ramps under a failure-rate rule: per version (the target, the
    Current), per workflow type, ``(closed, failed)`` within the rule's window."""
    rolled_back: str | None = None
    """Why twc rolled the target back, as recorded on the version in Temporal."""

    @property
    def gate_queues(self) -> tuple[str, ...]:
        """The target's registered workflow task queues, else the worker's own."""
        return self.task_queues or (self.task_queue,)


def plan_observed(
    seen: RolloutObservation, *, now: float, settings: RolloutSettings | None = None
) -> RolloutPlan:
    """Plan one worker's next step (hold everything when Temporal could not be asked)."""
    if seen.error is not None:
        return hold_versions(
            seen.target,
            seen.deployments,
            "TemporalUnavailable",
            f"routing unknown, every version held as it runs: {seen.error}",
        )
    return plan_rollout(
        seen.policy,
        target=seen.target,
        routing=seen.routing,
        deployments=seen.deployments,
        gates=seen.gates,
        task_queues=seen.gate_queues,
        deployment_name=seen.deployment_name,
        now=now,
        settings=settings,
        failures=seen.failures,
        rolled_back=seen.rolled_back,
    )


def observed_status(seen: RolloutObservation, plan: RolloutPlan) -> dict[str, Any]:
    """The official status record of one worker's rollout, from what was observed and planned."""
    return rollout_status(
        target=seen.target,
        deployment_name=seen.deployment_name,
        routing=seen.routing,
        deployments=seen.deployments,
        plan=plan,
        gates=seen.gates,
        task_queues=seen.gate_queues,
    )


class VersionInput(BaseModel):
    """One version the program declares a Deployment for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int | None = None
    """``None``: the worker's own count; a number: exactly that."""
    spec: dict[str, JsonValue] | None = None
    """The version spec it is rebuilt from; ``None`` for the target (the spec as it is)."""


class WorkerVersions(BaseModel):
    """One versioned worker's part of the inputs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    versions: dict[str, VersionInput] = Field(default_factory=dict)
    """Per build ID, the versions declared (the target always, listed or not)."""
    status: dict[str, JsonValue] | None = None
    """:func:`~twc.rollout.rollout_status` as observed; ``None`` when Temporal was not asked."""


def version_inputs(
    plan: RolloutPlan,
    specs: Mapping[str, Mapping[str, Any] | None],
    replicas: Mapping[str, int] | None = None,
) -> dict[str, VersionInput]:
    """Per build ID, what the program declares of the plan's versions (``replicas``: the
    autoscaler's, where the plan leaves the count to the worker)."""
    out: dict[str, VersionInput] = {}
    for build, version in plan.versions.items():
        count = version.replicas
        if count is None and replicas is not None:
            count = replicas.get(build)
        spec = None if build == plan.target else specs.get(build)
        out[build] = VersionInput(replicas=count, spec=dict(spec) if spec is not None else None)
    return out
