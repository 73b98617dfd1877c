"""``TaskQueueCheck``: asks Temporal whether a worker's task queue really has pollers.

A dynamic resource that depends on the worker's Deployment. ``create``/``update`` call
DescribeTaskQueue (workflow and activity task queues, with stats) and record the poller
count, the approximate backlog and the condition ``TemporalTaskQueueRegistered``;
``read`` (what ``pulumi refresh`` calls) checks again, so drift shows after a refresh.

A failing Temporal never fails the ``up``: the condition turns False with a reason
(``WaitingForPollers``, ``TemporalUnavailable``, ``AuthSecretInvalid``,
``NamespaceNotFound``). Credentials never pass through Pulumi: the resource names the
Kubernetes Secret that holds them (``secretRef``), and the provider reads it from the
cluster (``KUBECONFIG`` or in-cluster config) at check time, so ``refresh`` can re-check
an mTLS or API-key queue too. Clients are built inside each call: the provider object
is pickled into the state and must not capture a client.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime
from typing import Any

from pulumi import Input, Output, ResourceOptions
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

CONDITION_TYPE = "TemporalTaskQueueRegistered"
# Inputs whose change means "check again", nothing more: a check never needs replacing.
# The provider process serves Create/Read calls on several gRPC threads at once; two of
# them importing temporalio's generated modules for the first time concurrently can
# deadlock on its circular imports. The first import happens under this lock.
_IMPORT_LOCK = threading.Lock()


def _import_temporalio() -> None:
    with _IMPORT_LOCK:
        import temporalio.api.workflowservice.v1
        import temporalio.service  # noqa: F401


_INPUT_KEYS = (
    "address",
    "namespace",
    "taskQueue",
    "tls",
    "serverName",
    "authMode",
    "secretRef",
    "trigger",
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    status: bool, reason: str, message: str, previous: dict[str, Any] | None
) -> dict[str, Any]:
    """A Kubernetes-style condition whose lastTransitionTime moves only on a status change."""
    status_s = "True" if status else "False"
    since = _now()
    if previous and previous.get("status") == status_s and previous.get("lastTransitionTime"):
        since = previous["lastTransitionTime"]
    return {
        "type": CONDITION_TYPE,
        "status": status_s,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


async def _describe(props: dict[str, Any]) -> tuple[int, int]:
    """(pollers, approximate backlog) over the workflow and activity task queues.

    ``trigger`` (in the inputs) carries the worker's pod-template hash including the
    connection fingerprint, so a rolled worker or a rotated secret is checked again.
    """
    from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    from twc.connections import ConnectOptions, connect
    from twc.spec import AuthMode

    creds = _read_secret(props.get("secretRef"))
    options = ConnectOptions(
        target_host=props["address"],
        namespace=props["namespace"],
        tls=bool(props.get("tls")),
        server_name=props.get("serverName") or None,
        server_root_ca_cert=_b(creds.get("ca.crt")),
        client_cert=_b(creds.get("tls.crt")),
        client_private_key=_b(creds.get("tls.key")),
        api_key=(_b(creds.get(props.get("apiKeyKey") or "")) or b"").decode().strip() or None,
    )
    client = await connect(options, AuthMode(props.get("authMode") or "none"), timeout=5.0)
    pollers = 0
    backlog = 0
    for tq_type in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        resp = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=props["namespace"],
                task_queue=TaskQueue(
                    name=props["taskQueue"], kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL
                ),
                task_queue_type=tq_type,
                report_stats=True,
            ),
            timeout=__import__("datetime").timedelta(seconds=10),
        )
        pollers += len(resp.pollers)
        if resp.HasField("stats"):
            backlog += int(resp.stats.approximate_backlog_count)
    return pollers, backlog


def _read_secret(ref: dict[str, Any] | None) -> dict[str, bytes]:
    """The credential secret's decoded data, read from the cluster (empty without a ref)."""
    if not ref:
        return {}
    from providers._kube import read_secret_data

    return read_secret_data(ref["namespace"], ref["name"])


def _b(value: Any) -> bytes | None:
    if not value:
        return None
    return value.encode() if isinstance(value, str) else bytes(value)


