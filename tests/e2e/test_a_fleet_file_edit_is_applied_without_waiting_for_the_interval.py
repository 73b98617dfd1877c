"""A fleet-file edit reaches the cluster without waiting for the daemon's next
iteration: the file watch wakes the loop (the interval here is an hour, so nothing else
would)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

HOURLY: dict[str, Any] = {**FAST, "reconcile_interval": 3600.0}


def test_an_image_edit_is_applied_while_the_loop_sleeps_for_an_hour(
    local_env: LocalEnvironment, namespace: str, kube: Any, daemons: Daemons
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": "edited", "namespace": namespace, "taskQueueName": f"tq-{namespace}"}],
    )
    fleet["clusterObjects"] = False  # the file alone: no other test's object wakes the loop
    fs = daemons.stack(fleet)
    daemon = daemons.start(fs, settings=HOURLY)
    wait_for_success(daemon)
    ups = daemon.ups()
    before = kube.get_deployment(namespace, "edited")
    assert before is not None

    edited = copy.deepcopy(fleet)
    edited["workers"][0]["image"] = "registry.example/worker:1.5.0"
    fs.write(edited)

    after = eventually(
        lambda: (
            (dep := kube.get_deployment(namespace, "edited"))
            and dep["spec"]["template"]["spec"]["containers"][0]["image"]
            == "registry.example/worker:1.5.0"
            and dep
        ),
        timeout=120,
        message="the edit never reached the Deployment while the loop slept",
    )
    assert daemon.ups() >= ups + 1, "an up applied the edit"
    assert "changed: reconciling now" in daemon.text()
    assert after["metadata"]["uid"] == before["metadata"]["uid"], "the same Deployment, rolled"
    assert daemon.alive()
