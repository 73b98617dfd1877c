"""kube-apiserver stops under a running daemon and comes back on the same port.

Twice: while the daemon is idle, and right after a change started an ``up``. Either way
the process, its loop and its Queue watch survive, ``KubernetesUnavailable`` is
reported (``/status``, ``/metrics``, the log, ``/readyz`` 503), and after the restart
the watch lists again by itself: a Queue created then still gets its worker, the stack
converges, and nothing is duplicated, orphaned, pending or locked.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import (
    DaemonProcess,
    Daemons,
    eventually,
    wait_for_success,
    wait_until_settled,
)
from tests.faults._checks import assert_converged, fault_state
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

FAULT = "KubernetesUnavailable"


def _queue(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"temporal.io/worker-enabled": "true"},
        },
        "spec": {"partitions": 1},
    }


def _outage(local_env: LocalEnvironment, daemon: DaemonProcess) -> tuple[float, float, float]:
    """Stop kube-apiserver, check the report, restart it.

    Returns:
        Seconds the API server took to stop (SIGTERM, SIGKILL after 15 s), from then
        until the fault was on ``/status``, and to restart it.
    """
    asked = time.monotonic()
    local_env.stop_component("kube-apiserver")
    stopped = time.monotonic()
    found = eventually(
        lambda: fault_state(daemon, FAULT),
        timeout=90,
        message="the unreachable API server was never reported on /status",
    )
    reported = time.monotonic() - stopped
    assert found["message"], found
    assert daemon.value("twc_fault_active", fault=FAULT) == 1
    assert f"fault {FAULT}:" in daemon.text()
    # The watch stream ends when the process does, a moment after the stop returned.
    eventually(
        lambda: "queues.kmsvc.io watch failed (retrying)" in daemon.text(),
        timeout=30,
        message="the Queue watch never noticed the API server was gone",
    )
    eventually(
        lambda: daemon.probe("/readyz") == 503,
        timeout=30,
        message="/readyz stayed ready without an API server",
    )
    # A few more iterations without the API server: the loop lives.
    time.sleep(5)
    assert daemon.alive(), daemon.text()[-3000:]
    assert daemon.probe("/healthz") == 200
    started = time.monotonic()
    local_env.up(progress=lambda m: print(f"[local] {m}"))
    return stopped - asked, reported, time.monotonic() - started


def _recovers(daemon: DaemonProcess) -> float:
    back = time.monotonic()
    eventually(
        lambda: fault_state(daemon, FAULT) is None,
        timeout=120,
        message="the fault never cleared after the API server came back",
    )
    assert daemon.value("twc_fault_active", fault=FAULT) == 0
    assert f"fault {FAULT} cleared after" in daemon.text()
    eventually(
        lambda: daemon.probe("/readyz") == 200, timeout=60, message="/readyz never ready again"
    )
    return time.monotonic() - back


def test_an_idle_daemon_survives_an_api_server_restart_and_its_watch_resumes(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    worker = {"name": "static", "namespace": namespace, "taskQueueName": task_queue}
    fs = daemons.stack(
        fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[worker])
    )
    daemon = daemons.start(fs)
    wait_for_success(daemon, timeout=120)
    wait_until_settled(daemon)

    stopping, reported, restart = _outage(local_env, daemon)
    cleared = _recovers(daemon)

    # The watch re-established without a daemon restart: a new Queue gets its worker.
    created = time.monotonic()
    kube.custom.create_namespaced_custom_object(
        "kmsvc.io", "v1", namespace, "queues", _queue(namespace, "after")
    )
    eventually(
        lambda: kube.get_deployment(namespace, "worker-after"),
        timeout=120,
        message="a Queue created after the restart never got its worker",
    )
    provisioned = time.monotonic() - created
    wait_until_settled(daemon)
    assert_converged(
        kube, daemon, fs, namespace, {"static", "worker-after"}, adopted_worker="worker-after"
    )
    print(
        f"kube-apiserver down (idle): stopped in {stopping:.1f} s, reported "
        f"{reported:.1f} s later; restarted in "
        f"{restart:.1f} s; cleared {cleared:.1f} s later; a new Queue's worker "
        f"{provisioned:.1f} s after its creation"
    )


def test_an_api_server_stopped_during_an_up_fails_the_up_and_the_next_one_converges(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    first = {"name": "alpha", "namespace": namespace, "taskQueueName": task_queue}
    doc = fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[first])
    fs = daemons.stack(doc)
    daemon = daemons.start(fs)
    wait_for_success(daemon, timeout=120)
    wait_until_settled(daemon)
    ups = daemon.ups()

    # A change: the next iteration starts an up; the API server goes while it runs.
    second = {"name": "beta", "namespace": namespace, "taskQueueName": f"{task_queue}-b"}
    fs.write(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[first, second]))
    eventually(
        lambda: daemon.ups() > ups and daemon.value("twc_engine_in_progress") == 1,
        timeout=60,
        interval=0.05,
        message="the change never started an up",
    )
    stopping, reported, restart = _outage(local_env, daemon)
    failed = daemon.count("twc_reconcile_errors_total")
    cleared = _recovers(daemon)
    eventually(
        lambda: kube.get_deployment(namespace, "beta"),
        timeout=120,
        message="the new worker was never deployed after the restart",
    )
    wait_until_settled(daemon)
    assert_converged(kube, daemon, fs, namespace, {"alpha", "beta"}, adopted_worker="beta")
    print(
        f"kube-apiserver down (during an up): stopped in {stopping:.1f} s, reported "
        f"{reported:.1f} s later; "
        f"restarted in {restart:.1f} s; cleared {cleared:.1f} s later; "
        f"{failed:.0f} failed iteration(s)"
    )
