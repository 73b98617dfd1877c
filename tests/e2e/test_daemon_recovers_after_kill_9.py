"""``kill -9`` of the daemon during an ``up``, then a restart: the stack converges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e


def test_a_daemon_killed_during_an_up_is_restarted_and_the_stack_converges(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    workers = [
        {"name": "alpha", "namespace": namespace, "taskQueueName": task_queue},
        {"name": "beta", "namespace": namespace, "taskQueueName": f"{task_queue}-b"},
    ]
    # Each TaskQueueCheck waits up to 60 s for a poller, so the first up is still running
    # (checks pending) well after the Deployments exist: that is when the kill lands.
    fs = daemons.stack(
        fleet_doc(namespace, host_port=local_env.temporal_address(), workers=workers),
        waitForPollersSeconds="60",
    )
    first = daemons.start(fs, name="first")
    eventually(
        lambda: kube.get_deployment(namespace, "alpha") and kube.get_deployment(namespace, "beta"),
        timeout=90,
        message="the first up never created the Deployments",
    )
    # Early apply creates the Deployments before the engine has recorded a step, so their
    # presence alone does not mean the engine is mid-step: wait for the state to say so.
    eventually(
        lambda: pending_operations(fs),
        timeout=90,
        message="the first up never recorded a pending operation",
    )
    assert first.value("twc_engine_in_progress") == 1

    first.kill_9()

    assert pending_operations(fs), "the kill did not land during the up"
    # The killed engine's lock is still there: a plain `up` would refuse to run.
    backend = Path(fs.env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    assert list((backend / ".pulumi" / "locks").rglob(f"{fs.name}/*.json"))
    # The restarted up need not wait for pollers (nobody polls these queues).
    fs.extra_config["waitForPollersSeconds"] = "0"
    fs.stack()

    second = daemons.start(fs, name="second")
    wait_for_success(second, timeout=120)

    assert second.count("twc_stack_recoveries_total", action="cancel") == 1
    assert second.count("twc_stack_recoveries_total", action="drop-pending-operations") == 1
    after = fs.stack().export_stack().deployment or {}
    assert not after.get("pending_operations")
    recorded = {r["urn"].rsplit("::", 1)[-1] for r in after["resources"]}
    for worker in ("alpha", "beta"):
        for part in ("sa", "deployment", "check"):
            assert f"{namespace}/{worker}-{part}" in recorded
    outputs = fs.stack().outputs()["workers"].value
    for worker in ("alpha", "beta"):
        deployment_ready = outputs[f"{namespace}/{worker}"]["conditions"][0]
        assert (deployment_ready["type"], deployment_ready["status"]) == (
            "WorkerDeploymentReady",
            "True",
        )

    # Converged: the next iterations find nothing to do, and a stop is clean.
    ups = second.ups()
    wait_for_success(second, after=second.successes() + 2, timeout=30)
    assert second.ups() == ups
    assert second.terminate() == 0


def pending_operations(fs: FleetStack) -> list[Any]:
    """The operations the stack's state records as started and not finished."""
    state = fs.stack().export_stack().deployment
    assert state is not None, f"stack {fs.name} exported no deployment"
    return list(state.get("pending_operations") or [])
