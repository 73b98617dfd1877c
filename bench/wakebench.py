"""First task from zero, measured: one workflow on a worker with ``minReplicas: 0``
asleep at zero replicas, from starting it to its result, against the same workflow on
the same worker kept at one replica (``minReplicas: 1``), which is what a user would
otherwise run. Asleep, the task waits for the daemon's next backlog sample (the
``sampling.interval``), the scale write, the real scheduler placing the pod on a KWOK
node, and a real temporalio worker process started from the pod's env (the embedded
kubelet lists pods every second) polling. Before each asleep trial the worker is back at
zero with no pod left, then the harness waits a random part of the sampling interval, so
trials fall at every phase of it. The trial kinds are in random order."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import fleets
from bench.daemon import DaemonProcess
from bench.stacks import BenchStack
from bench.stats import summarize

log = logging.getLogger(__name__)

NAMESPACE = "bench-wake"
COOLDOWN = 20
"""``scaleDownStabilizationSeconds`` of both workers (the default is 300 s): a trial
needs the worker at zero again."""
SAMPLING_INTERVAL = 10.0
"""The daemon's default ``sampling.interval`` (KEDA's ``pollingInterval`` default: 30 s)."""
KINDS = {
    "asleep": "minReplicas 0, at zero replicas with no pod when the workflow starts",
    "awake": "minReplicas 1, its one worker process polling when the workflow starts",
}
"""The trial kinds (names as in the results), each on its own worker."""
ASLEEP = fleets.worker_name(0)
"""The worker that may sleep at zero (``fleets.worker_name(1)`` is kept awake)."""
STEPS = ("scaled", "running", "result")
"""Marks of an asleep trial: replicas ≥ 1 written, its pod Running, the result."""


class WakeStack(BenchStack):
    """Two workers: ``w-0000`` may sleep at zero, ``w-0001`` keeps one replica."""

    def document(self) -> dict[str, Any]:
        doc = super().document()
        for worker, floor in zip(doc["workers"], (0, 1), strict=True):
            worker.pop("replicas", None)
            worker["autoscaling"] = {
                **fleets.AUTOSCALING,
                "minReplicas": floor,
                "maxReplicas": 2,
                "scaleDownStabilizationSeconds": COOLDOWN,
            }
        return doc


def wake_stack(workdir: Any, address: str) -> WakeStack:
    """The stack of this figure (unsharded, no cluster objects)."""
    return WakeStack(
        n=2,
        name="bench-wake",
        fleet_file=workdir / "fleet-bench-wake.yaml",
        host_port=address,
        namespaces=(NAMESPACE,),
        per_shard=None,
        autoscale=True,
        cluster_objects=False,
    )


def _replicas(kube: Any, name: str) -> int:
    dep = kube.apps.read_namespaced_deployment(name, NAMESPACE)
    return int(dep.spec.replicas)


def _pods(kube: Any, name: str) -> list[dict[str, Any]]:
    from twc.local.workerpod import list_pods

    return list_pods(kube, NAMESPACE, f"twc.temporal.io/worker={name}")


def _wait(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout:.0f} s")
        time.sleep(0.05)


async def _one(kube: Any, address: str, index: int, marks: dict[str, float]) -> float:
    """Start one EchoWorkflow on worker ``index``'s task queue; seconds to its result,
    marking (asleep) when its replicas were written and its pod was Running."""
    from temporalio.client import Client

    from twc.local.workerpod import is_running

    client = await Client.connect(address)
    start = time.perf_counter()
    handle = await client.start_workflow(
        "EchoWorkflow", "hi", id=f"wake-{uuid.uuid4().hex}", task_queue=fleets.task_queue(index)
    )
    result = asyncio.ensure_future(handle.result())
    name = fleets.worker_name(index)
    while not result.done():
        now = time.perf_counter()
        if "scaled" not in marks and await asyncio.to_thread(_replicas, kube, name) >= 1:
            marks["scaled"] = now - start
        if (
            "scaled" in marks
            and "running" not in marks
            and any(is_running(p) for p in await asyncio.to_thread(_pods, kube, name))
        ):
            marks["running"] = now - start
        await asyncio.wait([result], timeout=0.05)
    text = str(result.result())
    if "(from w-" not in text:
        raise ValueError(f"the result came from no pod of the worker: {text}")
    marks["result"] = time.perf_counter() - start
    return marks["result"]


def measure_wake_from_zero(
    kube: Any,
    daemon: DaemonProcess,
    address: str,
    *,
    trials: int,
    rng: random.Random,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """``trials`` workflows of each kind; stops ``daemon`` at the end."""
    from twc.local.podworkers import PodWorkers

    latencies: dict[str, list[float]] = {k: [] for k in KINDS}
    steps: dict[str, list[float]] = {s: [] for s in STEPS}
    kinds = list(KINDS) * trials
    rng.shuffle(kinds)
    runner = PodWorkers(kube, namespace=NAMESPACE).start()
    try:
        _wait(lambda: any(_pods(kube, fleets.worker_name(1))), 600, "the awake worker's pod")
        for step, kind in enumerate(kinds):
            index = 0 if kind == "asleep" else 1
            if kind == "asleep":
                _wait(
                    lambda: _replicas(kube, ASLEEP) == 0 and not _pods(kube, ASLEEP),
                    900,
                    "zero",
                )
                time.sleep(rng.uniform(0, SAMPLING_INTERVAL))
            marks: dict[str, float] = {}
            seconds = asyncio.run(_one(kube, address, index, marks))
            latencies[kind].append(seconds)
            for key in STEPS if kind == "asleep" else ():
                steps[key].append(marks[key])
            progress(f"first task {step + 1}/{len(kinds)}: {kind}: {seconds:.1f} s")
    finally:
        runner.stop()
        daemon.stop()
    return {
        "kinds": KINDS,
        "latency_s": {kind: summarize(values) for kind, values in latencies.items()},
        "asleep_steps_s": {key: summarize(values) for key, values in steps.items()},
        "sampling_interval_s": SAMPLING_INTERVAL,
        "cooldown_s": COOLDOWN,
    }
