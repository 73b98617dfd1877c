"""The figures of one fleet size, each measured on the real parts.

Every figure is a list of trials in random order (the workers, shards and namespaces a
trial touches are drawn from a seeded generator); what a trial measures is said where
it is measured. The harness only reads clocks here and in :mod:`bench.timing`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from bench import fleets
from bench.daemon import DaemonProcess
from bench.procs import (
    CpuShare,
    Part,
    StateWrites,
    TreeMemory,
    cpu_seconds,
    peak_rss_mb,
    wait,
)
from bench.report import QUEUE_STEPS
from bench.stacks import BenchStack
from bench.stats import summarize

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


# --------------------------------------------------------------------- helpers
def _deployment(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = kube.get_deployment(namespace, name)
    return found


def _rolled_out(dep: dict[str, Any] | None, generation: int, image: str) -> bool:
    """The Deployment's new pod template is Available: the rollout finished."""
    if dep is None:
        return False
    meta, spec, status = dep["metadata"], dep["spec"], dep.get("status") or {}
    containers = spec["template"]["spec"]["containers"]
    if int(meta.get("generation") or 0) <= generation or containers[0].get("image") != image:
        return False
    replicas = int(spec.get("replicas") or 0)
    available = any(
        c.get("type") == "Available" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return (
        int(status.get("observedGeneration") or 0) >= int(meta["generation"])
        and int(status.get("updatedReplicas") or 0) >= replicas
        and int(status.get("availableReplicas") or 0) >= replicas
        and available
    )


_T = TypeVar("_T")

_TRANSIENT = ("NOT_FOUND", "UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED")
"""Answers of a loaded dev server that go away when asked again: it has answered
``Namespace default is not found`` for a moment under load, which ended a stage."""


async def _retried(call: Callable[[], Awaitable[_T]], attempts: int = 5) -> _T:
    """``call()``, asked again (with a growing pause) while its error is transient."""
    from temporalio.service import RPCError

    for attempt in range(attempts):
        try:
            return await call()
        except RPCError as exc:
            if attempt == attempts - 1 or exc.status.name not in _TRANSIENT:
                raise
            log.warning("the harness's Temporal call failed (%s); asking again", exc)
            await asyncio.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _worker_marks(pod: Any, started: float, started_wall: float) -> dict[str, float]:
    """The steps the worker process printed as it started, on the figure's clock
    (``started``/``started_wall``: the same moment on both clocks).

    Raises:
        ValueError: The worker did not print one of them (a trial without its steps is
            a failed trial, never one whose steps read as 0).
    """
    from twc.local.workerpod import marks

    printed = marks(pod.log_text())
    missing = [step for step in ("imported", "connected", "built") if step not in printed]
    if missing:
        raise ValueError(f"the worker process printed no mark for {', '.join(missing)}")
    return {step: started + (wall - started_wall) for step, wall in printed.items()}


class _Temporal:
    """One temporalio client on an event loop of its own thread, for a figure that asks
    Temporal every 50 ms from several trials at once: a connection per question would
    cost the loaded machine more than the question, and add its own wait to the trial."""

    def __init__(self, address: str) -> None:
        from temporalio.client import Client

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.client = self.run(Client.connect(address))

    def run(self, coro: Awaitable[_T], timeout: float = 120) -> _T:
        async def wrapped() -> _T:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrapped(), self._loop).result(timeout)

    def pollers(self, task_queue: str) -> int:
        """How many pollers Temporal lists on the task queue's workflow tasks."""
        return self.run(_pollers(self.client, task_queue))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


async def _pollers(client: Any, task_queue: str) -> int:
    """How many pollers a task queue's workflow tasks have (no statistics asked for:
    they cost Temporal more and this figure does not read them)."""
    from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace="default",
        task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    response = await _retried(lambda: client.workflow_service.describe_task_queue(request))
    return len(response.pollers)


