"""A worker's versions as a status record shaped like the official controller's
(``targetVersion``, ``currentVersion``, ``rampingVersion``, ``deprecatedVersions``, the
rollout's phase): in the stack outputs, a TemporalWorker's status and ``twc status``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twc.rollout._model import GateRun, Routing, VersionDeployment, VersionStatus
from twc.rollout._planner import RolloutPlan, gate_runs
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
    if routing is not None and routing.ramping == target:
        target_out["rampPercentage"] = routing.ramp_percentage
        if routing.ramp_changed_at:
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
    if ramping and ramping != target and routing is not None:
        out["rampingVersion"] = {
            **_version(ramping, routing, deployments),
            "rampPercentage": routing.ramp_percentage,
        }
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
