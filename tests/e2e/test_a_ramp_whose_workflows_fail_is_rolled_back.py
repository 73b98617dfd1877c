"""Failure-rate rollback (``rollout.failureRate``) on the real daemon, Temporal (its
visibility store) and controllers, with a real temporalio worker per pod.

A Progressive worker ramps a new build to 50 % whose sample worker fails every workflow
(``SAMPLE_FAILURE_PERCENT=100``, an env change, so a new build). Workflows started during
the ramp close on both versions; the new version's failure rate is over the Current's by
more than the margin, with more than the minimum sample: twc removes the ramp (new
executions go back to the Current version, and complete there), records why on the
version in Temporal, and reports ``RolledBack`` with the figures. A new daemon keeps the
rollout stopped from that record. A healthy build then ramps through the same rule to
Current. The pull request's preview names the rule.

Differs from a production cluster: pauses a tenth (``rollout.time_scale``), a sample of
four workflows.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success
from tests.e2e.native import Kubelet, rollout_of
from twc.cli import preview as preview_cmd
from twc.local.environment import LocalEnvironment
from twc.versioning import WorkerVersioning

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

SETTINGS = {**FAST, "rollout": {"time_scale": 0.1}}
ONE_UP = 180.0
RULE = {"marginPercent": 30, "minSample": 4, "window": "10m"}


async def _echoes(address: str, task_queue: str, count: int) -> list[str | None]:
    """Run ``count`` EchoWorkflows at once: each one's result, ``None`` for a failed one."""
    client = await Client.connect(address)

    async def one() -> str | None:
        handle = await client.start_workflow(
            "EchoWorkflow", "hi", id=f"echo-{uuid.uuid4().hex}", task_queue=task_queue
        )
        try:
            result: str = await handle.result()
        except WorkflowFailureError:
            return None
        return result

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def _routing(address: str, key: str) -> tuple[str | None, str | None, dict[str, str]]:
    """Temporal's Current and Ramping build, and each version's recorded rollback."""
    versioning = WorkerVersioning(await Client.connect(address), "default")
    notes = {}
    try:
        routing = await versioning.routing(key)
        assert routing is not None, "no version registered yet"
        for build in routing.versions:
            detail = await versioning.version(key, build)
            if detail is not None and detail.rolled_back:
                notes[build] = detail.rolled_back
    except RPCError as exc:  # a deployment's query buffer is shared with the daemon's
        raise AssertionError(f"not described now: {exc}") from exc
    return routing.current, routing.ramping, notes


def test_a_failing_ramp_is_rolled_back_and_a_healthy_one_ramps_through(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    address = local_env.temporal_address()
    key = f"{namespace}/orders"

    def fleet(image: str, pause: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        worker = {
            "name": "orders",
            "namespace": namespace,
            "taskQueueName": task_queue,
            "image": image,
            "env": env or {},
            "rollout": {
                "strategy": "Progressive",
                "steps": [{"rampPercentage": 50, "pauseDuration": pause}],
                "failureRate": RULE,
            },
        }
        return fleet_doc(namespace, host_port=address, workers=[worker])

    def routing() -> tuple[str | None, str | None, dict[str, str]]:
        return asyncio.run(_routing(address, key))

    fs = daemons.stack(fleet("registry.example/worker:1.0", "1h"))
    with Kubelet(kube, namespace, "orders") as kubelet:
        daemon = daemons.start(fs, settings=SETTINGS)
        first = eventually(
            lambda: (r := routing()[0]) and r.startswith("1.0-") and r,
            timeout=ONE_UP,
            interval=2,
            message=lambda: f"v1 never became Current:\n{daemon.text()[-3000:]}",
        )

        failing = fleet("registry.example/worker:2.0", "1h", {"SAMPLE_FAILURE_PERCENT": "100"})
        change = tmp_path / "change.yaml"
        change.write_text(json.dumps(failing))
        out, err = io.StringIO(), io.StringIO()
        preview_cmd.run_preview(fs.name, fmt="text", fleet_file=str(change), out=out, err=err)
        assert (
            "Progressive 50 % (1 h) → Current, rolled back once a workflow type fails 30 points "
            "more often than on Current (of 4 or more closed in 10 m)"
        ) in out.getvalue(), out.getvalue() + err.getvalue()

        fs.write(failing)
        second = eventually(
            lambda: (r := routing()[1]) and r.startswith("2.0-") and r,
            timeout=ONE_UP,
            interval=2,
            message=lambda: f"v2 never ramped:\n{daemon.text()[-3000:]}",
        )
        eventually(lambda: second in kubelet.running(), timeout=ONE_UP, message="v2 runs no worker")
        # Half the new executions go to v2, whose worker fails every one.
        results = asyncio.run(_echoes(address, task_queue, 24))
        assert None in results
        assert any(r and "orders-1-0-" in r for r in results), results

        stopped = eventually(
            lambda: (r := rollout_of(fs.name, key)["rollout"])["reason"] == "RolledBack" and r,
            timeout=ONE_UP,
            interval=2,
            message=lambda: f"v2 was never rolled back:\n{daemon.text()[-3000:]}",
        )
        assert stopped["phase"] == "Blocked"
        assert "workflow type EchoWorkflow failed" in stopped["message"], stopped
        assert "the Current version 0 of" in stopped["message"], stopped
        # `twc status` shows the plan at once; the daemon's iteration then removes the ramp.
        notes = eventually(
            lambda: (r := routing())[:2] == (first, None) and second in r[2] and r,
            timeout=60,
            interval=2,
            message=lambda: f"the ramp to v2 stayed:\n{daemon.text()[-3000:]}",
        )[2]
        assert notes[second] in stopped["message"]
        # New executions go back to v1 and complete there.
        after = asyncio.run(_echoes(address, task_queue, 6))
        assert all(r and "orders-1-0-" in r for r in after), after

        # A new daemon reads the record back: the rollout stays stopped, nothing ramps.
        assert daemon.terminate() == 0
        daemon = daemons.start(fs, settings=SETTINGS, name="daemon-2")
        wait_for_success(daemon, after=2)
        assert eventually(routing, timeout=60, interval=2, message="routing")[:2] == (first, None)
        assert rollout_of(fs.name, key)["rollout"]["reason"] == "RolledBack"

        # A healthy build ramps through the same rule to Current; its pause (30 s at this
        # time scale) leaves the ramp in place long enough to be seen and to take traffic.
        fs.write(fleet("registry.example/worker:2.1", "5m"))
        third = eventually(
            lambda: (r := routing()[1]) and r.startswith("2.1-") and r,
            timeout=ONE_UP,
            interval=2,
            message=lambda: f"v3 never ramped:\n{daemon.text()[-3000:]}",
        )
        eventually(lambda: third in kubelet.running(), timeout=ONE_UP, message="v3 runs no worker")
        healthy = asyncio.run(_echoes(address, task_queue, 12))
        assert None not in healthy, healthy
        eventually(
            lambda: routing()[:2] == (third, None),
            timeout=ONE_UP,
            interval=2,
            message=lambda: f"v3 never became Current:\n{daemon.text()[-3000:]}",
        )
        assert rollout_of(fs.name, key)["rollout"]["reason"] == "RolloutComplete"
        assert third not in eventually(routing, timeout=60, interval=2, message="routing")[2]
