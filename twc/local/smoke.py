"""``twc local smoke``: one workflow on each worker's task queue of a stack.

For every worker of the stack's fleet file, starts the sample ``EchoWorkflow``
(:mod:`twc.local.sample`, served by every pod of the embedded environment that runs no
command of its own) on the worker's task queue, in its Temporal namespace, at the
embedded dev server, and waits for its result: a completed workflow proves that a twc
worker polls that queue. A workflow not completed within ``timeout`` seconds (its
execution timeout, kept by Temporal) fails the smoke.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import TextIO

from temporalio.client import Client

from twc.local.sample import EchoWorkflow
from twc.spec import ResolvedWorker, load_fleet_file


async def _echo(client: Client, worker: ResolvedWorker, timeout: float) -> str:
    return await client.execute_workflow(
        EchoWorkflow.run,
        "smoke",
        id=f"smoke-{worker.namespace}-{worker.name}-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue_name,
        execution_timeout=timedelta(seconds=timeout),
    )


async def _smoke(address: str, workers: list[ResolvedWorker], timeout: float) -> list[str]:
    clients = {
        ns: await Client.connect(address, namespace=ns)
        for ns in {w.temporal_namespace for w in workers}
    }
    results = await asyncio.gather(
        *(_echo(clients[w.temporal_namespace], w, timeout) for w in workers),
        return_exceptions=True,
    )
    return [f"failed: {r}" if isinstance(r, BaseException) else f"completed: {r}" for r in results]


def run_smoke(address: str, fleet_file: str, out: TextIO, timeout: float = 120.0) -> int:
    """Run the smoke workflows of ``fleet_file``'s workers at ``address``; one line per
    worker (``<namespace>/<worker>  <task queue>  completed: …`` or ``failed: …``).

    Returns:
        0 when every workflow completed, 1 otherwise.
    """
    workers = load_fleet_file(fleet_file).resolved_workers()
    outcomes = asyncio.run(_smoke(address, workers, timeout))
    rows = [(f"{w.namespace}/{w.name}", w.task_queue_name) for w in workers]
    widths = [max((len(row[i]) for row in rows), default=0) for i in (0, 1)]
    for (name, queue), outcome in zip(rows, outcomes, strict=True):
        print(f"{name:<{widths[0]}}  {queue:<{widths[1]}}  {outcome}", file=out)
    return 0 if all(o.startswith("completed") for o in outcomes) else 1
