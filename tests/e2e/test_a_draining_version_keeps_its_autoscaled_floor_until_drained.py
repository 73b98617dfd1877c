"""Autoscaling by version status (``autoscaling.byStatus``), on the real daemon, Temporal
and controllers, with a real temporalio worker per pod.

An autoscaled versioned worker may scale to zero (``minReplicas: 0``), its Current version
keeps one replica, and a Draining version keeps a floor of one. The pull request's
preview names the Draining bounds. A workflow pinned to the first version keeps it
Draining after a new image became Current: with an empty backlog the version is held at
its floor (status ``scalingReason: DrainingFloor`` on the worker's TemporalWorker), so the
pinned workflow still has a poller. Once the workflow finished there and Temporal reports
the version Drained, the floor is released: the version falls to the worker's own
``minReplicas`` (0), long before its sunset would scale it down.

Differs from a production cluster: backlogs sampled every second, scale-down without a
stabilization window.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually
from tests.e2e.native import Kubectl, Kubelet, finish, start_wait
from twc.cli import preview as preview_cmd
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

ONE_UP = 180.0
AUTOSCALING = {
    "minReplicas": 0,
    "maxReplicas": 3,
    "targetBacklogPerReplica": 5,
    "scaleDownStabilizationSeconds": 0,
    "byStatus": {"current": {"minReplicas": 1}, "draining": {"minReplicas": 1, "maxReplicas": 2}},
}


def test_a_draining_version_keeps_its_floor_until_drained_then_releases_it(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    address = local_env.temporal_address()
    kubectl = Kubectl(local_env)

    def fleet(image: str) -> dict[str, Any]:
        worker = {
            "name": "orders",
            "namespace": namespace,
            "taskQueueName": task_queue,
            "image": image,
            "rollout": {"strategy": "AllAtOnce"},
            "sunset": {"scaledownDelay": "1h", "deleteDelay": "2h"},
            "autoscaling": AUTOSCALING,
        }
        return fleet_doc(namespace, host_port=address, workers=[worker])

    def versions() -> dict[str, dict[str, Any]]:
        view = kubectl.get_json("temporalworker", "orders", "-n", namespace) or {}
        status = view.get("status") or {}
        found = [status.get("currentVersion"), *(status.get("deprecatedVersions") or ())]
        return {v["buildID"]: v for v in found if v}

    fs = daemons.stack(fleet("registry.example/worker:1.0"))
    with Kubelet(kube, namespace, "orders") as kubelet:
        daemon = daemons.start(fs, settings=FAST)

        def replicas(build: str) -> int | None:
            dep = kubelet.deployments().get(build)
            return None if dep is None else int(dep["spec"].get("replicas", 1))

        first = eventually(
            lambda: next(iter(kubelet.deployments()), None), timeout=ONE_UP, message="no v1"
        )
        # Its bounds allow 0, but a version must poll to be routed to: one replica.
        eventually(
            lambda: versions().get(first, {}).get("status") == "Current",
            timeout=ONE_UP,
            message=lambda: f"v1 never became Current:\n{daemon.text()[-3000:]}",
        )
        assert replicas(first) == 1
        eventually(lambda: first in kubelet.running(), timeout=ONE_UP, message="v1 runs no worker")
        start_wait(address, f"pinned-{namespace}", task_queue)

        # The pull request's preview names the Draining bounds.
        change = tmp_path / "change.yaml"
        change.write_text(json.dumps(fleet("registry.example/worker:2.0")))
        out, err = io.StringIO(), io.StringIO()
        preview_cmd.run_preview(fs.name, fmt="text", fleet_file=str(change), out=out, err=err)
        assert f"{first} drains (keeping 1 to 2 replicas until Drained)" in out.getvalue(), (
            out.getvalue() + err.getvalue()
        )

        fs.write(fleet("registry.example/worker:2.0"))
        second = eventually(
            lambda: next((b for b in kubelet.deployments() if b.startswith("2.0-")), None),
            timeout=ONE_UP,
            message="no v2",
        )
        held = eventually(
            lambda: (
                (v := versions()).get(second, {}).get("status") == "Current"
                and v.get(first, {}).get("scalingReason") == "DrainingFloor"
                and v
            ),
            timeout=ONE_UP,
            message=lambda: f"v1 was not held at its floor: {versions()}\n{daemon.text()[-3000:]}",
        )
        assert held[first]["status"] == "Draining"
        assert replicas(first) == 1
        assert first in kubelet.running()

        # The pinned workflow finishes on v1; Drained, its floor is released before sunset.
        assert finish(address, f"pinned-{namespace}") == first
        eventually(
            lambda: versions().get(first, {}).get("status") == "Drained" and replicas(first) == 0,
            timeout=2 * ONE_UP,
            message=lambda: (
                f"v1 kept its floor once drained: {versions()}\n{daemon.text()[-3000:]}"
            ),
        )
        assert first in kubelet.deployments()  # its sunset (1 h) has not come
        assert replicas(second) == 1
