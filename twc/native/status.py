"""TemporalWorker status write-back: what the status should say, and
the smallest merge patch that says it.

Pure: the daemon gathers the live facts (the Deployment's replicas from the API server,
the task queue's pollers from DescribeTaskQueue), and these functions turn them into a
status. ``lastTransitionTime`` of a condition moves only when that condition's status
changes; :func:`status_patch` returns ``None`` when nothing changed, so an unchanged
worker costs no write at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twc.errors import Reason
from twc.status import DEPLOYMENT_READY, FAILED_REASONS, QUEUE_REGISTERED

__all__ = [
    "SPEC_ACCEPTED",
    "DeploymentFacts",
    "PollerFacts",
    "accepted_status",
    "merge_conditions",
    "rejected_status",
    "status_patch",
]

SPEC_ACCEPTED = "SpecAccepted"
"""Condition: whether the object's current spec is the one in the desired state. False
with the reason (``InvalidSpec``, ``ConnectionNotFound``...) when it is not; the message
says whether the last accepted spec keeps running or nothing runs for it."""

# Reasons on a rejected object that need a person to change something.
_REJECTED_FAILED = FAILED_REASONS | {
    Reason.INVALID_SPEC.value,
    Reason.NAMESPACE_NOT_ALLOWED.value,
    Reason.STACK_CONFLICT.value,
}


@dataclass(frozen=True, slots=True)
class DeploymentFacts:
    """A worker Deployment as the API server reports it."""

    replicas: int
    """``spec.replicas``."""
    ready_replicas: int
    """``status.readyReplicas``."""


@dataclass(frozen=True, slots=True)
class PollerFacts:
    """What DescribeTaskQueue said about a worker's task queue."""

    pollers: int | None
    """Pollers seen over the workflow and activity queues; ``None`` if the call failed."""
    reason: str = ""
    """On failure: ``TemporalUnavailable``, ``AuthSecretInvalid``, ``NamespaceNotFound``."""
    message: str = ""
    """On failure: what went wrong."""


def _condition(type_: str, ok: bool, reason: str, message: str) -> dict[str, str]:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
    }


def merge_conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    new: Sequence[Mapping[str, Any]],
    *,
    now: str,
) -> list[dict[str, Any]]:
    """The conditions to write: ``new`` with transition times carried over.

    A condition keeps its previous ``lastTransitionTime`` while its ``status`` is
    unchanged (a new reason or message alone is not a transition); otherwise it is
    ``now``. Conditions of other types (another writer's) are kept as they are.

    Args:
        previous: The object's current conditions.
        new: The owned conditions without ``lastTransitionTime``.
        now: The time to stamp transitions with (RFC 3339).

    Returns:
        The complete list for ``status.conditions``.
    """
    before = {str(c.get("type")): c for c in previous or () if isinstance(c, Mapping)}
    owned = {str(c["type"]) for c in new}
    out: list[dict[str, Any]] = []
    for cond in new:
        old = before.get(str(cond["type"]))
        since = now
        if (
            old is not None
            and old.get("status") == cond["status"]
            and old.get("lastTransitionTime")
        ):
            since = str(old["lastTransitionTime"])
        out.append({**cond, "lastTransitionTime": since})
    out.extend(dict(c) for t, c in before.items() if t not in owned)
    return out