async def _start_workflows(address: str, task_queue: str, count: int) -> list[str]:
    from temporalio.client import Client

    client = await Client.connect(address)
    ids = [f"bench-{uuid.uuid4().hex[:12]}" for _ in range(count)]

    async def start(workflow_id: str) -> Any:
        return await client.start_workflow(
            "EchoWorkflow", "hi", id=workflow_id, task_queue=task_queue
        )

    await asyncio.gather(*(_retried(functools.partial(start, i)) for i in ids))
    return ids


async def _terminate(address: str, ids: list[str]) -> None:
    from temporalio.client import Client

    client = await Client.connect(address)
    await asyncio.gather(
        *(client.get_workflow_handle(i).terminate("bench") for i in ids), return_exceptions=True
    )


# ------------------------------------------------------------ one-worker change
def one_worker_change(
    stack: BenchStack,
    daemon: DaemonProcess,
    kube: Any,
    *,
    trials: int,
    rng: random.Random,
    backend_dir: Any,
    progress: Progress,
) -> dict[str, Any]:
    """A new image for one worker until its new Deployment is Available.

    The daemon runs as ``twc run`` does; each trial edits the fleet file (one worker,
    drawn at random among the non-autoscaled ones, so a random shard) and waits for the
    rollout to finish (the new pod template Available). Measured alongside: bytes
    written to the changed shard's state files, the engine processes' peak memory.
    """
    candidates = [i for i in range(stack.n) if not fleets.autoscaled(i, stack.namespaces, stack.n)]
    picks = rng.sample(candidates, k=min(trials, len(candidates)))
    latencies: list[float] = []
    written: list[int] = []
    memory: list[dict[str, Any]] = []
    runs: list[float] = []
    for trial, index in enumerate(picks):
        namespace = fleets.worker_namespace(index, stack.namespaces)
        name = fleets.worker_name(index)
        before = _deployment(kube, namespace, name)
        generation = int(before["metadata"]["generation"]) if before else 0
        writes = StateWrites(backend_dir, stack.stack_of(index)).start() if backend_dir else None
        engine_memory = TreeMemory(daemon.pid).start()
        engine_before = daemon.engine_runs()
        stack.write(changed=index)
        image = f"{fleets.IMAGE}-r{stack.revisions[index]}"
        start = time.perf_counter()

        def rolled_out(
            ns: str = namespace, w: str = name, g: int = generation, i: str = image
        ) -> bool:
            return _rolled_out(_deployment(kube, ns, w), g, i)

        wait(rolled_out, 900)
        latencies.append(time.perf_counter() - start)
        daemon.wait_idle(timeout=900)
        memory.append(engine_memory.stop())
        runs.append(daemon.engine_runs() - engine_before)
        if writes is not None:
            written.append(writes.stop()["bytes"])
        progress(
            f"N={stack.n} one-worker change {trial + 1}/{len(picks)} ({stack.stack_of(index)}): "
            f"{latencies[-1]:.1f} s"
        )
    return {
        "latency_s": summarize(latencies),
        "engine_runs_per_change": summarize(runs),
        "state_bytes_per_change": summarize([float(b) for b in written]) if written else None,
        "engine_peak_total_mb": max((m["peak_total_mb"] for m in memory), default=None),
        "engine_peak_process_mb": max((m["peak_process_mb"] for m in memory), default=None),
        "engine_peak_by_name_mb": _max_by_name(memory),
        "engine_unexeced_samples": sum(m["unexeced"] for m in memory),
    }


def pulumi_up_change(
    stack: BenchStack, kube: Any, *, trials: int, rng: random.Random, progress: Progress
) -> dict[str, Any]:
    """The baseline of a one-worker change: what a user without twc's daemon runs, a
    plain ``pulumi up`` of the whole fleet as one stack after the edit, until the new
    Deployment is Available (no daemon runs)."""
    from twc.cli import common
    from twc.engine import engine

    ref = common.stack_ref(stack.name, str(stack.fleet_file))
    candidates = [i for i in range(stack.n) if not fleets.autoscaled(i, stack.namespaces, stack.n)]

    def up() -> None:
        result = engine.select_stack(ref).up(color="never")
        if result.summary.result != "succeeded":
            raise RuntimeError(f"pulumi up of {stack.name}: {result.summary.result}")

    latencies: list[float] = []
    for trial, index in enumerate(rng.sample(candidates, k=min(trials, len(candidates)))):
        latencies.append(change_until_available(stack, kube, index, then=up))
        progress(f"N={stack.n} pulumi up {trial + 1}/{trials}: {latencies[-1]:.1f} s")
    return {"latency_s": summarize(latencies)}


