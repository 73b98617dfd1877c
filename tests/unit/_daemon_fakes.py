"""Fakes for the daemon loop's unit tests: engine, clock, backlogs, a fleet builder.

The loop gets every outside collaborator injected; these stand in for them so a test
can drive iterations on virtual time and count exactly what reached the "engine".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any

from twc.connections import default_registry
from twc.desired import (
    QUEUE_KIND_KEY,
    DesiredFleet,
    DesiredInputs,
    ObjectList,
    desired_fleet,
    kind_key,
)
from twc.engine.automation import UpReport
from twc.engine.errors import EngineYielded
from twc.kube.watch import NativeSnapshot, StaticQueues
from twc.kube.workloads import ObjectRef
from twc.reconcile.act import Effects
from twc.reconcile.asking import AskerThread, Backlog, Budget, TaskQueueRef
from twc.reconcile.daemon import Clocks, Daemon
from twc.reconcile.health import DaemonMetrics
from twc.reconcile.observe import Sources
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import LoopState
from twc.spec import Fleet, ResolvedWorker, load_fleet
from twc.spec.crds import WORKER_GROUP

STACK = "unit"
NS = "team"


class StaticNative:
    """A fixed set of TemporalWorker and connection objects, as the native watch gives."""

    def __init__(self, snapshot: NativeSnapshot | None = None) -> None:
        self._snapshot = snapshot or NativeSnapshot()
        self._wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        self._wakeup = wakeup

    def stop(self) -> None:
        pass

    def snapshot(self) -> NativeSnapshot:
        return self._snapshot

    def observed(self) -> dict[str, ObjectList]:
        found = self._snapshot
        workers = ObjectList.known(found.workers, trim=False)
        out = {kind_key("TemporalWorker", WORKER_GROUP): workers}
        for kind, objects in found.connections.items():
            out[kind_key(kind.kind, kind.api_group)] = ObjectList.known(objects, trim=False)
        return out

    def replace(self, snapshot: NativeSnapshot) -> None:
        """Swap the objects and wake the loop."""
        self._snapshot = snapshot
        if self._wakeup is not None:
            self._wakeup.set()


class FakeQueues(StaticQueues):
    """Queue objects a test swaps, as a watch event would, waking the loop."""

    _wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        self._wakeup = wakeup

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Swap the objects and wake the loop."""
        self._objects = tuple(objects)
        if self._wakeup is not None:
            self._wakeup.set()