def accepted_status(
    previous: Mapping[str, Any],
    *,
    generation: int | None,
    applied: bool,
    desired_replicas: int,
    deployment: DeploymentFacts | None,
    pollers: PollerFacts | None,
    connection_ref: Mapping[str, Any] | None,
    now: str,
    task_queue: str | None = None,
    kept: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The status of a TemporalWorker that is part of the desired state.

    Args:
        previous: The object's current ``status``.
        generation: The object's ``metadata.generation``.
        applied: Whether the stack holds this generation (its last ``up`` succeeded);
            ``observedGeneration`` and ``observedConnectionRef`` move only then.
        desired_replicas: Replicas the daemon wants.
        deployment: The Deployment, or ``None`` while it does not exist.
        pollers: The task-queue check, or ``None`` when it was not made.
        connection_ref: The resolved connection (apiGroup, kind, name, namespace).
        now: Current time, RFC 3339.
        task_queue: The task queue the worker polls (the printer column).
        kept: ``(reason, message)`` when the current spec is invalid and the last
            accepted one keeps running (then ``generation`` is that spec's).

    Returns:
        The full status (phase, replicas, readyReplicas, observed fields, conditions).
    """
    if deployment is None:
        dep = _condition(
            DEPLOYMENT_READY,
            False,
            "DeploymentNotFound",
            "the worker Deployment does not exist yet",
        )
        replicas, ready = desired_replicas, 0
    else:
        replicas, ready = deployment.replicas, deployment.ready_replicas
        ok = ready >= replicas
        dep = _condition(
            DEPLOYMENT_READY,
            ok,
            "ReplicasReady" if ok else "ReplicasNotReady",
            f"{ready}/{replicas} replicas ready",
        )
    queue = _queue_condition(previous, pollers)
    if dep["status"] == "True" and queue["status"] == "True":
        phase = "Ready"
    elif queue.get("reason") in FAILED_REASONS:
        phase = "Failed"
    else:
        phase = "Pending"
    if kept is None:
        spec = _condition(
            SPEC_ACCEPTED, True, "Accepted", "the current spec is in the desired state"
        )
    else:
        spec = _condition(SPEC_ACCEPTED, False, kept[0], kept[1])
    status: dict[str, Any] = {
        "phase": phase,
        "replicas": replicas,
        "readyReplicas": ready,
        "conditions": merge_conditions(previous.get("conditions"), [dep, queue, spec], now=now),
    }
    if task_queue:
        status["taskQueue"] = task_queue
    if applied:
        if generation is not None:
            status["observedGeneration"] = generation
        if connection_ref is not None:
            status["observedConnectionRef"] = dict(connection_ref)
    return status


def _queue_condition(previous: Mapping[str, Any], pollers: PollerFacts | None) -> dict[str, Any]:
    """The task-queue condition; when not asked this time (pollers are asked on a
    schedule), the last answer stands, so a Ready worker stays Ready across restarts."""
    earlier = next(
        (
            c
            for c in previous.get("conditions") or ()
            if isinstance(c, Mapping)
            and c.get("type") == QUEUE_REGISTERED
            and c.get("reason") in ("PollersRegistered", "WaitingForPollers")
        ),
        None,
    )
    if pollers is None and earlier is not None:
        return {k: earlier[k] for k in ("type", "status", "reason", "message") if k in earlier}
    if pollers is None:
        return {
            "type": QUEUE_REGISTERED,
            "status": "Unknown",
            "reason": "NotChecked",
            "message": "the task queue has not been checked yet",
        }
    if pollers.pollers is None:
        return _condition(QUEUE_REGISTERED, False, pollers.reason, pollers.message)
    if pollers.pollers > 0:
        return _condition(
            QUEUE_REGISTERED, True, "PollersRegistered", f"{pollers.pollers} poller(s)"
        )
    return _condition(QUEUE_REGISTERED, False, "WaitingForPollers", "no poller yet")


def rejected_status(
    previous: Mapping[str, Any],
    *,
    generation: int | None,
    reason: str,
    message: str,
    now: str,
) -> dict[str, Any]:
    """The status of a TemporalWorker left out of the desired state.

    Both conditions turn False with the rejection's reason; the phase is ``Failed`` when
    a person has to change something (``UnknownConnectionKind``, ``InvalidSpec``...),
    else ``Pending`` (``ConnectionNotFound`` may resolve itself when the connection
    appears). Nothing exists for the worker, so replicas are 0.
    """
    conds = [
        _condition(DEPLOYMENT_READY, False, reason, message),
        _condition(QUEUE_REGISTERED, False, reason, message),
        _condition(SPEC_ACCEPTED, False, reason, message),
    ]
    status: dict[str, Any] = {
        "phase": "Failed" if reason in _REJECTED_FAILED else "Pending",
        "replicas": 0,
        "readyReplicas": 0,
        "conditions": merge_conditions(previous.get("conditions"), conds, now=now),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def status_patch(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch that turns ``current`` into ``desired``, or ``None``.

    Only the keys in ``desired`` are compared and written; fields other writers own
    are left alone (a merge patch never takes field ownership).
    """
    changed = {k: v for k, v in desired.items() if current.get(k) != v}
    if not changed:
        return None
    return {"status": changed}
