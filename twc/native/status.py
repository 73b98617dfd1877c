"""TemporalWorker status from the live facts the daemon gathers, and the smallest merge
patch that writes it; a condition's ``lastTransitionTime`` moves only with its status.
:func:`worker_failure`: what a failed engine run may tell one worker's tenants, the first
error line about its own resources, else a fixed sentence that names nothing. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from twc.errors import Reason
from twc.status import DEPLOYMENT_READY, FAILED_REASONS, QUEUE_REGISTERED

SPEC_ACCEPTED = "SpecAccepted"
"""Condition: whether the object's current spec is in the desired state."""
# Reasons on a rejected object that need a person to change something.
_REJECTED_FAILED = FAILED_REASONS | {
    r.value for r in (Reason.INVALID_SPEC, Reason.NAMESPACE_NOT_ALLOWED, Reason.STACK_CONFLICT)
}


class PollerFacts(NamedTuple):
    """The pollers DescribeTaskQueue saw, or ``None`` with the failure's reason and message."""

    pollers: int | None
    reason: str = ""
    message: str = ""


def condition(type_: str, ok: bool, reason: str, message: str) -> dict[str, str]:
    """A condition of ``type_``, ``True`` when ``ok`` (no ``lastTransitionTime`` yet)."""
    status = "True" if ok else "False"
    return {"type": type_, "status": status, "reason": reason, "message": message}


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None, new: Sequence[Mapping[str, Any]], *, now: str
) -> list[dict[str, Any]]:
    """``new``, keeping ``lastTransitionTime`` while a status is unchanged, and other types."""
    before = {str(c.get("type")): c for c in previous or () if isinstance(c, Mapping)}
    out: list[dict[str, Any]] = []
    for cond in new:
        old = before.pop(str(cond["type"]), {})
        kept = old.get("status") == cond["status"] and old.get("lastTransitionTime")
        out.append({**cond, "lastTransitionTime": str(kept) if kept else now})
    return out + [dict(c) for c in before.values()]


