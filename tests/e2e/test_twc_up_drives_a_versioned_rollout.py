"""`twc up` alone (no daemon) drives a versioned rollout: each run reads the rollout back
from Temporal and the cluster, applies the versions, then carries out what is due
(gates, routing) while it can; a failed gate stops the rollout with its reason.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc
from tests.e2e.native import Kubelet, rollout_of
from tests.e2e.test_versioned_rollout_routes_drains_and_rolls_back import _cli_describe
from twc.cli.up import run_up
from twc.local.environment import LocalEnvironment
from twc.rollout import RolloutSettings

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

FAST = RolloutSettings(time_scale=0.1)
"""A tenth of every rollout duration: a 30 s pause lasts 3 s."""


def _worker(namespace: str, task_queue: str, image: str, **rollout: Any) -> dict[str, Any]:
    return {
        "name": "orders",
        "namespace": namespace,
        "taskQueueName": task_queue,
        "image": image,
        "rollout": rollout,
    }


def test_twc_up_routes_a_new_version_and_a_failed_gate_stops_the_next(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
    real_tool: Callable[[str], str],
) -> None:
    temporal = real_tool("temporal")
    address = local_env.temporal_address()
    key = f"{namespace}/orders"

    def fleet(image: str, **rollout: Any) -> dict[str, Any]:
        worker = _worker(namespace, task_queue, image, **rollout)
        return fleet_doc(namespace, host_port=address, workers=[worker])

    def up(fs: FleetStack) -> str:
        out = io.StringIO()
        code = run_up(fs.name, str(fs.fleet_file), out, rollouts=FAST, rollout_wait=90)
        assert code == 0, out.getvalue()
        return out.getvalue()

    gate = {"workflowType": "GateWorkflow", "input": {"fail": False}}
    fs = fleet_stack(fleet("registry.example/worker:1.0", strategy="AllAtOnce", gate=gate))
    with Kubelet(kube, namespace, "orders"):
        text = up(fs)
        current = _cli_describe(temporal, address, key)["routingConfig"]["currentVersionBuildID"]
        assert current.startswith("1.0-"), text
        assert f"rollout of {key}: {current} → Current" in text

        # A gate that fails: the rollout stops with the gate's own reason.
        failing = {"workflowType": "GateWorkflow", "input": {"fail": True, "reason": "smoke"}}
        fs.write(fleet("registry.example/worker:2.0", strategy="AllAtOnce", gate=failing))
        text = up(fs)
        status = rollout_of(fs.name, key)
        assert status["rollout"]["reason"] == "GateFailed", json.dumps(status)
        assert "smoke" in status["rollout"]["message"]
        assert status["targetVersion"]["buildID"].startswith("2.0-")
        assert status["currentVersion"]["buildID"] == current
        routing = _cli_describe(temporal, address, key)["routingConfig"]
        assert routing["currentVersionBuildID"] == current
        assert not routing["rampingVersionBuildID"]

        # Progressive, 30 s shortened to 3 s: one `twc up` ramps, waits, promotes.
        steps = [{"rampPercentage": 25, "pauseDuration": "30s"}]
        fs.write(fleet("registry.example/worker:3.0", strategy="Progressive", steps=steps))
        text = up(fs)
        routing = _cli_describe(temporal, address, key)["routingConfig"]
        third = routing["currentVersionBuildID"]
        assert third.startswith("3.0-"), text
        assert f"{third} → Ramping 25 %" in text
        assert f"{third} → Current" in text
