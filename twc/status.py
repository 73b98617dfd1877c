"""Worker status: phase, replicas, readyReplicas and two conditions.

The same record is a stack output per worker, a TemporalWorker object's status and a row
of ``twc status``. Pure: computed from the Deployment's live status and the
TaskQueueCheck's outputs.
"""

from __future__ import annotations

import time
from typing import Any

from twc.timestamps import rfc3339

DEPLOYMENT_READY = "WorkerDeploymentReady"
QUEUE_REGISTERED = "TemporalTaskQueueRegistered"
# Reasons that need a person to change something; the rest settle by themselves.
FAILED_REASONS = frozenset({"AuthSecretInvalid", "NamespaceNotFound", "UnknownConnectionKind"})


def _get(obj: Any, *names: str) -> Any:
    """Read a field from a dict (camelCase or snake_case) or an object."""
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def deployment_condition(
    desired: int, deployment_status: Any, now: str | None = None
) -> dict[str, str]:
    """``WorkerDeploymentReady``: True once every desired replica is ready."""
    ready = int(_get(deployment_status, "readyReplicas", "ready_replicas") or 0)
    ok = ready >= desired
    # The Deployment's own Available condition says since when it has been so.
    for cond in _get(deployment_status, "conditions") or []:
        if _get(cond, "type") == "Available" and not now:
            now = _get(cond, "lastTransitionTime", "last_transition_time")
            now = now if isinstance(now, str) or now is None else rfc3339(now.timestamp())
    return {
        "type": DEPLOYMENT_READY,
        "status": "True" if ok else "False",
        "reason": "ReplicasReady" if ok else "ReplicasNotReady",
        "message": f"{ready}/{desired} replicas ready",
        "lastTransitionTime": now or rfc3339(time.time()),
    }


def worker_status(
    *,
    desired: int,
    deployment_status: Any,
    queue_condition: dict[str, Any] | None,
    pollers: int | None,
    backlog: int | None,
    task_queue: str,
    now: str | None = None,
    autoscaled: bool = False,
) -> dict[str, Any]:
    """The status record exported per worker.

    ``autoscaled`` says the replicas are the daemon's (the Deployment's scale
    subresource), not the fleet file's: ``replicasManagedBy`` is then ``autoscaling``.

    Phase: Ready when both conditions are True; Failed when the queue check names a
    reason that needs a change (bad credentials, missing namespace); else Pending.
    """
    dep = deployment_condition(desired, deployment_status, now)
    queue = dict(queue_condition or {"type": QUEUE_REGISTERED, "status": "Unknown"})
    if dep["status"] == "True" and queue.get("status") == "True":
        phase = "Ready"
    elif queue.get("reason") in FAILED_REASONS:
        phase = "Failed"
    else:
        phase = "Pending"
    return {
        "phase": phase,
        "replicas": desired,
        "replicasManagedBy": "autoscaling" if autoscaled else "spec",
        "readyReplicas": int(_get(deployment_status, "readyReplicas", "ready_replicas") or 0),
        "taskQueue": task_queue,
        "pollers": int(pollers or 0),
        "approximateBacklog": int(backlog or 0),
        "conditions": [dep, queue],
    }
