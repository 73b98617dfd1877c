"""A restarted daemon runs no ``up`` for a stack that is as its last recorded ``up``
left it, on the real engine and API server: a plain restart applies nothing, an edit
made while the daemon was down is applied alone (a targeted ``up``), and an update by
someone else (plain ``pulumi up``) makes the next restart apply the whole stack, as
every restart did before. Every Deployment is the same object throughout."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, DaemonProcess, Daemons, eventually, wait_for_success
from tests.faults._checks import assert_state_clean
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

WORKERS = ("alpha", "beta", "gamma")


def _identity(kube: Any, namespace: str) -> dict[str, tuple[str, int]]:
    """Each worker's Deployment: its uid and generation (a rollout changes the second)."""
    out = {}
    for name in WORKERS:
        dep = kube.get_deployment(namespace, name)
        assert dep is not None, f"{name} is gone"
        out[name] = (dep["metadata"]["uid"], dep["metadata"]["generation"])
    return out


def _ups(daemon: DaemonProcess, mode: str) -> float:
    return daemon.count("twc_engine_runs_total", operation="up", mode=mode)


def test_a_restart_applies_only_what_changed_since_the_last_recorded_up(
    local_env: LocalEnvironment, namespace: str, kube: Any, daemons: Daemons
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": n, "namespace": namespace, "taskQueueName": f"tq-{n}"} for n in WORKERS],
    )
    fleet["clusterObjects"] = False  # the file alone: no other test's object wakes the loop
    fs = daemons.stack(fleet)
    first = daemons.start(fs, settings=FAST, name="first")
    wait_for_success(first)
    assert first.ups() == 1
    applied = _identity(kube, namespace)
    assert first.terminate() == 0

    # 1. A plain restart: nothing to apply, no engine run.
    second = daemons.start(fs, settings=FAST, name="second")
    wait_for_success(second, after=1)
    assert second.ups() == 0, second.text()[-3000:]
    assert "resumed: the stack is as the last recorded up left it" in second.text()
    assert _identity(kube, namespace) == applied
    assert second.terminate() == 0

    # 2. An edit while no daemon ran: that worker alone.
    edited = copy.deepcopy(fleet)
    edited["workers"][1]["image"] = "registry.example/worker:2.0.0"
    fs.write(edited)
    third = daemons.start(fs, settings=FAST, name="third")
    eventually(
        lambda: (
            (dep := kube.get_deployment(namespace, "beta"))
            and dep["spec"]["template"]["spec"]["containers"][0]["image"]
            == "registry.example/worker:2.0.0"
        ),
        timeout=120,
        message="the edit made while the daemon was down never reached the Deployment",
    )
    eventually(lambda: _ups(third, "targeted") == 1, timeout=60, message="no targeted up")
    assert _ups(third, "full") == 0
    now = _identity(kube, namespace)
    assert now["alpha"] == applied["alpha"]
    assert now["gamma"] == applied["gamma"]
    assert now["beta"][0] == applied["beta"][0], "the same Deployment, rolled"
    assert third.terminate() == 0

    # 3. Someone else's update (plain `pulumi up` of the same program): the next restart
    # cannot know what it changed, so it applies the whole stack.
    fs.up()
    fourth = daemons.start(fs, settings=FAST, name="fourth")
    eventually(lambda: _ups(fourth, "full") == 1, timeout=120, message="no full up")
    wait_for_success(fourth, after=1)
    assert "not resuming: the stack's last update" in fourth.text()
    after = _identity(kube, namespace)
    assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in now.items()}
    assert fourth.terminate() == 0
    assert_state_clean(fs, namespace, set(WORKERS))
