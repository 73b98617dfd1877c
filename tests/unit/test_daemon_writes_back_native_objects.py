"""The loop with TemporalWorker and connection objects: the program's inputs, status,
finalizers, Events.

Everything outside is faked: the objects come from a fixed snapshot, writes are recorded.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tests.unit._daemon_fakes import (
    FakeBacklogs,
    FakeClock,
    FakeEngine,
    NoLimit,
    StaticNative,
    fake_clocks,
    fleet_data,
)
from tests.unit._native_objects import (
    CLUSTER_CONNECTION,
    CONNECTION,
    cluster_conn_obj,
    cluster_ref,
    worker_obj,
)
from twc.connections import Registry
from twc.desired import WORKER_KIND_KEY
from twc.kube.watch import NativeSnapshot, StaticQueues
from twc.native.objects import FINALIZER, NativeObject
from twc.reconcile.act import Effects
from twc.reconcile.asking import Budget, TaskQueueRef
from twc.reconcile.daemon import Daemon
from twc.reconcile.health import DaemonMetrics
from twc.reconcile.observe import POLLERS_INTERVAL, POLLERS_RECHECK_INTERVAL, Sources
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import LoopState
from twc.spec import Fleet, load_fleet

CLUSTER_CONNECTION_KEY = "ClusterConnection.temporal.io"

UNKNOWN = {"objectRef": {"apiGroup": "temporal.io", "kind": "NoSuchKind", "name": "x"}}


class Writer:
    """Records what the daemon writes back."""

    def __init__(self) -> None:
        self.status: list[tuple[str, dict[str, Any]]] = []
        self.finalizers: list[tuple[str, list[str]]] = []
        self.events: list[tuple[str, str]] = []

    def patch_status(self, obj: NativeObject, patch: Mapping[str, Any]) -> None:
        self.status.append((obj.key, dict(patch["status"])))

    def set_finalizers(self, obj: NativeObject, finalizers: list[str]) -> None:
        self.finalizers.append((obj.key, finalizers))

    def event(self, obj: NativeObject, reason: str, message: str, *, warning: bool = True) -> None:
        self.events.append((obj.key, reason))


class Pollers(FakeBacklogs):
    """Backlogs plus pollers per task queue."""

    def __init__(self) -> None:
        super().__init__()
        self.pollers_by_queue: dict[str, int] = {}
        self.asked: list[str] = []

    async def pollers(self, ref: TaskQueueRef) -> int:
        self.asked.append(ref.name)
        return self.pollers_by_queue.get(ref.name, 0)


class World:
    def __init__(
        self,
        workers: list[dict[str, Any]],
        conns: list[dict[str, Any]],
        settings: DaemonSettings | None = None,
        pollers: Budget | None = None,
        clock: FakeClock | None = None,
        asker_thread: bool = False,
    ) -> None:
        self.clock = clock or FakeClock()
        self.engine = FakeEngine()
        self.writer = Writer()
        self.backlogs = Pollers()
        self.deployments: dict[str, tuple[int, int]] = {}
        self.native = StaticNative(self.snapshot(workers, conns))
        doc = fleet_data(workers=[])

        def load() -> Fleet:
            return load_fleet(doc, "fleet.yaml")

        self.daemon = Daemon(
            "unit",
            settings or DaemonSettings(),
            Sources(
                fleet=load,
                queues=StaticQueues(()),
                native=self.native,
                backlogs=self.backlogs,
                deployments=lambda: dict(self.deployments),
                registry=Registry.with_builtins(),
                file="fleet.yaml",
            ),
            Effects(engine=self.engine, writer=self.writer),
            metrics=DaemonMetrics("unit"),
            clocks=replace(
                fake_clocks(self.clock, asker_thread=asker_thread),
                wall=lambda: 1_700_000_000.0 + self.clock.now,
            ),
            budgets=pollers or NoLimit(),
        )
        self.state = LoopState(started_at=self.clock.now)

    @staticmethod
    def snapshot(workers: list[dict[str, Any]], conns: list[dict[str, Any]]) -> NativeSnapshot:
        return NativeSnapshot(
            workers=tuple(workers), connections={CLUSTER_CONNECTION: tuple(conns), CONNECTION: ()}
        )

    def step(self) -> LoopState:
        self.state = self.daemon.iterate(self.state)
        return self.state


def _last_status(writer: Writer, key: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for k, status in writer.status:
        if k == key:
            merged.update(status)
    return merged


def test_native_objects_reach_the_program_and_their_status_turns_ready() -> None:
    world = World(
        [worker_obj("orders", ref=cluster_ref("prod")), worker_obj("stray", ref=UNKNOWN)],
        [cluster_conn_obj("prod")],
    )
    world.step()

    program = world.engine.last_program()
    assert sorted(program.accepted_objects(WORKER_KIND_KEY)) == ["team/orders"]
    assert sorted(program.accepted_objects(CLUSTER_CONNECTION_KEY)) == ["prod"]
    assert world.writer.finalizers == [("prod", [FINALIZER])]
    assert ("team/stray", "UnknownConnectionKind") in world.writer.events
    stray = _last_status(world.writer, "team/stray")
    assert stray["phase"] == "Failed"
    assert {c["reason"] for c in stray["conditions"]} == {"UnknownConnectionKind"}
    assert _last_status(world.writer, "team/orders")["phase"] == "Pending"

    # The simulated cluster catches up: the Deployment is ready and a worker polls.
    world.deployments["team/orders"] = (1, 1)
    world.backlogs.pollers_by_queue["orders"] = 1
    # A queue without pollers is asked again once its recheck interval has passed.
    world.clock.now += POLLERS_RECHECK_INTERVAL
    ups = len(world.engine.ups)
    world.step()

    orders = _last_status(world.writer, "team/orders")
    assert orders["phase"] == "Ready"
    assert orders["observedGeneration"] == 1
    assert orders["observedConnectionRef"]["name"] == "prod"
    assert len(world.engine.ups) == ups  # status needs no engine run

    writes, events = len(world.writer.status), len(world.writer.events)
    world.step()
    assert len(world.writer.status) == writes  # nothing changed: no patch at all
    assert len(world.writer.events) == events  # the same failure is reported once


def test_the_finalizer_is_released_only_once_the_stack_no_longer_uses_the_connection() -> None:
    world = World([worker_obj("orders", ref=cluster_ref("prod"))], [cluster_conn_obj("prod")])
    world.step()
    assert world.writer.finalizers == [("prod", [FINALIZER])]

    # The worker goes and the connection is being deleted, but the up fails.
    world.native.replace(
        World.snapshot([], [cluster_conn_obj("prod", finalizers=[FINALIZER], deleting=True)])
    )
    world.engine.failures.append(RuntimeError("engine down"))
    world.step()
    assert world.writer.finalizers == [("prod", [FINALIZER])]  # still held

    world.step()  # the retry succeeds: the stack no longer uses it
    assert world.writer.finalizers[-1] == ("prod", [])


def test_nothing_is_released_before_the_stack_was_applied_once() -> None:
    world = World([], [cluster_conn_obj("prod", finalizers=[FINALIZER])])
    world.engine.failures.append(RuntimeError("engine down"))
    world.step()

    assert world.writer.finalizers == []
    world.step()
    assert world.writer.finalizers == [("prod", [])]


def test_a_failed_apply_is_an_event_on_the_workers_it_concerned() -> None:
    world = World([worker_obj("orders", ref=cluster_ref("prod"))], [cluster_conn_obj("prod")])
    world.engine.failures.append(RuntimeError("admission webhook said no"))
    world.step()

    assert ("team/orders", "ApplyFailed") in world.writer.events
    status = _last_status(world.writer, "team/orders")
    assert "observedGeneration" not in status  # the stack does not hold it yet


def test_a_status_changed_by_someone_else_is_corrected_once_the_watch_shows_it() -> None:
    world = World([worker_obj("orders", ref=cluster_ref("prod"))], [cluster_conn_obj("prod")])
    world.deployments["team/orders"] = (1, 1)
    world.backlogs.pollers_by_queue["orders"] = 1
    world.step()
    world.step()
    written = _last_status(world.writer, "team/orders")
    assert written["phase"] == "Ready"

    # The watch delivers the object with our status, then with someone else's edit.
    seen = worker_obj("orders", ref=cluster_ref("prod"), status=dict(written))
    world.native.replace(World.snapshot([seen], [cluster_conn_obj("prod", finalizers=[FINALIZER])]))
    writes = len(world.writer.status)
    world.step()
    assert len(world.writer.status) == writes
    edited = worker_obj("orders", ref=cluster_ref("prod"), status={**written, "phase": "Pending"})
    world.native.replace(
        World.snapshot([edited], [cluster_conn_obj("prod", finalizers=[FINALIZER])])
    )
    world.step()

    assert world.writer.status[-1] == ("team/orders", {"phase": "Ready"})


def test_a_lasting_apply_failure_is_one_event_until_it_changes() -> None:
    world = World([worker_obj("orders", ref=cluster_ref("prod"))], [cluster_conn_obj("prod")])
    world.engine.failures.extend([RuntimeError("no"), RuntimeError("no")])
    world.step()
    world.clock.now += 60  # past the backoff
    world.step()

    assert len(world.engine.ups) == 2  # both attempts failed
    assert world.writer.events.count(("team/orders", "ApplyFailed")) == 1


def test_a_write_that_fails_for_one_object_does_not_hold_up_the_others() -> None:
    world = World(
        [worker_obj("a", ref=cluster_ref("one")), worker_obj("b", ref=cluster_ref("two"))],
        [cluster_conn_obj("one"), cluster_conn_obj("two")],
    )
    calls: list[str] = []
    record_finalizers = world.writer.set_finalizers
    record_status = world.writer.patch_status

    def conflict_on_one(obj: NativeObject, finalizers: list[str]) -> None:
        calls.append(obj.key)
        if obj.key == "one":
            raise RuntimeError("409 Conflict")
        record_finalizers(obj, finalizers)

    def gone_a(obj: NativeObject, patch: Mapping[str, Any]) -> None:
        if obj.key == "team/a":
            raise RuntimeError("404 Not Found")
        record_status(obj, patch)

    world.writer.set_finalizers = conflict_on_one  # type: ignore[method-assign]
    world.writer.patch_status = gone_a  # type: ignore[method-assign]
    state = world.step()

    assert state.last_outcome is not None
    assert state.last_outcome.ok
    assert calls == ["one", "two"]
    assert world.writer.finalizers == [("two", [FINALIZER])]
    assert [k for k, _ in world.writer.status] == ["team/b"]


def test_a_failed_status_write_is_tried_again_though_nothing_else_changed() -> None:
    world = World([worker_obj("orders", ref=cluster_ref("prod"))], [cluster_conn_obj("prod")])
    world.deployments["team/orders"] = (2, 1)
    world.backlogs.pollers_by_queue["orders"] = 1
    for _ in range(3):
        world.step()
    assert _last_status(world.writer, "team/orders")["readyReplicas"] == 1
    record_status, failing = world.writer.patch_status, [True]

    def fails_once(obj: NativeObject, patch: Mapping[str, Any]) -> None:
        if failing and failing.pop():
            raise RuntimeError("503 Service Unavailable")
        record_status(obj, patch)

    world.writer.patch_status = fails_once  # type: ignore[method-assign]
    world.deployments["team/orders"] = (2, 2)
    world.step()
    assert _last_status(world.writer, "team/orders")["readyReplicas"] == 1  # it failed

    world.step()  # nothing else changed: the write is made now
    assert _last_status(world.writer, "team/orders")["readyReplicas"] == 2
    writes = len(world.writer.status)
    world.step()
    assert len(world.writer.status) == writes  # and not again


def test_a_rejected_worker_hears_why_before_the_up_of_the_others_runs() -> None:
    world = World(
        [worker_obj("orders", ref=cluster_ref("prod")), worker_obj("stray", ref=UNKNOWN)],
        [cluster_conn_obj("prod")],
    )
    during_up: list[tuple[list[str], list[tuple[str, str]]]] = []
    world.engine.during_up = lambda: during_up.append(
        ([k for k, _ in world.writer.status], list(world.writer.events))
    )

    world.step()

    [(status_keys, events)] = during_up
    assert status_keys == ["team/stray"]
    assert events == [("team/stray", "UnknownConnectionKind")]
    assert world.writer.events.count(("team/stray", "UnknownConnectionKind")) == 1


def test_pollers_are_asked_again_only_when_their_answer_is_old() -> None:
    # Asking Temporal about every worker on every iteration made an iteration's cost grow
    # with the fleet (and a watch event wakes every shard's loop).
    world = World([worker_obj("orders", ref=cluster_ref("prod"))], [cluster_conn_obj("prod")])
    world.deployments["team/orders"] = (1, 1)
    world.backlogs.pollers_by_queue["orders"] = 1
    world.step()
    assert world.backlogs.asked == ["orders"]
    assert _last_status(world.writer, "team/orders")["phase"] == "Ready"

    for _ in range(3):
        world.step()
    assert world.backlogs.asked == ["orders"], "a polling queue's count is reused"

    world.clock.now += POLLERS_INTERVAL
    world.backlogs.pollers_by_queue["orders"] = 0  # its workers stopped polling
    world.step()
    assert world.backlogs.asked == ["orders", "orders"]
    assert _last_status(world.writer, "team/orders")["phase"] != "Ready"

    world.step()
    assert len(world.backlogs.asked) == 2, "the count without pollers is reused a moment"
    world.clock.now += POLLERS_RECHECK_INTERVAL
    world.backlogs.pollers_by_queue["orders"] = 1
    world.step()
    assert len(world.backlogs.asked) == 3
    assert _last_status(world.writer, "team/orders")["phase"] == "Ready"


def test_a_queue_without_pollers_is_asked_less_and_less_often() -> None:
    # Five, ten, twenty, then every pollers_interval: a fleet of broken (or not yet
    # started) workers no longer asks Temporal about each of them every few seconds.
    world = World([worker_obj("orders", ref=cluster_ref("prod"))], [cluster_conn_obj("prod")])
    world.deployments["team/orders"] = (1, 1)
    world.step()
    asked_at = [world.clock.now]
    for _ in range(120):
        world.clock.now += 1.0
        before = len(world.backlogs.asked)
        world.step()
        if len(world.backlogs.asked) > before:
            asked_at.append(world.clock.now)
    gaps = [b - a for a, b in itertools.pairwise(asked_at)]
    recheck, most = POLLERS_RECHECK_INTERVAL, POLLERS_INTERVAL
    assert gaps[:3] == [recheck, 2 * recheck, 4 * recheck]
    assert set(gaps[3:]) == {most}


def test_pollers_are_asked_within_a_rate_budget_oldest_answer_first() -> None:
    clock = FakeClock()
    world = World(
        [worker_obj(n, ref=cluster_ref("prod")) for n in ("a", "b", "c", "d", "e")],
        [cluster_conn_obj("prod")],
        pollers=Budget(1.0, burst=2, clock=clock),
        clock=clock,
    )
    world.step()
    assert len(world.backlogs.asked) == 2  # the burst
    world.clock.now += 2.0
    world.step()
    assert len(world.backlogs.asked) == 4  # two seconds at one a second
    world.clock.now += 1.0
    world.step()
    assert sorted(world.backlogs.asked) == ["a", "b", "c", "d", "e"], "each asked once first"


def test_the_shards_of_one_process_share_one_pollers_budget() -> None:
    # At 20 shards a budget each asked a Temporal dev server about 200 task queues a
    # second; its answers to the autoscaler's samples timed out.
    clock = FakeClock()
    shared = Budget(1.0, burst=3, clock=clock)
    shards = [
        World(
            [worker_obj(f"{shard}-{n}", ref=cluster_ref("prod")) for n in "abcd"],
            [cluster_conn_obj("prod")],
            pollers=shared,
            clock=clock,
        )
        for shard in ("s0", "s1")
    ]
    for world in shards:
        world.step()
    assert sum(len(w.backlogs.asked) for w in shards) == 3, "one burst for both shards"
    clock.now += 2.0
    for world in shards:
        world.step()
    assert sum(len(w.backlogs.asked) for w in shards) == 5, "two seconds at one a second"


def test_a_restarted_daemon_keeps_a_ready_workers_last_poller_answer_until_it_asks_again() -> None:
    # The pollers are asked on a budget, so a restarted daemon may not ask about every
    # worker in its first iteration: a Ready worker must not turn Pending meanwhile.
    clock = FakeClock()
    ready = {
        "phase": "Ready",
        "conditions": [
            {
                "type": "TemporalTaskQueueRegistered",
                "status": "True",
                "reason": "PollersRegistered",
                "message": "1 poller(s)",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    world = World(
        [
            worker_obj("a", ref=cluster_ref("prod"), status=ready),
            worker_obj("b", ref=cluster_ref("prod"), status=ready),
        ],
        [cluster_conn_obj("prod")],
        pollers=Budget(0.001, burst=1, clock=clock),
        clock=clock,
    )
    world.deployments.update({"team/a": (1, 1), "team/b": (1, 1)})
    world.backlogs.pollers_by_queue.update({"a": 1, "b": 1})
    world.step()

    assert len(world.backlogs.asked) == 1  # one asked about, the other not yet
    for key in ("team/a", "team/b"):
        written = _last_status(world.writer, key)
        assert written.get("phase", "Ready") == "Ready", (key, written)


class SlowPollers(Pollers):
    """Temporal answering about one task queue only after ``delay`` seconds."""

    def __init__(self, slow: str, delay: float) -> None:
        super().__init__()
        self.slow, self.delay = slow, delay

    async def pollers(self, ref: TaskQueueRef) -> int:
        if ref.name == self.slow:
            self.asked.append(ref.name)
            await asyncio.sleep(self.delay)
            return self.pollers_by_queue.get(ref.name, 0)
        return await super().pollers(ref)


def test_a_slow_poller_answer_does_not_hold_the_loop() -> None:
    # A shard's loop asks about pollers while it reports; a dev server slow with 5000
    # task queues held it 10 s, and a new Queue's early apply behind it.
    world = World(
        [worker_obj(n, ref=cluster_ref("prod")) for n in ("fast", "slow")],
        [cluster_conn_obj("prod")],
    )
    world.backlogs = SlowPollers("slow", delay=5.0)
    world.daemon.observer.sources = replace(world.daemon.observer.sources, backlogs=world.backlogs)
    world.deployments.update({"team/fast": (1, 1), "team/slow": (1, 1)})
    world.backlogs.pollers_by_queue.update({"fast": 1, "slow": 1})

    world.step()
    assert sorted(world.backlogs.asked) == ["fast", "slow"]
    assert _last_status(world.writer, "team/fast")["phase"] == "Ready"
    assert _last_status(world.writer, "team/slow")["phase"] != "Ready"  # not answered in time

    world.backlogs.delay = 0.0
    world.step()
    assert world.backlogs.asked.count("slow") == 2, "an unanswered queue is asked again"
    assert world.backlogs.asked.count("fast") == 1, "an answered one is not"
    assert _last_status(world.writer, "team/slow")["phase"] == "Ready"


def test_a_status_coming_back_leaves_the_desired_fleet_and_the_status_writer_reads_it() -> None:
    orders = worker_obj("orders", ref=cluster_ref("prod"))
    world = World([orders], [cluster_conn_obj("prod")])
    world.step()
    first = world.daemon.plan(world.state, now=world.clock.now)

    # The status the daemon wrote comes back as a watch event: a new resourceVersion too.
    written = _last_status(world.writer, "team/orders")
    meta = {**orders["metadata"], "resourceVersion": "11"}
    back = {**orders, "status": written, "metadata": meta}
    world.native.replace(World.snapshot([back], [cluster_conn_obj("prod")]))
    again = world.daemon.plan(world.state, now=world.clock.now)
    assert again.desired is first.desired  # what the desired state reads did not change
    assert again.native is not None
    assert [o.status for o in again.native.worker_objects] == [written]

    # A change to what it reads makes it again.
    image = {**back, "spec": {**back["spec"], "image": "registry.example/worker:2.0.0"}}
    world.native.replace(World.snapshot([image], [cluster_conn_obj("prod")]))
    changed = world.daemon.plan(world.state, now=world.clock.now)
    assert changed.desired is not first.desired
    assert changed.desired.workers["team/orders"].image == "registry.example/worker:2.0.0"
