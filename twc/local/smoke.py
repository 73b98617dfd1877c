"""``twc local smoke``: one ``EchoWorkflow`` (:mod:`twc.local.sample`) on each worker's task
queue of a fleet file, at the embedded dev server; one not done in ``timeout`` s fails it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import TextIO

from temporalio.client import Client

from twc.local.sample import EchoWorkflow
from twc.spec import ResolvedWorker, load_fleet_file


async def _smoke(address: str, workers: list[ResolvedWorker], timeout: float) -> list[str]:
    clients = {
        ns: await Client.connect(address, namespace=ns)
        for ns in {w.temporal_namespace for w in workers}
    }
    runs = (
        clients[w.temporal_namespace].execute_workflow(
            EchoWorkflow.run,
            "smoke",
            id=f"smoke-{w.namespace}-{w.name}-{uuid.uuid4().hex[:8]}",
            task_queue=w.task_queue_name,
            execution_timeout=timedelta(seconds=timeout),
        )
        for w in workers
    )
    results = await asyncio.gather(*runs, return_exceptions=True)
    return [f"failed: {r}" if isinstance(r, BaseException) else f"completed: {r}" for r in results]


def run_smoke(address: str, fleet_file: str, out: TextIO, timeout: float = 120.0) -> int:
    """Print each worker's workflow outcome; 0 when every workflow completed, else 1."""
    workers = load_fleet_file(fleet_file).resolved_workers()
    outcomes = asyncio.run(_smoke(address, workers, timeout))
    rows = [(f"{w.namespace}/{w.name}", w.task_queue_name) for w in workers]
    widths = [max((len(row[i]) for row in rows), default=0) for i in (0, 1)]
    for (name, queue), outcome in zip(rows, outcomes, strict=True):
        print(f"{name:<{widths[0]}}  {queue:<{widths[1]}}  {outcome}", file=out)
    return 0 if all(o.startswith("completed") for o in outcomes) else 1
