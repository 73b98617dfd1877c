"""A worker's versions as a status record, shaped like the official controller's.

The same record is part of the stack outputs, of a TemporalWorker's status and of
``twc status``: ``targetVersion``, ``currentVersion``, ``rampingVersion`` (when a version
other than the target ramps), ``deprecatedVersions`` (every other version that still has
a Deployment) and the rollout's ``phase``/``reason``/``message``. Pure: built from what
was observed (and planned), with the official status names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twc.rollout._model import GateRun, Routing, VersionDeployment, VersionStatus
from twc.rollout._names import gate_workflow_id
from twc.rollout._planner import MAX_STAGES, RolloutPlan
from twc.timestamps import rfc3339

__all__ = ["rollout_status", "version_rows"]


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
    """The versions of one worker, as the official controller reports them.

    Args:
        target: The build ID the spec asks for.
        deployment_name: The Temporal worker deployment.
        routing: What Temporal reports (``None``: no version registered yet).
        deployments: The versions' Deployments, by build ID.
        plan: The planner's verdict, for the rollout's phase and reason.
        gates: Gate runs found, by workflow ID.
        task_queues: The target's workflow task queues (whose gate runs to show).

    Returns:
        Plain data with camelCase keys.
    """
    target_out = _version(target, routing, deployments)
    if routing is not None and routing.ramping == target:
        target_out["rampPercentage"] = routing.ramp_percentage
        if routing.ramp_changed_at:
            target_out["rampLastModifiedAt"] = rfc3339(routing.ramp_changed_at)
    runs = [
        run
        for stage in range(MAX_STAGES + 1)
        for tq in task_queues
        if (run := (gates or {}).get(gate_workflow_id(deployment_name, target, tq, stage)))
    ]
    if runs:
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
    """``(role, build ID, status)`` of each version in a :func:`rollout_status` record,
    target first: what ``twc status`` prints under the worker."""
    rows: list[tuple[str, str, str]] = []
    seen: set[str] = set()

    def add(role: str, version: Any) -> None:
        if not isinstance(version, Mapping) or not version.get("buildID"):
            return
        build = str(version["buildID"])
        text = str(version.get("status", ""))
        if version.get("rampPercentage") is not None:
            text += f" {version['rampPercentage']:g} %"
        if version.get("deployment"):
            text += f", {version.get('readyReplicas', 0)}/{version.get('replicas', 0)} ready"
        else:
            text += ", no Deployment"
        if build in seen:
            return
        seen.add(build)
        rows.append((role, build, text))

    add("target", status.get("targetVersion"))
    add("current", status.get("currentVersion"))
    add("ramping", status.get("rampingVersion"))
    for version in status.get("deprecatedVersions") or ():
        add("deprecated", version)
    return rows
