"""``TaskQueueCheck``: asks Temporal whether a worker's task queue really has pollers.

Records pollers, backlog and the condition ``TemporalTaskQueueRegistered``; a failing
Temporal turns the condition False, never fails the ``up``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pulumi import Input, Output, ResourceOptions, dynamic

from twc.native.status import condition as native_condition
from twc.native.status import merge_conditions
from twc.status import QUEUE_REGISTERED
from twc.timestamps import rfc3339

# The provider serves calls on several gRPC threads; two first imports of temporalio's
# generated modules at once can deadlock on its circular imports.
_IMPORT_LOCK = threading.Lock()
# Inputs whose change means "check again" (a check never needs replacing).
_INPUT_KEYS = (
    *("address", "namespace", "taskQueue", "tls", "serverName", "authMode", "secretRef"),
    *("trigger", "apiKeyKey"),
)


def condition(
    status: bool, reason: str, message: str, previous: dict[str, Any] | None
) -> dict[str, Any]:
    """A Kubernetes-style condition whose lastTransitionTime moves only on a status change."""
    new = native_condition(QUEUE_REGISTERED, status, reason, message)
    return merge_conditions([previous] if previous else None, [new], now=rfc3339(time.time()))[0]


def read_secret_data(namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's decoded data, through twc's client factory (the engine's env); raises
    ``LookupError`` when it does not exist."""
    from twc.kube.client import kube_client
    from twc.kube.workloads import read_secret_data as read

    with kube_client() as kube:
        return read(kube, namespace, name)


async def _describe(props: dict[str, Any]) -> tuple[int, int]:
    """(pollers, approximate backlog) over the workflow and activity task queues."""
    from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    from twc.connections import connect_check

    ref = props.get("secretRef")
    creds = read_secret_data(ref["namespace"], ref["name"]) if ref else {}
    client = await connect_check(props, creds)
    pollers = backlog = 0
    queue = TaskQueue(name=props["taskQueue"], kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL)
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        request = DescribeTaskQueueRequest(
            namespace=props["namespace"], task_queue=queue, task_queue_type=kind, report_stats=True
        )
        resp = await client.workflow_service.describe_task_queue(
            request, timeout=timedelta(seconds=10)
        )
        pollers += len(resp.pollers)
        if resp.HasField("stats"):
            backlog += int(resp.stats.approximate_backlog_count)
    return pollers, backlog


def check_task_queue(
    props: dict[str, Any], previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The check's outputs, waiting for a poller; Temporal faults become the condition."""
    from twc.connections import poller_failure

    with _IMPORT_LOCK:
        import temporalio.api.workflowservice.v1
        import temporalio.service  # noqa: F401

    deadline = time.monotonic() + float(props.get("waitForPollersSeconds") or 0)
    queue = props["taskQueue"]
    while True:
        try:
            pollers, backlog = asyncio.run(_describe(props))
        except Exception as exc:  # noqa: BLE001 - every Temporal failure becomes a condition reason
            pollers, backlog, cond = 0, 0, condition(False, *poller_failure(exc), previous)
        else:
            if pollers > 0:
                message = f"{pollers} poller(s) on task queue {queue!r}"
                cond = condition(True, "PollersRegistered", message, previous)
            elif time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            else:
                message = f"no poller on task queue {queue!r} yet"
                cond = condition(False, "WaitingForPollers", message, previous)
        return {
            "pollers": pollers,
            "approximateBacklog": backlog,
            "condition": cond,
            "checkedAt": rfc3339(time.time()),
        }


def _outs(props: dict[str, Any], previous: dict[str, Any] | None = None) -> dict[str, Any]:
    # The non-secret inputs (so refresh can re-check), never credentials, and the check.
    public = {k: props[k] for k in (*_INPUT_KEYS, "waitForPollersSeconds") if k in props}
    return {**public, **check_task_queue(props, previous)}


class TaskQueueCheckProvider(dynamic.ResourceProvider):
    """Dynamic provider behind :class:`TaskQueueCheck`."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        failures = []
        address = str(news.get("address") or "")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            failures.append(dynamic.CheckFailure("address", f"must be host:port, got {address!r}"))
        for key in ("namespace", "taskQueue"):
            if not news.get(key):
                failures.append(dynamic.CheckFailure(key, "must not be empty"))
        wait = news.get("waitForPollersSeconds") or 0
        if not isinstance(wait, int | float) or wait < 0 or wait > 600:
            failures.append(
                dynamic.CheckFailure("waitForPollersSeconds", "must be between 0 and 600")
            )
        return dynamic.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(
            id_=f"{props['namespace']}/{props['taskQueue']}", outs=_outs(props)
        )

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = any(olds.get(k) != news.get(k) for k in _INPUT_KEYS)
        return dynamic.DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(outs=_outs(news, olds.get("condition")))

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        # Refresh: check the live queue again (credentials are read from the cluster).
        return dynamic.ReadResult(id_=id_, outs=_outs(props, props.get("condition")), inputs=None)


class TaskQueueCheck(dynamic.Resource, module="twc", name="TaskQueueCheck"):
    """Checks a task queue for pollers after its worker Deployment is applied."""

    pollers: Output[int]
    approximateBacklog: Output[int]
    condition: Output[dict[str, Any]]

    def __init__(
        self, name: str, inputs: Mapping[str, Input[Any]], opts: ResourceOptions | None = None
    ) -> None:
        outputs = dict.fromkeys(("pollers", "approximateBacklog", "condition", "checkedAt"))
        super().__init__(TaskQueueCheckProvider(), name, {**inputs, **outputs}, opts)
