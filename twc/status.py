"""Worker status: phase, replicas, readyReplicas and two conditions.

One record is a worker's stack output, its TemporalWorker object's status and its row of
``twc status``, computed from the Deployment's live status and the TaskQueueCheck's outputs.
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
    # A field of a dict (camelCase or snake_case) or of an object.
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def worker_status(
    *,
    desired: int,
    deployment_status: Any,
    queue_condition: dict[str, Any] | None,
    pollers: int | None,
    backlog: int | None,
    task_queue: str,
    autoscaled: bool = False,
) -> dict[str, Any]:
    """A worker's status: Ready when both conditions are True, Failed when the queue
    check names a reason that needs a change, else Pending."""
    ready = int(_get(deployment_status, "readyReplicas", "ready_replicas") or 0)
    # The Deployment's own Available condition says since when it has been so.
    available = [
        _get(c, "lastTransitionTime", "last_transition_time")
        for c in _get(deployment_status, "conditions") or []
        if _get(c, "type") == "Available"
    ]
    since = next((t for t in available if t), None)
    dep = {
        "type": DEPLOYMENT_READY,
        "status": "True" if ready >= desired else "False",
        "reason": "ReplicasReady" if ready >= desired else "ReplicasNotReady",
        "message": f"{ready}/{desired} replicas ready",
        "lastTransitionTime": (
            since
            if isinstance(since, str)
            else rfc3339(since.timestamp() if since else time.time())
        ),
    }
    queue = dict(queue_condition or {"type": QUEUE_REGISTERED, "status": "Unknown"})
    if dep["status"] == "True" and queue.get("status") == "True":
        phase = "Ready"
    else:
        phase = "Failed" if queue.get("reason") in FAILED_REASONS else "Pending"
    return {
        "phase": phase,
        "replicas": desired,
        "replicasManagedBy": "autoscaling" if autoscaled else "spec",
        "readyReplicas": ready,
        "taskQueue": task_queue,
        "pollers": int(pollers or 0),
        "approximateBacklog": int(backlog or 0),
        "conditions": [dep, queue],
    }
