"""The workflow and activity that simulated worker pods serve.

Kept in a module of its own with nothing but temporalio imports, so Temporal's workflow
sandbox can import it cheaply.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def echo(message: str) -> str:
    """Return the message, tagged with the pod that ran it."""
    import os

    return f"{message} (from {os.environ.get('POD_NAME', '?')})"


@workflow.defn
class EchoWorkflow:
    """Runs ``echo`` once: enough to prove a worker polls its task queue."""

    @workflow.run
    async def run(self, message: str) -> str:
        return await workflow.execute_activity(
            echo, message, start_to_close_timeout=timedelta(seconds=30)
        )