def check_task_queue(
    props: dict[str, Any], previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Describe the task queue and return the outputs (never raises for Temporal faults).

    Waits up to ``waitForPollersSeconds`` for a poller to appear.
    """
    from twc.connections import poller_failure

    _import_temporalio()
    deadline = time.monotonic() + float(props.get("waitForPollersSeconds") or 0)
    while True:
        try:
            pollers, backlog = asyncio.run(_describe(props))
        except Exception as exc:  # noqa: BLE001 - every Temporal failure becomes a condition reason
            reason, message = poller_failure(exc)
            return _outputs(0, 0, condition(False, reason, message, previous))
        if pollers > 0:
            message = f"{pollers} poller(s) on task queue {props['taskQueue']!r}"
            return _outputs(
                pollers, backlog, condition(True, "PollersRegistered", message, previous)
            )
        if time.monotonic() >= deadline:
            message = f"no poller on task queue {props['taskQueue']!r} yet"
            return _outputs(0, backlog, condition(False, "WaitingForPollers", message, previous))
        time.sleep(1.0)


def _outputs(pollers: int, backlog: int, cond: dict[str, Any]) -> dict[str, Any]:
    return {
        "pollers": pollers,
        "approximateBacklog": backlog,
        "condition": cond,
        "checkedAt": _now(),
    }


def _public_inputs(props: dict[str, Any]) -> dict[str, Any]:
    # Outputs carry the non-secret inputs (so refresh can re-check) but never credentials.
    return {
        k: props.get(k) for k in (*_INPUT_KEYS, "apiKeyKey", "waitForPollersSeconds") if k in props
    }


class TaskQueueCheckProvider(ResourceProvider):
    """Dynamic provider behind :class:`TaskQueueCheck`."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = []
        address = str(news.get("address") or "")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            failures.append(CheckFailure("address", f"must be host:port, got {address!r}"))
        for key in ("namespace", "taskQueue"):
            if not news.get(key):
                failures.append(CheckFailure(key, "must not be empty"))
        wait = news.get("waitForPollersSeconds") or 0
        if not isinstance(wait, int | float) or wait < 0 or wait > 600:
            failures.append(CheckFailure("waitForPollersSeconds", "must be between 0 and 600"))
        return CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> CreateResult:
        outs = check_task_queue(props)
        return CreateResult(
            id_=f"{props['namespace']}/{props['taskQueue']}", outs={**_public_inputs(props), **outs}
        )

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = any(olds.get(k) != news.get(k) for k in (*_INPUT_KEYS, "apiKeyKey"))
        return DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        outs = check_task_queue(news, olds.get("condition"))
        return UpdateResult(outs={**_public_inputs(news), **outs})

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # Refresh: check the live queue again (credentials are read from the cluster).
        outs = check_task_queue(props, props.get("condition"))
        return ReadResult(id_=id_, outs={**_public_inputs(props), **outs}, inputs=None)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class TaskQueueCheck(Resource, module="twc", name="TaskQueueCheck"):
    """Checks a task queue for pollers after its worker Deployment is applied.

    Outputs: ``pollers``, ``approximateBacklog``, ``condition`` (a
    ``TemporalTaskQueueRegistered`` condition dict), ``checkedAt``.
    """

    pollers: Output[int]
    approximateBacklog: Output[int]
    condition: Output[dict[str, Any]]

    def __init__(
        self,
        name: str,
        *,
        address: Input[str],
        namespace: Input[str],
        task_queue: Input[str],
        tls: Input[bool] = False,
        server_name: Input[str] | None = None,
        auth_mode: Input[str] = "none",
        secret_ref: Input[dict[str, str]] | None = None,
        api_key_key: Input[str] | None = None,
        trigger: Input[str] | None = None,
        wait_for_pollers_seconds: Input[float] = 0,
        opts: ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            TaskQueueCheckProvider(),
            name,
            {
                "address": address,
                "namespace": namespace,
                "taskQueue": task_queue,
                "tls": tls,
                "serverName": server_name,
                "authMode": auth_mode,
                "secretRef": secret_ref,
                "apiKeyKey": api_key_key,
                "trigger": trigger,
                "waitForPollersSeconds": wait_for_pollers_seconds,
                "pollers": None,
                "approximateBacklog": None,
                "condition": None,
                "checkedAt": None,
            },
            opts,
        )