def accepted_status(
    previous: Mapping[str, Any],
    *,
    generation: int | None,
    applied: bool,
    desired_replicas: int,
    deployment: tuple[int, int] | None,
    pollers: PollerFacts | None,
    connection_ref: Mapping[str, Any] | None,
    now: str,
    task_queue: str | None = None,
    kept: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """A desired worker's status; ``deployment``: its Deployment's ``(replicas,
    readyReplicas)``, ``kept``: ``(reason, message)`` of an invalid newer spec."""
    if deployment is None:
        message = "the worker Deployment does not exist yet"
        dep = condition(DEPLOYMENT_READY, False, "DeploymentNotFound", message)
        replicas, ready = desired_replicas, 0
    else:
        replicas, ready = deployment
        reason = "ReplicasReady" if ready >= replicas else "ReplicasNotReady"
        message = f"{ready}/{replicas} replicas ready"
        dep = condition(DEPLOYMENT_READY, ready >= replicas, reason, message)
    queue = _queue_condition(previous, pollers)
    phase = "Failed" if queue.get("reason") in FAILED_REASONS else "Pending"
    if dep["status"] == queue["status"] == "True":
        phase = "Ready"
    accepted = ("Accepted", "the current spec is in the desired state")
    spec = condition(SPEC_ACCEPTED, kept is None, *(kept or accepted))
    status: dict[str, Any] = {
        "phase": phase,
        "replicas": replicas,
        "readyReplicas": ready,
        "conditions": merge_conditions(previous.get("conditions"), [dep, queue, spec], now=now),
    }
    if task_queue:
        status["taskQueue"] = task_queue
    if applied and generation is not None:
        status["observedGeneration"] = generation
    if applied and connection_ref is not None:
        status["observedConnectionRef"] = dict(connection_ref)
    return status


def _queue_condition(previous: Mapping[str, Any], pollers: PollerFacts | None) -> dict[str, Any]:
    """The task-queue condition; when not asked this time, the last answer stands."""
    if pollers is None:
        for c in previous.get("conditions") or ():
            if (
                isinstance(c, Mapping)
                and c.get("type") == QUEUE_REGISTERED
                and c.get("reason") in ("PollersRegistered", "WaitingForPollers")
            ):
                return {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        message = "the task queue has not been checked yet"
        return {**condition(QUEUE_REGISTERED, False, "NotChecked", message), "status": "Unknown"}
    if pollers.pollers is None:
        return condition(QUEUE_REGISTERED, False, pollers.reason, pollers.message)
    if pollers.pollers > 0:
        message = f"{pollers.pollers} poller(s)"
        return condition(QUEUE_REGISTERED, True, "PollersRegistered", message)
    return condition(QUEUE_REGISTERED, False, "WaitingForPollers", "no poller yet")


def rejected_status(
    previous: Mapping[str, Any], *, generation: int | None, reason: str, message: str, now: str
) -> dict[str, Any]:
    """A rejected worker's status: every condition False, ``Failed`` when a person must act."""
    types = (DEPLOYMENT_READY, QUEUE_REGISTERED, SPEC_ACCEPTED)
    conds = [condition(t, False, reason, message) for t in types]
    status: dict[str, Any] = {
        "phase": "Failed" if reason in _REJECTED_FAILED else "Pending",
        "replicas": 0,
        "readyReplicas": 0,
        "conditions": merge_conditions(previous.get("conditions"), conds, now=now),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


_OFFICIAL_VERSION_KEYS = (
    *("buildID", "status", "healthySince", "rampPercentage", "rampLastModifiedAt"),
    *("testWorkflows", "drainedSince"),
)


def official_status(
    status: Mapping[str, Any], previous: Mapping[str, Any], *, namespace: str, now: str
) -> dict[str, Any]:
    """A worker's status (:func:`accepted_status` or :func:`rejected_status` with its rollout
    fields) in the official ``WorkerDeployment`` shape: its versions with a Deployment as an
    object reference, ``versionCount``, and ``Ready``/``Progressing`` from the rollout and
    the worker's Deployment and spec conditions; absent keys null (dropped by the patch)."""

    def version(found: Any) -> dict[str, Any] | None:
        if not isinstance(found, Mapping):
            return None
        out = {k: found[k] for k in _OFFICIAL_VERSION_KEYS if k in found}
        if found.get("deployment"):
            ref = {"name": found["deployment"], "namespace": namespace}
            out["deployment"] = {"apiVersion": "apps/v1", "kind": "Deployment", **ref}
        return out

    rollout = status.get("rollout") or {}
    problem: Mapping[str, Any] = next(
        (
            c
            for c in status.get("conditions") or ()
            if c.get("type") in (DEPLOYMENT_READY, SPEC_ACCEPTED) and c.get("status") != "True"
        ),
        {},
    )
    ready = rollout.get("phase") == "Complete" and not problem
    why = problem or rollout
    reason = "RolloutComplete" if ready else str(why.get("reason") or "WaitingForPollers")
    message = str(why.get("message") or "")
    progressing = rollout.get("phase") == "Progressing"
    extra = {k: status[k] for k in ("observedGeneration",) if k in status}
    conditions = [
        {**condition("Ready", ready, reason, message), **extra},
        {**condition("Progressing", progressing, reason, message), **extra},
    ]
    ramping = version(status.get("rampingVersion"))
    return {
        "targetVersion": version(status.get("targetVersion")),
        "currentVersion": version(status.get("currentVersion")),
        "deprecatedVersions": [
            v for v in [ramping, *map(version, status.get("deprecatedVersions") or ())] if v
        ]
        or None,
        "versionCount": status.get("versionCount"),
        "conditions": merge_conditions(previous.get("conditions"), conditions, now=now),
    }


def template_status(
    previous: Mapping[str, Any],
    *,
    names: Mapping[str, str] | None,
    generation: int | None,
    applied: bool,
    now: str,
) -> dict[str, Any]:
    """A ``WorkerResourceTemplate``'s status in the official shape: per build ID of its
    worker's versions (``names``: build ID to copy's name; ``None``: no such worker) the
    copy and the generation last applied, and ``Ready`` once the stack holds them all."""
    if names is None:
        ready = condition("Ready", False, "WorkerDeploymentNotFound", "no such WorkerDeployment")
        return {"conditions": merge_conditions(previous.get("conditions"), [ready], now=now)}
    before = {v.get("buildID"): v for v in previous.get("versions") or () if isinstance(v, dict)}
    versions = []
    for build, name in sorted(names.items()):
        old = before.get(build) or {"lastTransitionTime": now}
        done = generation if applied else old.get("lastAppliedGeneration")
        entry = {"buildID": build, "resourceName": name, "lastAppliedGeneration": done}
        changed = any(old.get(k) != v for k, v in entry.items())
        versions.append(
            {**entry, "lastTransitionTime": now if changed else old["lastTransitionTime"]}
        )
    reason = "AllVersionsApplied" if applied else "Applying"
    ready = condition("Ready", applied, reason, f"{len(versions)} version(s)")
    return {
        "versions": versions,
        "conditions": merge_conditions(previous.get("conditions"), [ready], now=now),
    }


def status_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch of the keys of ``desired`` that differ from ``current``, or None."""
    changed = {k: v for k, v in desired.items() if current.get(k) != v}
    return {"status": changed} if changed else None


ELSEWHERE = (
    "the stack's update failed on resources other than this worker's; nothing of this "
    "worker changed, the update is retried"
)
REFUSED = (
    "the program refused the stack's desired state (the fleet or another object is "
    "invalid); nothing was changed"
)

_HEADER = re.compile(r"^ {2}(?P<type>\S+) \((?P<name>[^)]+)\):\s*$")
_URN = re.compile(r"urn:pulumi:[^\s\"']*::(?P<name>[^\s\"']+)")
_LIMIT = 400


def worker_failure(text: str, worker: str, *, refused: bool = False) -> str:
    """One line for ``worker``'s (``<namespace>/<name>``) Event from a failed run's ``text``."""
    if refused:
        return REFUSED
    ours = False
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header is not None:
            name = header["name"]
            ours = name == worker or name.startswith(f"{worker}-")
            continue
        if not ours:
            continue
        stripped = line.strip()
        if not stripped:
            ours = False
            continue
        if "error:" in stripped:
            found = stripped.split("error:", 1)[1].strip()
            found = _URN.sub(lambda m: m["name"], found)
            return f"the update failed on this worker's resources: {found[:_LIMIT]}"
    return ELSEWHERE
