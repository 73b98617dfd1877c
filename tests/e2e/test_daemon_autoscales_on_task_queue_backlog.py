"""The daemon scales a worker from its real task-queue backlog on Temporal, through the
Deployment's scale subresource: no engine run at all."""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import Client

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

TARGET = 40  # backlog per replica: 200 waiting workflow tasks ask for 5 replicas
WORKFLOWS = 200
# The (shortened) scale-down stabilization window, in seconds: it must outlast the
# drain below (terminating 200 workflows and the server discarding their tasks) on a
# loaded machine, or the first empty samples would already lower replicas.
WINDOW = 30
# Iterations on a loaded machine: the bound is a test timeout, not a measured figure.
SLACK = 30.0


async def _start(address: str, task_queue: str, ids: list[str]) -> None:
    client = await Client.connect(address)
    # Any workflow name does: nothing polls the queue, so every workflow task waits.
    await asyncio.gather(
        *(client.start_workflow("EchoWorkflow", "hi", id=i, task_queue=task_queue) for i in ids)
    )


async def _backlog(address: str, task_queue: str) -> int:
    from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    client = await Client.connect(address)
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace="default",
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            report_stats=True,
        )
    )
    return int(response.stats.approximate_backlog_count)


async def _poll(address: str, task_queue: str, stop: threading.Event) -> None:
    from temporalio.api.enums.v1 import TaskQueueKind
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import PollWorkflowTaskQueueRequest

    client = await Client.connect(address)
    request = PollWorkflowTaskQueueRequest(
        namespace="default",
        task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        identity="drainer",
    )

    async def loop() -> None:
        while not stop.is_set():
            try:
                # An empty answer after a few seconds is the normal case; the server
                # refuses deadlines much shorter than this.
                await client.workflow_service.poll_workflow_task_queue(
                    request, timeout=timedelta(seconds=5)
                )
            except Exception:  # noqa: BLE001 - the test records the failure and retries
                await asyncio.sleep(0.5)

    await asyncio.gather(*(loop() for _ in range(8)))


async def _terminate(address: str, ids: list[str]) -> None:
    client = await Client.connect(address)
    await asyncio.gather(*(client.get_workflow_handle(i).terminate("drained") for i in ids))


def test_a_backlog_of_200_workflows_scales_up_and_draining_scales_back_down_with_no_engine_run(
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
        "autoscaling": {
            "minReplicas": 1,
            "maxReplicas": 12,
            "targetBacklogPerReplica": TARGET,
            "scaleDownStabilizationSeconds": WINDOW,
        },
    }
    fs = daemons.stack(fleet_doc(namespace, host_port=address, workers=[worker]))
    # HPA's default scale-up policy would cap each step at max(+100 %, +4 pods) / 15 s.
    settings = {
        **FAST,
        "reconcile_interval": 2.0,
        "sampling": {"interval": 2.0},
        "autoscale": {"scale_up": {"policies": []}},
    }
    daemon = daemons.start(fs, settings=settings)
    wait_for_success(daemon)
    key = f"{namespace}/orders"

    def replicas() -> int:
        dep = kube.get_deployment(namespace, "orders")
        return -1 if dep is None else int(dep["spec"]["replicas"])

    eventually(lambda: replicas() == 1, timeout=60, message="the worker never deployed at min")

    ids = [f"wf-{uuid.uuid4().hex[:12]}" for _ in range(WORKFLOWS)]
    asyncio.run(_start(address, task_queue, ids))
    # Temporal's backlog statistics are approximate and lag the starts by a few
    # seconds; the clock starts when the server reports enough backlog for 5 replicas.
    eventually(
        lambda: math.ceil(asyncio.run(_backlog(address, task_queue)) / TARGET) == 5,
        timeout=60,
        interval=0.5,
        message="Temporal never reported the backlog",
    )
    visible = time.monotonic()
    ups_then = daemon.ups()

    eventually(
        lambda: replicas() == 5,
        timeout=SLACK,
        message="the backlog never raised replicas to ceil(200 / 40) = 5",
    )
    elapsed = time.monotonic() - visible
    seen = daemon.value("twc_task_queue_backlog", task_queue=task_queue)
    assert seen is not None
    assert math.ceil(seen / TARGET) == 5, seen
    assert daemon.value("twc_worker_desired_replicas", worker=key) == 5
    # The scale subresource, not the engine: no up started for it.
    assert daemon.ups() == ups_then, daemon.text()[-3000:]
    written = daemon.value("twc_scale_writes_total", result="written")
    assert written is not None
    assert written >= 1
    print(f"scaled to 5 replicas {elapsed:.1f} s after the backlog was visible")

    # Drain: terminate the workflows; pollers on the queue make the server discard their
    # tasks (nothing is dispatched for a closed workflow).
    asyncio.run(_terminate(address, ids))
    stop_polling = threading.Event()
    poller = threading.Thread(
        target=lambda: asyncio.run(_poll(address, task_queue, stop_polling)), daemon=True
    )
    poller.start()
    try:
        eventually(
            lambda: daemon.value("twc_task_queue_backlog", task_queue=task_queue) == 0,
            timeout=60,
            interval=0.1,
            message="the backlog never drained",
        )
        time.sleep(1.0)
        # The first empty samples recommend 1, but the window still holds the earlier
        # recommendation of 5: without stabilization this would already be 1.
        assert daemon.value("twc_worker_desired_replicas", worker=key) == 5
        assert replicas() == 5
        eventually(
            lambda: replicas() == 1,
            timeout=WINDOW + SLACK,
            message="draining the backlog never lowered replicas to min",
        )
    finally:
        stop_polling.set()
    assert daemon.ups() == ups_then, daemon.text()[-3000:]
    assert daemon.value("twc_worker_desired_replicas", worker=key) == 1
    assert daemon.count("twc_reconcile_errors_total") == 0