def change_until_available(
    stack: BenchStack, kube: Any, index: int, then: Callable[[], None] = lambda: None
) -> float:
    """Seconds from a new image for the ``index``-th worker in the fleet file (and
    ``then``, run right after the edit) to its new Deployment being Available."""
    namespace = fleets.worker_namespace(index, stack.namespaces)
    name = fleets.worker_name(index)
    before = _deployment(kube, namespace, name)
    generation = int(before["metadata"]["generation"]) if before else 0
    stack.write(changed=index)
    image = f"{fleets.IMAGE}-r{stack.revisions[index]}"
    start = time.perf_counter()
    then()
    wait(lambda: _rolled_out(_deployment(kube, namespace, name), generation, image), 900)
    return time.perf_counter() - start


def _max_by_name(memory: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for sample in memory:
        for name, mb in sample["peak_by_name_mb"].items():
            out[name] = max(out.get(name, 0.0), mb)
    return dict(sorted(out.items()))


# --------------------------------------------------------------- backlog burst
def _burst_samples(daemon: DaemonProcess, queue: str, replicas: int, target: int) -> set[float]:
    """The Unix times of the daemon's samples of ``queue`` that ask for more than
    ``replicas`` (value and time from one read of ``/metrics``)."""
    metrics = daemon.metrics()

    def one(name: str) -> float | None:
        found = [v for labels, v in metrics.get(name, []) if labels.get("task_queue") == queue]
        return found[0] if found else None

    value = one("twc_task_queue_backlog")
    sampled_at = one("twc_task_queue_backlog_sampled_at_seconds")
    if value is None or sampled_at is None or math.ceil(value / target) <= replicas:
        return set()
    return {sampled_at}


class ReplicasChange:
    """When the API server's watch first shows a Deployment with other replicas.

    The Unix time the event arrived, to the millisecond: a poll would round the moment up
    to its interval, longer than the figure it is for.
    """

    def __init__(self, kube: Any, namespace: str, name: str, replicas: int) -> None:
        """Watch ``namespace/name`` from now on for replicas other than these.

        The watch starts at the resourceVersion of a list (the store's version now); the
        Deployment's own one can be older than the API server's watch window, and the
        watch then ends at once with 410 Gone (a full run lost its backlog figure so).
        """
        selector = f"metadata.name={name}"
        listed = kube.apps.list_namespaced_deployment(namespace, field_selector=selector)
        if [d.spec.replicas for d in listed.items] != [replicas]:
            raise RuntimeError(f"{namespace}/{name}: replicas changed before the burst")
        self._args = (kube, namespace, name, replicas, listed.metadata.resource_version)
        self._at: float | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bench-replicas", daemon=True)

    def start(self) -> ReplicasChange:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> float:
        """The Unix time of the change; raises if the watch did not see one in time."""
        if not self._done.wait(timeout):
            raise TimeoutError("the Deployment's watch showed no replica change")
        if self._at is None:
            raise RuntimeError(f"the Deployment's watch ended without the change: {self._error}")
        return self._at

    def _watch(self) -> None:
        from kubernetes import watch

        kube, namespace, name, replicas, resource_version = self._args
        stream = watch.Watch()
        try:
            for event in stream.stream(
                kube.apps.list_namespaced_deployment,
                namespace,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                timeout_seconds=330,
            ):
                arrived = time.time()
                if event["type"] == "ERROR":
                    raise RuntimeError(f"the watch failed: {event['raw_object']}")
                if (event["object"].spec.replicas or 0) != replicas:
                    self._at = arrived
                    stream.stop()
                    break
        except Exception as exc:  # noqa: BLE001 - reported by wait()
            self._error = exc
        finally:
            self._done.set()


def backlog_to_replicas(
    stack: BenchStack,
    daemon: DaemonProcess,
    kube: Any,
    address: str,
    *,
    trials: int,
    rng: random.Random,
    workflows: int,
    progress: Progress,
) -> dict[str, Any]:
    """A burst of workflows on an autoscaled worker's queue until its replicas change.

    Three moments per trial: the burst (the workflows started), the daemon's sample that
    showed it (``twc_task_queue_backlog_sampled_at_seconds`` beside a backlog that asks
    for more replicas: the moment the daemon knew), and the replicas changed in the API
    server (the arrival of the Deployment's watch event). The harness reads the metrics
    every 50 ms, but the sample's own time comes with its value, so a sample and a scale
    that fall between two reads are timed all the same. The ``up``s started meanwhile are
    counted (the scale subresource needs none), and apart from them the refreshes, which
    run on their own schedule in whichever shard is due and have nothing to do with the
    burst.
    """
    autoscaled = [i for i in range(stack.n) if fleets.autoscaled(i, stack.namespaces, stack.n)]
    picks = rng.sample(autoscaled, k=min(trials, len(autoscaled)))
    burst_s: list[float] = []
    sample_s: list[float] = []
    runs: list[float] = []
    refreshes: list[float] = []
    target = fleets.AUTOSCALING["targetBacklogPerReplica"]
    unsampled = 0
    for trial, index in enumerate(picks):
        namespace = fleets.worker_namespace(index, stack.namespaces)
        name = fleets.worker_name(index)
        queue = fleets.task_queue(index)
        before = _deployment(kube, namespace, name)
        if before is None:
            raise RuntimeError(f"N={stack.n}: Deployment {namespace}/{name} is missing")
        replicas = int(before["spec"].get("replicas") or 1)
        changed = ReplicasChange(kube, namespace, name, replicas).start()
        ups_before = daemon.engine_runs("up")
        refreshes_before = daemon.engine_runs("refresh")
        start = time.perf_counter()
        ids = asyncio.run(_start_workflows(address, queue, workflows))
        showed: set[float] = set()

        def seen(
            queue: str = queue,
            showed: set[float] = showed,
            replicas: int = replicas,
            namespace: str = namespace,
            name: str = name,
        ) -> bool:
            showed.update(_burst_samples(daemon, queue, replicas, target))
            dep = _deployment(kube, namespace, name)
            return dep is not None and int(dep["spec"].get("replicas") or 0) != replicas

        wait(seen, 300, interval=0.05)
        done = time.perf_counter()
        burst_s.append(done - start)
        showed.update(_burst_samples(daemon, queue, replicas, target))
        changed_at = changed.wait(timeout=30)
        before_change = [t for t in showed if t <= changed_at]
        if before_change:
            sample_s.append(changed_at - max(before_change))
        else:
            # Only if a newer sample replaced the one that scaled within one 50 ms read:
            # counted, never guessed.
            unsampled += 1
        runs.append(daemon.engine_runs("up") - ups_before)
        refreshes.append(daemon.engine_runs("refresh") - refreshes_before)
        asyncio.run(_terminate(address, ids))
        progress(
            f"N={stack.n} backlog → replicas {trial + 1}/{len(picks)}: {burst_s[-1]:.1f} s "
            f"after the burst, "
            f"{f'{sample_s[-1] * 1000:.1f} ms' if before_change else 'unknown'} after the sample, "
            f"{runs[-1]:.0f} ups ({refreshes[-1]:.0f} refreshes on their schedule)"
        )
    return {
        "burst_to_replicas_s": summarize(burst_s),
        "sample_to_replicas_s": summarize(sample_s),
        "trials_without_sample": unsampled,
        "up_runs": summarize(runs),
        "refresh_runs": summarize(refreshes),
        "workflows": workflows,
    }


# --------------------------------------------------------- Queue → polling worker


def _first_running_pod(
    kube: Any, namespace: str, deployment: str, marks: dict[str, float], timeout: float
) -> dict[str, Any]:
    """The Deployment's first Running pod, looking every 50 ms; meanwhile ``marks``
    gets the moments a pod of it was first listed and first on a node."""
    from twc.local.workerpod import is_running, list_pods

    deadline = time.monotonic() + timeout
    selector: str | None = None
    while True:
        if selector is None:
            dep = _deployment(kube, namespace, deployment)
            if dep is not None:
                labels = dep["spec"]["selector"].get("matchLabels") or {}
                selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        pods = list_pods(kube, namespace, selector) if selector else []
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        now = time.perf_counter()
        if live:
            marks.setdefault("pod", now)
        if any((p.get("spec") or {}).get("nodeName") for p in live):
            marks.setdefault("scheduled", now)
        running = sorted((p for p in live if is_running(p)), key=lambda p: p["metadata"]["name"])
        if running:
            marks["running"] = now
            return running[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no Running pod of {namespace}/{deployment} in {timeout:.0f} s")
        time.sleep(0.05)


def queue_to_polling(
    stack: BenchStack,
    daemon: DaemonProcess,
    kube: Any,
    address: str,
    *,
    trials: int,
    rng: random.Random,
    mean_gap_s: float,
    busy: Callable[[], None] | None,
    progress: Progress,
    tag: str = "",
    processes: dict[str, int | tuple[int, Part]] | None = None,
) -> dict[str, Any]:
    """Labelled Queues arriving at random (exponential gaps) until each one's worker
    polls its task queue.

    When a new worker's pod is Running (the real scheduler, a KWOK node), a real
    temporalio worker process starts from the pod's own env (``WorkerPod``).
    Meanwhile ``busy`` keeps the daemon busy (one-worker changes in other shards), and
    refreshes run on the daemon's schedule. Each trial also records when it passed each
    of :data:`QUEUE_STEPS` (looking every 50 ms), and ``processes`` (name → pid) whose
    CPU time over the figure is read, with the worker processes' and the share of all
    cores busy: where the time goes, and who had the cores meanwhile.
    """
    from twc.local.workerpod import WorkerPod

    latencies: list[float] = []
    deployment_s: list[float] = []
    answers: list[float] = []
    steps: dict[str, list[float]] = {key: [] for key, _ in QUEUE_STEPS}
    errors: list[str] = []
    pods: list[Any] = []
    lock = threading.Lock()
    temporal = _Temporal(address)
    refresh_before = daemon.value("twc_engine_runs_total", operation="refresh") or 0.0
    stop_busy = threading.Event()
    busy_thread = None
    if busy is not None:

        def keep_busy() -> None:
            while not stop_busy.is_set():
                try:
                    busy()
                except Exception as exc:  # noqa: BLE001 - the busy load is not a figure
                    log.warning("busy load: %s", exc)
                stop_busy.wait(2.0)

        busy_thread = threading.Thread(target=keep_busy, daemon=True)
        busy_thread.start()

    def one(name: str, namespace: str) -> None:
        created = time.perf_counter()
        kube.custom.create_namespaced_custom_object(
            "kmsvc.io", "v1", namespace, "queues", fleets.queue_object(name, namespace)
        )
        worker = f"worker-{name}"
        marks: dict[str, float] = {}
        try:
            wait(lambda: _deployment(kube, namespace, worker) is not None, 600, interval=0.05)
            marks["deployment"] = time.perf_counter()
            # Scheduled by the real scheduler, Running on a KWOK node: its worker
            # process starts from the pod's own env.
            pod = WorkerPod(kube, _first_running_pod(kube, namespace, worker, marks, 600))
            pod.start()
            marks["started"], started_wall = time.perf_counter(), time.time()
            with lock:
                pods.append(pod)
            asked: list[float] = []

            def listed() -> bool:
                asked.append(time.perf_counter())
                return temporal.pollers(name) > 0

            wait(listed, 600, interval=0.05)
            marks["polling"] = time.perf_counter()
            answer = marks["polling"] - asked[-1]
            marks.update(_worker_marks(pod, marks["started"], started_wall))
        except Exception as exc:  # noqa: BLE001 - a failed trial is recorded, the others go on
            with lock:
                errors.append(f"{namespace}/{name}: {exc}")
            return
        done = marks["polling"]
        with lock:
            latencies.append(done - created)
            deployment_s.append(marks["deployment"] - created)
            answers.append(answer)
            before = created
            for key, _ in QUEUE_STEPS:
                steps[key].append(marks[key] - before)
                before = marks[key]
        progress(f"N={stack.n} Queue → polling{tag} {namespace}/{name}: {done - created:.2f} s")

    threads: list[threading.Thread] = []
    created: list[tuple[str, str]] = []
    cpu = CpuShare(dict(processes or {})).start()
    cpu_reading: dict[str, Any] | None = None
    try:
        for trial in range(trials):
            namespace = rng.choice(stack.namespaces)
            name = f"q{tag.strip('-')}{trial:02d}-{uuid.uuid4().hex[:4]}"
            created.append((namespace, name))
            thread = threading.Thread(target=one, args=(name, namespace), daemon=True)
            thread.start()
            threads.append(thread)
            time.sleep(rng.expovariate(1.0 / mean_gap_s))
        for thread in threads:
            thread.join(timeout=900)
        workers = [cpu_seconds(p.proc.pid, "own") for p in pods if p.proc is not None]
        known = [w for w in workers if w is not None]
        cpu_reading = cpu.stop({"worker processes": sum(known)} if known else None)
    finally:
        stop_busy.set()
        if busy_thread is not None:
            busy_thread.join(timeout=900)
        temporal.close()
        for pod in pods:
            pod.stop()
        for namespace, name in created:
            # Gone again: the daemon deletes their workers (the next settle waits).
            try:
                kube.custom.delete_namespaced_custom_object(
                    "kmsvc.io", "v1", namespace, "queues", name
                )
            except Exception as exc:  # noqa: BLE001 - a leftover Queue is only logged
                log.warning("could not delete Queue %s/%s: %s", namespace, name, exc)
        for namespace, name in created:

            def gone(ns: str = namespace, worker: str = f"worker-{name}") -> bool:
                return _deployment(kube, ns, worker) is None

            try:
                wait(gone, 900)
            except TimeoutError:
                log.warning("the worker of Queue %s/%s was never deleted", namespace, name)
    refreshes = (daemon.value("twc_engine_runs_total", operation="refresh") or 0.0) - refresh_before
    return {
        "latency_s": summarize(latencies),
        "deployment_s": summarize(deployment_s),
        "steps_s": {key: summarize(values) for key, values in steps.items()},
        "answer_s": summarize(answers),
        "cpu": cpu_reading,
        "mean_gap_s": mean_gap_s,
        "refreshes_during": refreshes,
        "busy": busy is not None,
        "errors": errors,
    }


# ------------------------------------------------------------ no-op iteration
def _loops(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each loop's part of ``twc run``'s ``/status`` (every shard's, or the one loop's)."""
    loops = status.get("shards") or ({status["stack"]: status} if "stack" in status else {})
    if not loops:
        raise RuntimeError(f"/status names no loop: {sorted(status)}")
    return dict(loops)


def _last_iterations(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each loop's ``lastIteration`` from ``twc run``'s ``/status``."""
    return {stack: loop.get("lastIteration") or {} for stack, loop in _loops(status).items()}


def _woken(status: dict[str, Any], before: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each loop's first iteration after ``before`` (its ``lastIteration`` then), from
    ``/status``'s ``recentIterations``; a loop whose one has left that history is missing."""
    out = {}
    for stack, loop in _loops(status).items():
        number = before.get(stack, {}).get("number", 0) + 1
        for it in loop["recentIterations"]:
            if it["number"] == number:
                out[stack] = it
    return out


def wait_settled(kube: Any, stack: BenchStack) -> float:
    """Seconds until every worker's TemporalWorker shows its task queue checked, plus a
    few for those last writes' watch events to reach every loop. Until then the daemon
    still writes statuses as the answers come (iterations with work, not no-ops)."""
    settle = wait(lambda: _settled(kube, stack), 600, 2.0)
    time.sleep(5.0)
    return settle


def _settled(kube: Any, stack: BenchStack) -> bool:
    found = kube.custom.list_cluster_custom_object("temporal.kmsvc.io", "v1", "temporalworkers")
    checked = [
        obj
        for obj in found.get("items") or []
        if obj["metadata"]["namespace"] in stack.namespaces
        and any(
            c.get("type") == "TemporalTaskQueueRegistered" and c.get("reason") != "NotChecked"
            for c in (obj.get("status") or {}).get("conditions") or ()
        )
    ]
    return len(checked) >= stack.n


def noop_iteration(
    stack: BenchStack, daemon: DaemonProcess, *, trials: int, progress: Progress
) -> dict[str, Any]:
    """The running ``twc run``'s own iterations with nothing to do, timed inside it (once
    it settled: :func:`wait_settled`).

    Each trial sends the daemon SIGHUP, which wakes every shard's loop at once (a touch of
    the fleet file wakes none: no namespace's part changed); each finds nothing to do.
    Each loop's ``/status`` says how long its last iteration took (``lastIteration``: wall
    and thread CPU seconds, when it ended).
    A trial is dropped (and counted) when a loop did not iterate within a minute or its
    iteration failed. *All shards* is a trial's span from the first shard's start to the
    last one's end (the shards' loops run in parallel threads). Backlog samples and poller
    counts keep their own schedules, so most iterations reuse them; the p95 and max
    include those that did not. Each loop's woken iteration is its first after the SIGHUP
    (``recentIterations``: a loop may have iterated again before the read, when a sample
    came due or an answer woke it); one that left that history is left out of the
    per-shard figures and its trial out of the span (both counted).
    """
    per_shard: list[float] = []
    per_shard_cpu: list[float] = []
    rounds: list[float] = []
    dropped = again = spans_left_out = 0
    for _ in range(trials):
        before = _last_iterations(daemon.status())
        os.kill(daemon.pid, signal.SIGHUP)  # every loop wakes with nothing to do
        time.sleep(1.5)  # /status is read after the iterations, not during

        def iterated(b: dict[str, dict[str, Any]] = before) -> bool:
            return _advanced(b, _last_iterations(daemon.status()))

        try:
            wait(iterated, 60, 0.5)
        except TimeoutError:
            dropped += 1
            continue
        woken = _woken(daemon.status(), before)
        if not all(it.get("ok") for it in woken.values()):
            dropped += 1
            continue
        again += len(before) - len(woken)
        per_shard += [it["seconds"] for it in woken.values()]
        per_shard_cpu += [it["cpuSeconds"] for it in woken.values()]
        if len(woken) < len(before):
            spans_left_out += 1
            continue
        starts = [it["endedAt"] - it["seconds"] for it in woken.values()]
        rounds.append(max(it["endedAt"] for it in woken.values()) - min(starts))
    if not per_shard or not rounds:
        raise RuntimeError(f"no no-op trial left ({dropped} dropped, {spans_left_out} spans)")
    progress(
        f"N={stack.n} no-op iteration: p50 {summarize(per_shard)['p50'] * 1000:.1f} ms per "
        f"shard (CPU {summarize(per_shard_cpu)['p50'] * 1000:.1f} ms), "
        f"{summarize(rounds)['p50'] * 1000:.1f} ms for all shards, {dropped} dropped, "
        f"{again} loop iterations and {spans_left_out} spans left out (out of the history)"
    )
    return {
        "per_shard_s": summarize(per_shard),
        "per_shard_cpu_s": summarize(per_shard_cpu),
        "all_shards_s": summarize(rounds),
        "shards": len(_last_iterations(daemon.status())),
        "dropped": dropped,
        "iterated_again": again,
        "spans_left_out": spans_left_out,
    }


def _advanced(before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> bool:
    """Whether every loop iterated since ``before``."""
    return all(it.get("number", 0) > before.get(k, {}).get("number", 0) for k, it in now.items())


def daemon_memory(daemon: DaemonProcess) -> dict[str, float | None]:
    """The daemon process's peak resident set so far (its own, not the engine's)."""
    return {"daemon_peak_rss_mb": peak_rss_mb(daemon.pid)}
