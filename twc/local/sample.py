"""The workflows and activity the sample worker serves (only temporalio imports, so the
workflow sandbox imports it cheaply)."""

from __future__ import annotations

import asyncio
import os
import zlib
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError


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
