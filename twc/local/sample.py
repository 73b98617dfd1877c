"""The sample worker: its workflows and activities, and (run as ``python -m
twc.local.sample``) a worker configured from its env alone, as a worker image is. Its
imports are temporalio's and the standard library's only, and ``twc.local`` imports
nothing, so the workflow sandbox re-imports this module cheaply."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import zlib
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.envconfig import ClientConfigProfile
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker, WorkerDeploymentConfig

MARK = "twc-worker-mark"
"""Prefix of the lines the sample worker prints as it passes each step of its start."""


@activity.defn
async def echo(message: str) -> str:
    """Return the message, tagged with the pod that ran it; fails for good in the share of
    workflows ``SAMPLE_FAILURE_PERCENT`` says (by workflow ID), to try rollbacks with."""
    share = float(os.environ.get("SAMPLE_FAILURE_PERCENT") or 0)
    if zlib.crc32(str(activity.info().workflow_id).encode()) % 100 < share:
        raise ApplicationError("the sample fails this one", non_retryable=True)
    return f"{message} (from {os.environ.get('POD_NAME', '?')})"


@activity.defn
async def hold(seconds: float) -> None:
    """Stay on the worker ``seconds`` long: an activity in flight, to try scaling with."""
    await asyncio.sleep(seconds)


@workflow.defn
class EchoWorkflow:
    """Runs ``echo`` once: enough to prove a worker polls its task queue."""

    @workflow.run
    async def run(self, message: str) -> str:
        return await workflow.execute_activity(
            echo, message, start_to_close_timeout=timedelta(seconds=30)
        )


def _build_id() -> str:
    version = workflow.info().get_current_deployment_version()
    return version.build_id if version is not None else ""


@workflow.defn
class GateWorkflow:
    """A rollout gate: the build ID it ran on, or a failure on ``{"fail": true}``."""

    @workflow.run
    async def run(self, check: dict[str, Any] | None = None) -> str:
        if check and check.get("fail"):
            reason = str(check.get("reason") or "the gate says no")
            raise ApplicationError(reason, non_retryable=True)
        return _build_id()


@workflow.defn
class WaitWorkflow:
    """Runs ``hold`` for ``hold_seconds`` (none by default), waits for the ``finish``
    signal, then returns the build ID it ran on."""

    def __init__(self) -> None:
        self._finish = False

    @workflow.run
    async def run(self, hold_seconds: float = 0) -> str:
        if hold_seconds:
            timeout = timedelta(seconds=hold_seconds + 60)
            await workflow.execute_activity(hold, hold_seconds, start_to_close_timeout=timeout)
        await workflow.wait_condition(lambda: self._finish)
        return _build_id()

    @workflow.signal
    def finish(self) -> None:
        self._finish = True


def _mark(step: str) -> None:
    print(f"{MARK} {step} {time.time():.6f}", flush=True)


async def _serve() -> None:
    _mark("imported")
    profile = ClientConfigProfile.load()  # from TEMPORAL_* env, as a worker image would
    pod = os.environ.get("POD_NAME")
    # pod@node, as the SDK's default is pid@host: the poller list names the pods.
    identity = f"{pod}@{os.environ.get('NODE_NAME', '')}" if pod else None
    client = await Client.connect(**profile.to_client_connect_config(), identity=identity)
    _mark("connected")
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    name, build = os.getenv("TEMPORAL_DEPLOYMENT_NAME"), os.getenv("TEMPORAL_WORKER_BUILD_ID")
    version = WorkerDeploymentVersion(name, build) if name and build else None
    # A version's pod polls as that version, its workflows pinned to it.
    config = WorkerDeploymentConfig(version, True, VersioningBehavior.PINNED) if version else None
    task_queue = os.environ["TEMPORAL_TASK_QUEUE"]
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[EchoWorkflow, GateWorkflow, WaitWorkflow],
        activities=[echo, hold],
        deployment_config=config,
    )
    _mark("built")
    async with worker:
        as_version = f" as {version.to_canonical_string()}" if version else ""
        print(f"worker polling {task_queue} on {profile.address}{as_version}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(_serve())
