"""Item 4: backlog sampling of many task queues against the dev server.

Every run goes through :func:`twc.loop.sampling.sample_backlogs`; ``describe`` asks
DescribeTaskQueue with stats for the workflow, activity and Nexus task queues of one
queue, as the daemon's ``TemporalBacklogs.describe`` does (three RPCs per queue). Runs:

* ``budget``: the daemon's defaults from :class:`~twc.loop.settings.SamplingSettings`
  (concurrency and rate budget), one shared client: what the daemon does;
* ``shared``: the same concurrency without a rate budget, one shared client;
* ``per_call``: the same, but a new client per queue, as the ``TaskQueueCheck`` provider
  does for each check (``twc.connections.connect`` inside every call).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.stats import ratio

log = logging.getLogger(__name__)

RPCS_PER_QUEUE = 3


async def _describe_with(client: Any, namespace: str, name: str) -> Any:
    from datetime import timedelta

    from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    from twc.loop.sampling import Backlog

    parts = []
    for tq_type in (
        TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        TaskQueueType.TASK_QUEUE_TYPE_NEXUS,
    ):
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=namespace,
                task_queue=TaskQueue(name=name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                task_queue_type=tq_type,
                report_stats=True,
            ),
            timeout=timedelta(seconds=10),
        )
        if response.HasField("stats"):
            parts.append(Backlog(count=int(response.stats.approximate_backlog_count)))
    return Backlog.combine(parts)


async def _run(
    refs: list[Any],
    describe: Callable[[Any], Awaitable[Any]],
    *,
    concurrency: int,
    rate_per_s: float | None,
    burst: int,
) -> dict[str, Any]:
    from twc.loop.sampling import sample_backlogs

    start = time.perf_counter()
    results = await sample_backlogs(
        refs, describe, concurrency=concurrency, rate_per_s=rate_per_s, burst=burst
    )
    wall = time.perf_counter() - start
    errors = [str(r.error) for r in results.values() if not r.ok]
    return {
        "queues": len(refs),
        "wall_s": wall,
        "queues_per_s": len(refs) / wall if wall else None,
        "rpcs_per_s": RPCS_PER_QUEUE * len(refs) / wall if wall else None,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "concurrency": concurrency,
        "rate_per_s": rate_per_s,
    }


def queue_refs(count: int, namespace: str = "default") -> list[Any]:
    """The task queues sampled: the generated workers' (``bench-tq-0000`` ...)."""
    from twc.loop.sampling import TaskQueueRef

    return [TaskQueueRef(namespace, f"bench-tq-{i:04d}") for i in range(count)]


def warm_queues(address: str, count: int, namespace: str = "default") -> None:
    """Describe every queue once, so the dev server has loaded its partitions."""
    from twc.connections import ConnectOptions, connect
    from twc.loop.settings import SamplingSettings
    from twc.spec import AuthMode

    options = ConnectOptions(target_host=address, namespace=namespace, tls=False)

    async def main() -> None:
        client = await connect(options, AuthMode.NONE, timeout=10.0)

        async def describe(ref: Any) -> Any:
            return await _describe_with(client, ref.namespace, ref.name)

        concurrency = SamplingSettings().concurrency
        await _run(
            queue_refs(count, namespace),
            describe,
            concurrency=concurrency,
            rate_per_s=None,
            burst=1,
        )

    asyncio.run(main())


def measure_sampling(
    address: str,
    *,
    queues: int,
    budget_queues: int,
    namespace: str = "default",
    warm: bool = True,
) -> dict[str, Any]:
    """Sample ``queues`` task queues three ways (see the module docstring).

    Args:
        address: The Temporal frontend, ``host:port``.
        queues: How many task queues the unbudgeted runs sample.
        budget_queues: How many the run under the daemon's rate budget samples.
        namespace: The Temporal namespace.
        warm: Describe every queue once first (see :func:`warm_queues`); pass False
            when that was done already.

    Returns:
        One entry per run, the settings used and the per-call/shared ratio.
    """
    from twc.connections import ConnectOptions, connect
    from twc.loop.settings import SamplingSettings
    from twc.spec import AuthMode

    settings = SamplingSettings()
    options = ConnectOptions(target_host=address, namespace=namespace, tls=False)
    refs = queue_refs(queues, namespace)

    async def main() -> dict[str, Any]:
        shared = await connect(options, AuthMode.NONE, timeout=10.0)

        async def describe_shared(ref: Any) -> Any:
            return await _describe_with(shared, ref.namespace, ref.name)

        async def describe_per_call(ref: Any) -> Any:
            client = await connect(options, AuthMode.NONE, timeout=10.0)
            return await _describe_with(client, ref.namespace, ref.name)

        if warm:
            await _run(
                refs, describe_shared, concurrency=settings.concurrency, rate_per_s=None, burst=1
            )
        out: dict[str, Any] = {}
        out["shared"] = await _run(
            refs, describe_shared, concurrency=settings.concurrency, rate_per_s=None, burst=1
        )
        out["per_call"] = await _run(
            refs, describe_per_call, concurrency=settings.concurrency, rate_per_s=None, burst=1
        )
        out["budget"] = await _run(
            refs[:budget_queues],
            describe_shared,
            concurrency=settings.concurrency,
            rate_per_s=settings.rate_per_s,
            burst=settings.burst,
        )
        return out

    runs = asyncio.run(main())
    return {
        "settings": settings.model_dump(mode="json"),
        "rpcs_per_queue": RPCS_PER_QUEUE,
        **runs,
        "per_call_over_shared": ratio(runs["per_call"]["wall_s"], runs["shared"]["wall_s"]),
        "budget_floor_s": budget_queues / settings.rate_per_s,
    }
