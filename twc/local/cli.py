"""``twc local up|down|env|status|smoke``. The smoke runs one ``EchoWorkflow``
(:mod:`twc.local.sample`) on each worker's task queue of a fleet file, at the embedded dev
server; one not done in ``timeout`` s fails it."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import uuid
from datetime import timedelta
from typing import TextIO

from temporalio.client import Client

from twc.local.environment import LocalEnvError, LocalEnvironment, project_root
from twc.local.sample import EchoWorkflow
from twc.spec import ResolvedWorker, load_fleet_file


def _progress(message: str) -> None:
    print(f"[local] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``twc local`` action; returns the exit code."""
    state = args.state if args.action == "up" else None
    env = LocalEnvironment(args.dir, run_workers=args.run_workers, state=state)
    try:
        if args.action == "up":
            env.up(progress=_progress)  # a crashed component is reported as it restarts
        if args.action == "down":
            _progress(f"stopped {len(env.down(progress=_progress))} process(es)")
        elif args.action in ("up", "env"):
            for key, value in env.env().items():
                print(f"export {key}={shlex.quote(value)}")
        elif args.action == "smoke":
            fleet = project_root() / "stacks" / f"{args.stack}.yaml"
            code = run_smoke(env.temporal_address(), str(fleet), sys.stdout)
            # temporalio's core threads may call into the interpreter while it finalizes
            # (a fatal PyGILState_Release seen in CI); the smoke has nothing left to clean up.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        elif args.action == "status":
            rows = env.status()
            for row in rows:
                state = "running" if row.running else "STOPPED"
                print(f"{row.name:<24} {state:<8} pid {row.pid or '-':<8} {row.endpoint}")
            if not rows:
                _progress(f"no local environment in {env.dir}")
            return 0 if rows and all(r.running for r in rows) else 1
        return 0
    except LocalEnvError as exc:
        _progress(f"error: {exc}")
        return 1


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
