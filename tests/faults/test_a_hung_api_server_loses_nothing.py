"""A hung kube-apiserver (SIGSTOP: connections are accepted, nothing is answered) does
not end the daemon or make it change anything; resumed, the stack converges.

``/healthz`` is the loop's progress: an idle daemon reads worker Deployments and Secrets
from watch caches, so its loop keeps iterating, and the probe stays 200."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.faults._checks import assert_converged
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]


def _apiserver_pid(local_env: LocalEnvironment) -> int:
    state = local_env.load_state()
    assert state is not None
    return state.processes["kube-apiserver"].pid


def test_a_daemon_outlives_a_hung_api_server_and_converges_after_it(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    worker = {"name": "steady", "namespace": namespace, "taskQueueName": task_queue}
    fs = daemons.stack(
        fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[worker])
    )
    daemon = daemons.start(fs, settings=FAST)
    wait_for_success(daemon, timeout=120)
    wait_until_settled(daemon)

    pid = _apiserver_pid(local_env)
    os.kill(pid, signal.SIGSTOP)
    try:
        before = daemon.count("twc_reconcile_total")
        eventually(
            lambda: daemon.count("twc_reconcile_total") >= before + 3,
            timeout=120,
            message="the loop stopped iterating while the API server hung",
        )
        assert daemon.alive()
        assert daemon.probe("/healthz") == 200
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until_settled(daemon)
    assert_converged(kube, daemon, fs, namespace, {"steady"})
