"""Scale to zero without flapping (``minReplicas: 0``) on the real daemon, Temporal and
controllers, with a real temporalio worker per pod.

A worker that may scale to zero wakes on its first workflow (its backlog over
``activationBacklog``). Bursts of workflows then come with gaps shorter than the
scale-down window (the cool-down): their tasks go straight to the polling worker and
leave no backlog, yet the worker is never scaled to zero between them, since a queue
with tasks added or dispatched lately counts as busy. An activity running long on the
worker leaves no backlog and, after Temporal's 30 s, no task rate, yet keeps the worker
up well past the cool-down. Its workflow then waits for a signal: that needs no worker,
so the worker is scaled to zero once, the workflow still open; the signal wakes it and
the workflow completes on the woken worker. After a real idle period it is scaled to
zero once more, and its TemporalWorker's status says why (``scalingReason:
BelowActivation``).

Differs from a production cluster: backlogs sampled every second, a 20 s cool-down.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success
from tests.e2e.native import Kubectl, Kubelet
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

ONE_UP = 180.0
BURSTS = 5
GAP = 6  # daemon iterations between bursts (one a second): under the 20 s cool-down
HOLD = 60  # iterations watched while an activity runs: past Temporal's 30 s and the cool-down
HOLD_SECONDS = 90.0  # how long that activity runs


async def _burst(address: str, task_queue: str) -> list[str]:
    client = await Client.connect(address)
    handles = [
        await client.start_workflow(
            "EchoWorkflow", "hi", id=f"burst-{uuid.uuid4().hex}", task_queue=task_queue
        )
        for _ in range(3)
    ]
    return [await h.result() for h in handles]


async def _held_then_waiting(address: str, task_queue: str) -> str:
    client = await Client.connect(address)
    handle = await client.start_workflow(
        "WaitWorkflow", HOLD_SECONDS, id=f"open-{uuid.uuid4().hex}", task_queue=task_queue
    )
    return handle.id


async def _finish(address: str, workflow_id: str) -> None:
    handle = (await Client.connect(address)).get_workflow_handle(workflow_id)
    await handle.signal("finish")
    await handle.result()  # completed, on a worker that polls again


class Replicas(threading.Thread):
    """Every ``spec.replicas`` the Deployment shows, read four times a second."""

    def __init__(self, kube: Any, namespace: str, name: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace, self.name = kube, namespace, name
        self.seen: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            dep = self.kube.get_deployment(self.namespace, self.name)
            count = int(dep["spec"]["replicas"]) if dep is not None else -1
            if not self.seen or self.seen[-1] != count:
                self.seen.append(count)

    def zeros(self) -> int:
        """How often it went to 0 (from a positive count)."""
        return sum(1 for a, b in zip(self.seen, self.seen[1:], strict=False) if a > 0 and b == 0)


def test_bursts_and_a_running_activity_keep_a_worker_up_and_nothing_running_lets_it_sleep(
    local_env: LocalEnvironment, kube: Any, namespace: str, task_queue: str, daemons: Daemons
) -> None:
    address = local_env.temporal_address()
    worker = {
        "name": "burst",
        "namespace": namespace,
        "taskQueueName": task_queue,
        "autoscaling": {
            "minReplicas": 0,
            "maxReplicas": 2,
            "targetBacklogPerReplica": 5,
            "scaleDownStabilizationSeconds": 20,
        },
    }
    fs = daemons.stack(fleet_doc(namespace, host_port=address, workers=[worker]))
    with Kubelet(kube, namespace, "burst") as kubelet:
        daemon = daemons.start(fs, settings=FAST)
        eventually(
            lambda: (
                (dep := kube.get_deployment(namespace, "burst")) is not None
                and dep["spec"]["replicas"] == 0
            ),
            timeout=ONE_UP,
            message=lambda: f"the worker never started at zero:\n{daemon.text()[-3000:]}",
        )
        # The first workflow wakes it from zero; its result comes from the woken worker.
        results = asyncio.run(_burst(address, task_queue))
        assert all("(from burst-" in r for r in results), results

        replicas = Replicas(kube, namespace, "burst")
        replicas.start()
        try:
            for _ in range(BURSTS):
                wait_for_success(daemon, after=daemon.successes() + GAP)
                assert len(asyncio.run(_burst(address, task_queue))) == 3
            assert replicas.zeros() == 0, replicas.seen
            assert replicas.seen[-1] >= 1, replicas.seen
            # An activity in flight holds it up, long past the cool-down.
            waiting = asyncio.run(_held_then_waiting(address, task_queue))
            wait_for_success(daemon, after=daemon.successes() + HOLD, timeout=ONE_UP)
            assert replicas.zeros() == 0, replicas.seen
            # Its workflow then waits for a signal, open: the worker sleeps all the same.
            eventually(
                lambda: replicas.seen[-1] == 0,
                timeout=ONE_UP,
                message=f"never slept under a waiting workflow: {replicas.seen}",
            )
            # Its pod gone (a terminating one could still take the task), the signal wakes
            # it from zero; the workflow completes on the woken worker.
            eventually(
                lambda: not kubelet.running(),
                timeout=ONE_UP,
                message="the sleeping worker's process never ended",
            )
            asyncio.run(_finish(address, waiting))
            assert replicas.seen[-1] >= 1, replicas.seen
            assert replicas.zeros() == 1, replicas.seen
            # Idle for real: scaled to zero once the cool-down saw no work at all.
            eventually(
                lambda: replicas.seen[-1] == 0,
                timeout=ONE_UP,
                message=lambda: f"never scaled to zero: {replicas.seen}\n{daemon.text()[-3000:]}",
            )
            wait_for_success(daemon, after=daemon.successes() + GAP)
            assert replicas.zeros() == 2, replicas.seen
            # Its TemporalWorker says why: asleep, below the activation backlog.
            view = Kubectl(local_env).get_json("temporalworker", "burst", "-n", namespace)
            assert (view or {}).get("status", {}).get("scalingReason") == "BelowActivation"
        finally:
            replicas.stop.set()
            replicas.join()
