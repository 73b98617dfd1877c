"""A hung kube-apiserver (SIGSTOP: connections are accepted, nothing is answered) fails
``/healthz`` within the configured liveness timeout, so the kubelet would restart the
daemon instead of keeping one that silently does nothing; resumed, the daemon is live
again and the stack converges.

An idle daemon reads worker Deployments and Secrets from watch caches and makes no API
call in an iteration, so its loop keeps making progress: the caches' silence is what
fails the probe (``twc_watch_cache_stale``)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.faults._checks import assert_converged
from twc.local import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

LIVENESS = 10.0


def _apiserver_pid(local_env: LocalEnvironment) -> int:
    state = local_env.load_state()
    assert state is not None
    return state.processes["kube-apiserver"].pid


def test_a_hung_api_server_fails_healthz_within_the_liveness_timeout(
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
    daemon = daemons.start(fs, settings={**FAST, "liveness_timeout": LIVENESS})
    wait_for_success(daemon, timeout=120)
    wait_until_settled(daemon)
    assert daemon.probe("/healthz") == 200

    pid = _apiserver_pid(local_env)
    os.kill(pid, signal.SIGSTOP)
    hung = time.monotonic()
    try:
        eventually(
            lambda: daemon.probe("/healthz") == 503,
            timeout=LIVENESS + 60,
            interval=0.2,
            message="/healthz stayed 200 with a hung API server",
        )
        failed = time.monotonic() - hung
        _, body = daemon.answer("/healthz")
        eventually(
            lambda: daemon.value("twc_watch_cache_stale", kind="deployments") == 1,
            timeout=LIVENESS + 60,
            interval=0.2,
            message="the Deployment watch cache never counted as stale with a hung API server",
        )
        assert daemon.alive()
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed = time.monotonic()

    eventually(
        lambda: daemon.probe("/healthz") == 200,
        timeout=180,
        message="/healthz never recovered after the API server resumed",
    )
    live_again = time.monotonic() - resumed
    eventually(
        lambda: daemon.value("twc_watch_cache_stale", kind="deployments") == 0,
        timeout=60,
        message="the Deployment watch cache stayed stale after the API server resumed",
    )
    wait_until_settled(daemon)
    assert_converged(kube, daemon, fs, namespace, {"steady"})
    print(
        f"kube-apiserver hung (SIGSTOP): /healthz failed {failed:.1f} s later (liveness "
        f"timeout {LIVENESS:g} s, interval {FAST['reconcile_interval']:g} s); live again "
        f"{live_again:.1f} s after SIGCONT; /healthz said: {body.strip()}"
    )