def fleet_data(
    *, workers: list[dict[str, Any]] | None = None, queues: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A valid fleet document with one ClusterConnection every worker uses."""
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {
            "image": "registry.example/worker:1.0.0",
            "connectionRef": {
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": "main",
                }
            },
        },
        "clusterConnections": [{"name": "main", "hostPort": "temporal.example:7233"}],
        "queues": queues or [],
        "workers": workers
        if workers is not None
        else [{"name": "payments", "namespace": NS, "taskQueueName": "payments"}],
    }


def autoscaled(
    name: str, *, target: int = 10, lo: int = 1, hi: int = 20, window: int = 300
) -> dict[str, Any]:
    """An explicit worker with autoscaling on a task queue named like it."""
    return {
        "name": name,
        "namespace": NS,
        "taskQueueName": name,
        "autoscaling": {
            "minReplicas": lo,
            "maxReplicas": hi,
            "targetBacklogPerReplica": target,
            "scaleDownStabilizationSeconds": window,
        },
    }


def queue_object(
    name: str, *, namespace: str = NS, partitions: int | None = None
) -> dict[str, Any]:
    """A labelled kmsvc Queue object as the API returns it."""
    spec: dict[str, Any] = {}
    if partitions is not None:
        spec["partitions"] = partitions
    return {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"temporal.io/worker-enabled": "true"},
            "resourceVersion": "1",
        },
        "spec": spec,
    }


class FakeApplier:
    """Records what the daemon applies, releases and deletes."""

    def __init__(self, leftovers: list[ObjectRef] | None = None) -> None:
        self.applied: list[dict[str, Any]] = []
        self.managers: set[str] = set()
        self.released: list[ObjectRef] = []
        self.deleted: list[ObjectRef] = []
        self.leftovers = list(leftovers or [])
        self.fail_apply: BaseException | None = None
        self.existing: set[ObjectRef] = set()

    def exists(self, ref: ObjectRef) -> bool:
        return ref in self.existing

    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        if self.fail_apply is not None:
            raise self.fail_apply
        self.applied.append(dict(obj))
        self.managers.add(field_manager)

    def release(self, ref: ObjectRef, field_manager: str) -> bool:
        self.released.append(ref)
        return True

    def delete(self, ref: ObjectRef) -> None:
        self.deleted.append(ref)

    def managed_by(self, field_manager: str) -> list[ObjectRef]:
        return list(self.leftovers)

    def refs(self) -> list[ObjectRef]:
        return [
            ObjectRef(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"])
            for o in self.applied
        ]


class StepExecutor(Executor):
    """Runs the engine's work at once on the caller's thread, so one step of the loop is
    one whole engine run; :attr:`hold` keeps the work until :meth:`release`."""

    def __init__(self) -> None:
        self.hold = False
        self.held: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self.held.append((future, lambda: fn(*args, **kwargs)))
        if not self.hold:
            self.release()
        return future

    def release(self) -> None:
        """Run every held piece of work now."""
        self.hold = False
        while self.held:
            future, work = self.held.pop(0)
            try:
                future.set_result(work())
            except BaseException as exc:  # noqa: BLE001 - the future carries it, as a thread's would
                future.set_exception(exc)


class InlineAskerThread(AskerThread):
    """Answers each batch of questions to Temporal before :meth:`submit` returns."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._events = asyncio.new_event_loop()  # answered before submit returns

    def submit(self, batch: Coroutine[Any, Any, None]) -> concurrent.futures.Future[Any]:
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        done.set_result(self._events.run_until_complete(batch))
        return done

    def settle(self, timeout: float) -> bool:
        return True

    def close(self) -> None:
        self._events.close()


def fake_clocks(
    clock: FakeClock, *, engine_thread: bool = False, asker_thread: bool = False
) -> Clocks:
    """Virtual time; the engine and the questions to Temporal answered within the step,
    unless the real threads are asked for."""
    real = Clocks()
    executor = StepExecutor()
    return Clocks(
        monotonic=clock,
        wall=lambda: 1_700_000_000.0 + clock.now,
        cpu=lambda: clock.cpu,
        sleep=clock.sleep,
        jitter=None,
        engine=real.engine if engine_thread else lambda _: executor,
        asker=real.asker if asker_thread else InlineAskerThread,
    )


class FakeClock:
    """Virtual monotonic time; :meth:`sleep` advances it unless the event is set."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.cpu = 0.0  # the loop thread's CPU time: a test advances it with its work
        self.slept: list[float] = []
        self.on_sleep: Callable[[], None] | None = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, delay: float, wakeup: threading.Event) -> bool:
        self.slept.append(delay)
        if self.on_sleep is not None:
            self.on_sleep()
        if wakeup.is_set():
            return True
        self.now += max(delay, 0.0)
        return False


@dataclass
class FakeEngine:
    """Records ``up``/``refresh`` calls; failures and drift are scripted."""

    ups: list[tuple[DesiredInputs, Sequence[str] | None]] = field(default_factory=list)
    refreshes: int = 0
    recoveries: int = 0
    failures: list[BaseException] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    urns: dict[str, list[str]] = field(default_factory=dict)
    recover_actions: list[str] = field(default_factory=list)
    up_recoveries: list[str] = field(default_factory=list)
    """What the next successful ``up`` reports it repaired (a lock only it found)."""
    during_up: Callable[[], None] | None = None
    during_refresh: Callable[[], None] | None = None
    preempts: list[str] = field(default_factory=list)
    """Why each :meth:`preempt` asked a refresh to give way."""
    yields: bool = True
    """Whether a refresh gives way when asked (it raises ``EngineYielded`` once it was)."""
    told: str | None = None
    version: int = 0
    """The stack's version in its history: each ``up`` and ``refresh`` adds one."""
    live: dict[str, int] | None = None
    """When set, a successful ``up`` writes replicas here as the cluster would show
    them: a worker's own count, and for a new autoscaled worker the API server's default
    of 1 (the program never sets an autoscaled count; the scaler does); a worker the up
    no longer has is gone."""

    def recover(self) -> Sequence[str]:
        self.recoveries += 1
        return list(self.recover_actions)

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        self.ups.append((inputs, targets))
        if self.during_up is not None:
            self.during_up()
        self.version += 1  # a failed update is in the stack's history too
        if self.failures:
            raise self.failures.pop(0)
        if self.live is not None and inputs.fleet is not None:
            workers = program_desired(inputs).workers
            for gone in set(self.live) - set(workers):
                del self.live[gone]  # the up deleted its Deployment
            for key, worker in workers.items():
                if worker.autoscaling is None:
                    self.live[key] = worker.replicas
                else:
                    self.live.setdefault(key, 1)
        found, self.up_recoveries = tuple(self.up_recoveries), []
        return UpReport(changes={"update": 1}, recoveries=found, update=self.last_update())

    def refresh(self) -> Sequence[str]:
        self.refreshes += 1
        if self.during_refresh is not None:
            self.during_refresh()
        told, self.told = self.told, None
        if told is not None:
            raise EngineYielded(told)
        found, self.drift = self.drift, []
        self.version += 1
        return found

    def last_update(self) -> str | None:
        return f"update-{self.version}"

    def preempt(self, reason: str) -> bool:
        self.preempts.append(reason)
        if self.yields:
            self.told = reason
        return self.yields

    def worker_urns(self) -> Mapping[str, Sequence[str]]:
        return self.urns

    @property
    def last_inputs(self) -> DesiredInputs:
        return self.ups[-1][0]

    def last_program(self) -> DesiredFleet:
        """The desired state the program computes from the last ``up``'s inputs."""
        return program_desired(self.last_inputs)


def program_desired(inputs: DesiredInputs) -> DesiredFleet:
    """What the program makes of ``inputs``: the same desired-state function."""
    assert inputs.fleet is not None, "the daemon hands the program its fleet document"
    fleet = load_fleet(inputs.fleet, "fleet.yaml")
    return desired_fleet(fleet, inputs, registry=default_registry(), file="fleet.yaml")


def program_queues(inputs: DesiredInputs) -> list[str]:
    """Names of the Queue objects the program merges from ``inputs``, sorted."""
    merge = program_desired(inputs).kinds.get(QUEUE_KIND_KEY)
    return sorted(obj.name for obj in (merge.accepted.values() if merge else ()))


class FakeBacklogs:
    """Backlogs by task-queue name; an exception value makes that describe fail."""

    def __init__(self, counts: Mapping[str, int | BaseException] | None = None) -> None:
        self.counts: dict[str, int | BaseException] = dict(counts or {})
        self.described: list[str] = []

    def refs(self, fleet: Fleet, workers: Iterable[ResolvedWorker]) -> dict[str, TaskQueueRef]:
        return {w.stack_key: TaskQueueRef(w.temporal_namespace, w.task_queue_name) for w in workers}

    async def describe(self, ref: TaskQueueRef) -> Backlog:
        self.described.append(ref.name)
        value = self.counts.get(ref.name, 0)
        if isinstance(value, BaseException):
            raise value
        return Backlog(count=value)


@dataclass
class FakeScaler:
    """The scale subresource: records each write and applies it to the fake cluster."""

    live: dict[str, int]
    writes: list[tuple[str, int]] = field(default_factory=list)
    owned: set[str] = field(default_factory=set)
    failures: list[BaseException] = field(default_factory=list)

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        if self.failures:
            raise self.failures.pop(0)
        key = f"{namespace}/{name}"
        if key not in self.live:
            raise LookupError(f"deployments {key} not found")
        self.writes.append((key, replicas))
        self.live[key] = replicas
        self.owned.add(key)


def NoLimit() -> Budget:
    """A budget that never runs out."""
    return Budget(1e9, burst=10**9)


@dataclass
class Harness:
    """A daemon wired to fakes, with handles on each."""

    daemon: Daemon
    engine: FakeEngine
    clock: FakeClock
    queues: FakeQueues
    backlogs: FakeBacklogs
    metrics: DaemonMetrics
    fleet: dict[str, Any]
    live: dict[str, int]
    scaler: FakeScaler
    state: LoopState | None = None

    def engine_runs(self) -> float:
        return self.metrics.count("twc_engine_runs_total")

    def step(self) -> LoopState:
        """One iteration, as the loop runs it (wake-up cleared first)."""
        if self.state is None:
            self.state = LoopState(started_at=self.clock.now)
        self.daemon.wakeup.clear()
        self.state = self.daemon.iterate(self.state)
        self.daemon.state = self.state
        return self.state


def make_daemon(
    fleet: dict[str, Any] | None = None,
    *,
    settings: DaemonSettings | None = None,
    queues: Iterable[Mapping[str, Any]] = (),
    backlogs: Mapping[str, int | BaseException] | None = None,
    engine: FakeEngine | None = None,
    leader: Any = None,
    read_secret: Callable[[str, str], Mapping[str, bytes]] | None = None,
    early: Any = None,
    source: FakeQueues | None = None,
    read_replicas: Callable[[dict[str, int]], Mapping[str, int]] | None = None,
    record: Any = None,
    objects: Any = None,
    engine_thread: bool = False,
    refresh_turn: Callable[[str, float], bool] | None = None,
    asker_thread: bool = False,
    budgets: Budget | None = None,
) -> Harness:
    """A daemon on fakes. ``fleet`` is re-read every iteration, so tests may edit it.

    The engine runs and the questions to Temporal are answered within each step
    (:class:`StepExecutor`, :class:`InlineAskerThread`); ``engine_thread`` and
    ``asker_thread`` give the daemon its real threads instead.

    ``source`` replaces the Queue source built from ``queues``; ``read_replicas`` reads
    the live replicas (given the fake cluster's dict), e.g. to make that read fail.
    """
    doc = fleet if fleet is not None else fleet_data()
    clock = FakeClock()
    fake_engine = engine or FakeEngine()
    source = source if source is not None else FakeQueues(queues)
    fake_backlogs = FakeBacklogs(backlogs)
    metrics = DaemonMetrics(STACK)
    live: dict[str, int] = {}
    if fake_engine.live is None:
        fake_engine.live = live
    scaler = FakeScaler(fake_engine.live)

    def load() -> Fleet:
        return load_fleet(doc, "fleet.yaml")

    daemon = Daemon(
        STACK,
        settings or DaemonSettings(),
        Sources(
            fleet=load,
            queues=source,
            backlogs=fake_backlogs,
            replicas=(lambda: read_replicas(live)) if read_replicas else lambda: dict(live),
            scaled=lambda: set(scaler.owned),
            secrets=read_secret,
            file="fleet.yaml",
            record=record,
            objects=objects,
        ),
        Effects(engine=fake_engine, early=early, scaler=scaler, refresh_turn=refresh_turn),
        leader=leader,
        metrics=metrics,
        clocks=fake_clocks(clock, engine_thread=engine_thread, asker_thread=asker_thread),
        budgets=budgets or NoLimit(),
    )
    source.start(daemon.wakeup)
    return Harness(daemon, fake_engine, clock, source, fake_backlogs, metrics, doc, live, scaler)
