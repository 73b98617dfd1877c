"""A versioned worker on the real test bed: one Deployment per build, routed by Worker
Versioning, driven by the real daemon.

Real temporalio workers of each build start from their own pods' env (a process per
Running pod of each version Deployment, as ``twc local up --run-workers`` runs them;
versioning on, workflows pinned to the version they start on), the daemon (`twc run`,
rollout durations shortened tenfold) drives routing through Temporal, and at each step
the real Temporal CLI's `temporal worker deployment describe` and `twc status` agree:

1. the first version becomes Current (after its gate);
2. the pull request's preview of an image change says the plan in words and time;
3. the image change: a second Deployment, the gate completed on it, a 25 % ramp, then
   Current — with the daemon replaced mid-ramp, since progress is read back from
   Temporal; a workflow pinned to the first version before the change completes there;
4. the first version drains, is scaled to 0 and deleted after the (shortened) sunset;
5. a third build rolls out, and rolling the image back makes the second Current again
   at once, while its Deployment still exists;
6. with Manual, a new build runs but nothing changes in Temporal's routing.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually
from tests.e2e.native import Kubelet, finish, rollout_of, start_wait
from twc.cli import preview as preview_cmd
from twc.local.environment import LocalEnvironment
from twc.rollout import TARGET_ANNOTATION

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

SETTINGS = {**FAST, "rollout": {"time_scale": 0.1}}
"""Every rollout duration a tenth: a 120 s pause lasts 12 s, a 30 s scale-down 3 s."""
ONE_UP = 120.0
"""Room for an engine run (and the pods it starts) on a loaded machine."""


def _worker(namespace: str, task_queue: str, image: str, strategy: str) -> dict[str, Any]:
    rollout: dict[str, Any] = {
        "strategy": strategy,
        "gate": {"workflowType": "GateWorkflow", "input": {"fail": False}},
    }
    if strategy == "Progressive":
        rollout["steps"] = [{"rampPercentage": 25, "pauseDuration": "120s"}]
    return {
        "name": "orders",
        "namespace": namespace,
        "taskQueueName": task_queue,
        "image": image,
        "rollout": rollout,
        "sunset": {"scaledownDelay": "30s", "deleteDelay": "60s"},
    }


def _cli_describe(temporal: str, address: str, name: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            *(temporal, "worker", "deployment", "describe", "--name", name),
            *("--address", address, "--namespace", "default", "-o", "json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        return {}
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _routing_of_cli(cli: dict[str, Any]) -> dict[str, Any]:
    config = cli.get("routingConfig") or {}
    return {
        "current": config.get("currentVersionBuildID") or None,
        "ramping": config.get("rampingVersionBuildID") or None,
        "ramp": float(config.get("rampingVersionPercentage") or 0),
        "drainage": {
            s["BuildID"]: s.get("drainageStatus") for s in cli.get("versionSummaries") or []
        },
    }


def _routing_of_twc(status: dict[str, Any]) -> dict[str, Any]:
    versions = [
        status.get("targetVersion"),
        status.get("currentVersion"),
        status.get("rampingVersion"),
        *(status.get("deprecatedVersions") or []),
    ]
    by_build = {v["buildID"]: v for v in versions if v}
    ramping = next((b for b, v in by_build.items() if v["status"] == "Ramping"), None)
    current = (status.get("currentVersion") or {}).get("buildID")
    return {
        "current": current,
        "ramping": ramping,
        "ramp": float(by_build[ramping].get("rampPercentage", 0)) if ramping else 0.0,
        "statuses": {b: v["status"] for b, v in by_build.items()},
    }


_DRAINAGE = {"Draining": "draining", "Drained": "drained"}


def agree(temporal: str, address: str, stack: str, key: str) -> dict[str, Any]:
    """The real CLI and ``twc status`` say the same routing, read in between two CLI
    reads that agree with each other (so no change slipped in between)."""

    def once() -> dict[str, Any]:
        before = _routing_of_cli(_cli_describe(temporal, address, key))
        mine = _routing_of_twc(rollout_of(stack, key))
        after = _routing_of_cli(_cli_describe(temporal, address, key))
        assert before == after, "routing moved while reading; again"
        assert (mine["current"], mine["ramping"], mine["ramp"]) == (
            before["current"],
            before["ramping"],
            before["ramp"],
        ), (mine, before)
        for build, status in mine["statuses"].items():
            if status in _DRAINAGE:
                assert before["drainage"].get(build) == _DRAINAGE[status], (build, mine, before)
            if status == "NotRegistered":
                assert build not in before["drainage"], (build, mine, before)
            else:
                assert build in before["drainage"], (build, mine, before)
        return mine

    result: dict[str, Any] = eventually(once, timeout=60, message="the CLI and twc status disagree")
    return result


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_versioned_worker_rolls_out_drains_rolls_back_and_manual_routes_nothing(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    real_tool: Callable[[str], str],
    tmp_path: Path,
) -> None:
    temporal = real_tool("temporal")
    address = local_env.temporal_address()
    key = f"{namespace}/orders"

    def fleet(image: str, strategy: str = "Progressive") -> dict[str, Any]:
        return fleet_doc(
            namespace,
            host_port=address,
            workers=[_worker(namespace, task_queue, image, strategy)],
        )

    fs = daemons.stack(fleet("registry.example/worker:1.0"))
    with Kubelet(kube, namespace, "orders") as kubelet:
        daemon = daemons.start(fs, settings=SETTINGS)

        # 1. The first version: its gate, then Current.
        first = eventually(
            lambda: next(iter(kubelet.deployments()), None),
            timeout=ONE_UP,
            message="the first version's Deployment never appeared",
        )
        assert first.startswith("1.0-")
        seen = eventually(
            lambda: (
                agree(temporal, address, fs.name, key)["current"] == first
                and agree(temporal, address, fs.name, key)
            ),
            timeout=ONE_UP,
            message=lambda: f"version {first} never became Current:\n{daemon.text()[-3000:]}",
        )
        assert seen["statuses"][first] == "Current"
        dep = kubelet.deployments()[first]
        env = {
            e["name"]: e.get("value")
            for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["TEMPORAL_DEPLOYMENT_NAME"] == key
        assert env["TEMPORAL_WORKER_BUILD_ID"] == first
        assert dep["metadata"]["name"] == f"orders-{first.replace('.', '-')}"

        # A workflow started now is pinned to the first version.
        start_wait(address, f"pinned-{namespace}", task_queue)

        # 2. The pull request's preview of the image change: the plan in words and time.
        change = tmp_path / "change.yaml"
        change.write_text(json.dumps(fleet("registry.example/worker:2.0")))
        out, err = io.StringIO(), io.StringIO()
        preview_cmd.run_preview(fs.name, fmt="text", fleet_file=str(change), out=out, err=err)
        text = out.getvalue()
        assert "new version 2.0-" in text, text + err.getvalue()
        assert (
            f"of {key}; gate `GateWorkflow` on it first, then Progressive 25 % (2 m) → "
            f"Current; {first} drains, scales to 0 after 30 s, is deleted after 1 m" in text
        ), text

        # 3. The image change: a second version, its gate, a 25 % ramp, then Current.
        fs.write(fleet("registry.example/worker:2.0"))
        second = eventually(
            lambda: next((b for b in kubelet.deployments() if b.startswith("2.0-")), None),
            timeout=ONE_UP,
            message="the second version's Deployment never appeared",
        )
        gate_id = f"test-{key}:{second}-{task_queue}"
        gate_result = eventually(
            lambda: _run(_gate_result(address, gate_id)),
            timeout=ONE_UP,
            message="the gate never completed on the second version",
        )
        assert gate_result == second
        ramping = eventually(
            lambda: (s := agree(temporal, address, fs.name, key))["ramping"] == second and s,
            timeout=ONE_UP,
            message=lambda: f"never ramped:\n{daemon.text()[-3000:]}",
        )
        assert (ramping["ramp"], ramping["current"]) == (25.0, first)
        # A new daemon mid-ramp continues where the rollout is: nothing was in memory.
        assert daemon.terminate() == 0
        daemon = daemons.start(fs, settings=SETTINGS, name="daemon-2")
        promoted = eventually(
            lambda: (s := agree(temporal, address, fs.name, key))["current"] == second and s,
            timeout=ONE_UP,
            message="the second version never became Current",
        )
        assert promoted["ramping"] is None
        # The workflow pinned to the first version keeps it Draining, with its workers.
        assert promoted["statuses"][first] == "Draining"
        assert int(kubelet.deployments()[first]["spec"]["replicas"]) == 1
        assert finish(address, f"pinned-{namespace}") == first

        # 4. Sunset: Drained, scaled to 0, then its Deployment deleted.
        eventually(
            lambda: agree(temporal, address, fs.name, key)["statuses"].get(first) == "Drained",
            timeout=ONE_UP,
            message="the first version never drained",
        )
        eventually(
            lambda: (
                first not in kubelet.deployments()
                or int(kubelet.deployments()[first]["spec"]["replicas"]) == 0
            ),
            timeout=ONE_UP,
            message="the drained version was never scaled to 0",
        )
        eventually(
            lambda: first not in kubelet.deployments(),
            timeout=ONE_UP,
            message=lambda: (
                f"the drained version's Deployment was never deleted:\n{daemon.text()[-3000:]}"
            ),
        )

        # 5. A third build AllAtOnce; a workflow pinned to the second keeps it running.
        start_wait(address, f"pinned2-{namespace}", task_queue)
        fs.write(fleet("registry.example/worker:3.0", "AllAtOnce"))
        third = eventually(
            lambda: (
                (s := agree(temporal, address, fs.name, key))["current"]
                and s["current"].startswith("3.0-")
                and s["current"]
            ),
            timeout=ONE_UP,
            message="the third version never became Current",
        )
        assert second in kubelet.deployments()
        # Rolling the image back: the second version (still running) is Current at once.
        fs.write(fleet("registry.example/worker:2.0", "AllAtOnce"))
        back = eventually(
            lambda: (s := agree(temporal, address, fs.name, key))["current"] == second and s,
            timeout=ONE_UP,
            message=lambda: f"the rollback never routed back:\n{daemon.text()[-3000:]}",
        )
        assert back["statuses"].get(third) in ("Draining", "Drained", "Inactive")
        # Routing moves back at once; the annotation comes with the up that follows it.
        eventually(
            lambda: (
                kubelet.deployments()[second]["metadata"]["annotations"].get(TARGET_ANNOTATION)
                == "true"
            ),
            timeout=ONE_UP,
            message="the rolled-back version was never marked the target",
        )
        assert finish(address, f"pinned2-{namespace}") == second

        # 6. Manual: a new build runs and polls, and Temporal's routing does not move.
        before = _cli_describe(temporal, address, key)
        fs.write(fleet("registry.example/worker:4.0", "Manual"))
        fourth = eventually(
            lambda: next((b for b in kubelet.deployments() if b.startswith("4.0-")), None),
            timeout=ONE_UP,
            message="the Manual version's Deployment never appeared",
        )
        manual = eventually(
            lambda: (
                (s := agree(temporal, address, fs.name, key))["statuses"].get(fourth) == "Inactive"
                and s
            ),
            timeout=ONE_UP,
            message="the Manual version never polled",
        )
        assert (manual["current"], manual["ramping"]) == (second, None)
        status = rollout_of(fs.name, key)
        assert status["rollout"]["phase"] == "Manual", status
        after = _cli_describe(temporal, address, key)
        assert after["routingConfig"] == before["routingConfig"]
        assert after["lastModifierIdentity"] == before["lastModifierIdentity"]
        assert _run(_gate_result(address, f"test-{key}:{fourth}-{task_queue}")) is None
        assert fourth in kubelet.running()


async def _gate_result(address: str, workflow_id: str) -> str | None:
    from temporalio.service import RPCError

    client = await Client.connect(address)
    handle = client.get_workflow_handle(workflow_id)
    try:
        described = await handle.describe()
    except RPCError:
        return None
    if described.status is None or described.status.name != "COMPLETED":
        return None
    result: str = await handle.result()
    return result
