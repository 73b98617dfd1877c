"""Temporal stops while the daemon samples backlogs for an autoscaled worker.

The daemon must keep running, hold the worker's replicas (neither min nor max on
missing data), report ``TemporalUnavailable`` on ``/status``, ``/metrics`` and in its
log, and pick sampling up again when Temporal is back, with nothing duplicated.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success
from tests.faults._checks import assert_converged, fault_state
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

TARGET = 20  # backlog per replica: 60 waiting workflow tasks ask for 3 replicas
WORKFLOWS = 60
SCALED = math.ceil(WORKFLOWS / TARGET)
FAULT = "TemporalUnavailable"


async def _start(address: str, task_queue: str, count: int) -> None:
    client = await Client.connect(address)
    # Nothing polls the queue, so every workflow task waits in the backlog.
    await asyncio.gather(
        *(
            client.start_workflow(
                "Echo", "hi", id=f"wf-{uuid.uuid4().hex[:12]}", task_queue=task_queue
            )
            for _ in range(count)
        )
    )


def test_temporal_down_while_sampling_holds_replicas_reports_and_resumes(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    address = local_env.temporal_address()
    worker = {
        "name": "orders",
        "namespace": namespace,
        "taskQueueName": task_queue,
        "autoscaling": {"minReplicas": 1, "maxReplicas": 10, "targetBacklogPerReplica": TARGET},
    }
    fs = daemons.stack(fleet_doc(namespace, host_port=address, workers=[worker]))
    settings = {**FAST, "autoscale": {"scale_up": {"policies": []}}}
    daemon = daemons.start(fs, settings=settings)
    wait_for_success(daemon, timeout=120)
    key = f"{namespace}/orders"

    def replicas() -> int:
        dep = kube.get_deployment(namespace, "orders")
        return -1 if dep is None else int(dep["spec"]["replicas"])

    asyncio.run(_start(address, task_queue, WORKFLOWS))
    eventually(
        lambda: replicas() == SCALED,
        timeout=120,
        message=f"the backlog never scaled the worker to {SCALED}",
    )
    eventually(
        lambda: daemon.value("twc_engine_in_progress") == 0,
        timeout=60,
        message="the scaling up never finished",
    )
    ups = daemon.ups()
    errors = daemon.count("twc_backlog_sample_errors_total")

    stopped = time.monotonic()
    local_env.stop_component("temporal")

    found = eventually(
        lambda: fault_state(daemon, FAULT),
        timeout=90,
        message="Temporal being down was never reported on /status",
    )
    reported = time.monotonic() - stopped
    assert found["sources"] == ["backlog"], found
    assert key in found["message"], found
    assert daemon.value("twc_fault_active", fault=FAULT) == 1
    assert daemon.count("twc_faults_total", fault=FAULT) == 1
    assert f"fault {FAULT}: 1 worker(s), replicas held" in daemon.text()
    # Several more iterations without Temporal: the loop lives, iterates and holds.
    seen = daemon.successes()
    wait_for_success(daemon, after=seen + 3, timeout=60)
    assert daemon.probe("/healthz") == 200
    assert daemon.count("twc_backlog_sample_errors_total") > errors
    assert daemon.value("twc_task_queue_backlog", task_queue=task_queue) is None  # dropped
    assert daemon.value("twc_worker_desired_replicas", worker=key) == SCALED
    assert replicas() == SCALED
    assert daemon.ups() == ups, "missing backlog data started an up"
    assert "backlog unknown, holding replicas" in daemon.text()

    restarted = time.monotonic()
    local_env.up(progress=lambda m: print(f"[local] {m}"))
    back = time.monotonic()
    eventually(
        lambda: fault_state(daemon, FAULT) is None,
        timeout=120,
        message="the fault never cleared after Temporal came back",
    )
    cleared = time.monotonic() - back
    assert daemon.value("twc_fault_active", fault=FAULT) == 0
    assert f"fault {FAULT} cleared after" in daemon.text()
    # Sampling resumed on the same (restarted) server: the backlog is there again. The
    # dev server's count is approximate and comes back higher than before the restart
    # (60 waiting tasks reported as 120 here): the daemon follows what Temporal says.
    backlog = eventually(
        lambda: daemon.value("twc_task_queue_backlog", task_queue=task_queue),
        timeout=60,
        message="the backlog metric never came back",
    )
    assert backlog >= WORKFLOWS, backlog
    wanted = min(10, math.ceil(backlog / TARGET))
    eventually(
        lambda: replicas() == wanted,
        timeout=120,
        message=f"the worker never converged on {wanted} replicas",
    )
    eventually(
        lambda: daemon.value("twc_engine_in_progress") == 0,
        timeout=60,
        message="the scaling up never finished",
    )
    settled = daemon.ups()
    wait_for_success(daemon, after=daemon.successes() + 2, timeout=60)
    assert daemon.ups() == settled
    assert daemon.value("twc_worker_desired_replicas", worker=key) == wanted
    assert daemon.count("twc_reconcile_errors_total") == 0

    assert_converged(kube, daemon, fs, namespace, {"orders"})
    print(
        f"Temporal down: reported after {reported:.1f} s; restarted in "
        f"{back - restarted:.1f} s; cleared {cleared:.1f} s after the restart; "
        f"backlog {backlog:.0f} after it, {wanted} replicas"
    )
