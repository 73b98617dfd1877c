"""Task-queue backlogs from Temporal: DescribeTaskQueue with stats, over every type.

:class:`TemporalBacklogs` is the daemon's ``describe`` for
:func:`~twc.loop.sampling.sample_backlogs`. It maps each autoscaled worker to a
:class:`~twc.loop.sampling.TaskQueueRef` that names its connection, reaches Temporal
through that connection's cached client (credentials read from the cluster when the
connection has a secret), and sums the approximate backlog of the workflow, activity and
Nexus task queues of that name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

from twc.connections import ResolvedConnection, default_registry
from twc.loop.sampling import Backlog, TaskQueueRef
from twc.spec import Fleet, ResolvedWorker

__all__ = [
    "BacklogSource",
    "SecretReader",
    "TemporalBacklogs",
    "backlog_from_stats",
    "import_temporal",
]

logger = logging.getLogger(__name__)

SecretReader = Callable[[str, str], Mapping[str, bytes]]
"""Reads a Secret's decoded data: ``(namespace, name) -> data``; raises LookupError."""


def import_temporal() -> None:
    """Import what sampling and task-queue checks use from temporalio, now.

    They are imported lazily (``twc validate`` stays fast). A daemon running several
    shards samples from several threads at once, and a module imported by two threads
    at the same moment can be left half-initialised for good (temporalio's generated
    protobuf modules: "Couldn't build proto file into descriptor pool", a
    ``_ModuleLock`` deadlock), failing every sample after. So that daemon imports them
    once, from one thread, before its shards' loops start.
    """
    import temporalio.api.enums.v1
    import temporalio.api.taskqueue.v1
    import temporalio.api.workflowservice.v1
    import temporalio.client
    import temporalio.service  # noqa: F401 - imported for its side effect, see above


class BacklogSource(Protocol):
    """What the loop needs to sample backlogs; :class:`TemporalBacklogs` implements it."""

    def refs(self, fleet: Fleet, workers: Iterable[ResolvedWorker]) -> dict[str, TaskQueueRef]:
        """Per worker key, the task queue to sample."""
        ...

    async def describe(self, ref: TaskQueueRef) -> Backlog:
        """One task queue's backlog."""
        ...


class TemporalBacklogs:
    """Backlogs read from Temporal through each worker's own connection."""

    def __init__(
        self,
        *,
        read_secret: SecretReader | None = None,
        temporal_address: str | None = None,
        rpc_timeout: float = 10.0,
    ) -> None:
        """Prepare the reader.

        Args:
            read_secret: Reads credential secrets; needed for mTLS and API-key
                connections.
            temporal_address: Replaces every connection's hostPort, as the program's
                ``twc:temporalAddress`` config does (the embedded local environment).
            rpc_timeout: Seconds allowed for each DescribeTaskQueue call.
        """
        self._read_secret = read_secret
        self._address = temporal_address
        self._timeout = rpc_timeout
        self._connections: dict[str, tuple[ResolvedConnection, str | None]] = {}

    def refs(self, fleet: Fleet, workers: Iterable[ResolvedWorker]) -> dict[str, TaskQueueRef]:
        """Resolve each worker's connection and name the task queue to sample.

        Raises:
            TwcConnectionError: A worker's connection does not resolve.
        """
        registry = default_registry()
        out: dict[str, TaskQueueRef] = {}
        for worker in workers:
            conn = registry.resolve_worker(worker, fleet)
            if self._address:
                conn = dataclasses.replace(conn, host_port=self._address)
            secret_ns = None
            if conn.secret_name is not None:
                secret_ns = (
                    conn.secret_source_namespace or conn.identity.namespace or worker.namespace
                )
            conn_id = f"{conn.identity}@{conn.host_port}@{secret_ns or ''}"
            self._connections[conn_id] = (conn, secret_ns)
            out[worker.stack_key] = TaskQueueRef(
                namespace=worker.temporal_namespace,
                name=worker.task_queue_name,
                connection=conn_id,
            )
        return out

    async def pollers(self, ref: TaskQueueRef) -> int:
        """Pollers of the workflow and activity task queues ``ref`` names (what
        ``twc status`` checks).

        Raises:
            LookupError: The connection was never resolved, or its secret is missing.
            TwcConnectionError: The client cannot connect.
            RPCError: Temporal refused the describe.
        """
        from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

        client = await self._client(ref)
        count = 0
        for tq_type in (
            TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        ):
            response = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=ref.namespace,
                    task_queue=TaskQueue(name=ref.name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                    task_queue_type=tq_type,
                ),
                timeout=timedelta(seconds=self._timeout),
            )
            count += len(response.pollers)
        return count

    async def _client(self, ref: TaskQueueRef) -> Any:
        found = self._connections.get(ref.connection)
        if found is None:
            raise LookupError(f"no connection known for {ref}")
        conn, secret_ns = found
        secret_data = None
        if conn.secret_name is not None:
            if self._read_secret is None or secret_ns is None:
                raise LookupError(f"cannot read the secret of {conn.identity}")
            secret_data = await asyncio.to_thread(self._read_secret, secret_ns, conn.secret_name)
        return await conn.client(ref.namespace, secret_data)

    async def describe(self, ref: TaskQueueRef) -> Backlog:
        """Sum the backlog of the workflow, activity and Nexus task queues ``ref`` names.

        Raises:
            LookupError: The connection was never resolved through :meth:`refs`, or its
                credential secret is missing.
            TwcConnectionError: The client cannot connect.
            RPCError: Temporal refused the workflow or activity describe.
        """
        from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
        from temporalio.service import RPCError

        client = await self._client(ref)
        stats: list[Any] = []
        types = (
            TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            TaskQueueType.TASK_QUEUE_TYPE_NEXUS,
        )
        for tq_type in types:
            request = DescribeTaskQueueRequest(
                namespace=ref.namespace,
                task_queue=TaskQueue(name=ref.name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=tq_type,
                report_stats=True,
            )
            try:
                response = await client.workflow_service.describe_task_queue(
                    request, timeout=timedelta(seconds=self._timeout)
                )
            except RPCError:
                if tq_type == TaskQueueType.TASK_QUEUE_TYPE_NEXUS:
                    # Servers without Nexus refuse this type; the others still count.
                    continue
                raise
            if response.HasField("stats"):
                stats.append(response.stats)
        return backlog_from_stats(stats, ref)


def backlog_from_stats(stats: Sequence[Any], ref: TaskQueueRef) -> Backlog:
    """Sum DescribeTaskQueue ``stats`` of the task-queue types into one backlog.

    Args:
        stats: The ``TaskQueueStats`` messages the server returned, one per type.
        ref: The queue, for the error message.

    Returns:
        Counts and rates summed, the oldest age kept.

    Raises:
        LookupError: No type reported statistics (servers before 1.25 never do). An
            empty answer is unknown data, not a backlog of zero: reading it as zero
            would scale the worker down to its minimum while the queue may be full.
    """
    if not stats:
        raise LookupError(f"Temporal reported no backlog statistics for {ref}")
    return Backlog.combine(
        Backlog(
            count=int(s.approximate_backlog_count),
            age_seconds=s.approximate_backlog_age.ToTimedelta().total_seconds(),
            add_rate=float(s.tasks_add_rate),
            dispatch_rate=float(s.tasks_dispatch_rate),
        )
        for s in stats
    )
