"""A Temporal worker that knows nothing of twc: ``GreetingWorkflow`` on one task queue.

Configured from its environment alone, as a worker image is: the client from
``temporalio.envconfig`` (``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, the API key and
TLS variables), the task queue from ``TEMPORAL_TASK_QUEUE``, and Worker Versioning from
``TEMPORAL_DEPLOYMENT_NAME`` and ``TEMPORAL_WORKER_BUILD_ID`` when both are set (as twc
and the official worker controller set them for a versioned rollout): the worker then
polls as that version, its workflows pinned to it. Without them it polls unversioned.

    TEMPORAL_ADDRESS=127.0.0.1:7233 TEMPORAL_TASK_QUEUE=greetings python -m greeting_worker
"""

from __future__ import annotations

import asyncio
import os
import signal
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.envconfig import ClientConfig
from temporalio.worker import Worker, WorkerDeploymentConfig


@activity.defn
async def compose_greeting(name: str) -> str:
    """The greeting, with the build that composed it (``unversioned`` without one)."""
    build = os.environ.get("TEMPORAL_WORKER_BUILD_ID") or "unversioned"
    return f"Hello, {name}! (build {build})"


@workflow.defn
class GreetingWorkflow:
    """Greets ``name`` through one activity."""

    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(
            compose_greeting, name, start_to_close_timeout=timedelta(seconds=30)
        )


def deployment_config() -> WorkerDeploymentConfig | None:
    """Worker Versioning from the environment, or None for an unversioned worker."""
    name = os.environ.get("TEMPORAL_DEPLOYMENT_NAME")
    build_id = os.environ.get("TEMPORAL_WORKER_BUILD_ID")
    if not (name and build_id):
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


async def main() -> None:
    """Poll until SIGTERM (what a pod gets when it stops) or Ctrl-C."""
    client = await Client.connect(**ClientConfig.load_client_connect_config())
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    task_queue, versioning = os.environ["TEMPORAL_TASK_QUEUE"], deployment_config()
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[GreetingWorkflow],
        activities=[compose_greeting],
        deployment_config=versioning,
    ):
        version = versioning.version.to_canonical_string() if versioning else "unversioned"
        print(f"polling {task_queue} ({version})", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
