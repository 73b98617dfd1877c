"""One daemon process runs every shard of a stack: a loop per shard, engine runs bounded
across them, new namespaces assigned (opening shards), a replica holding no more than
its share of the shards' Leases, and a lost Lease stopping only its own shard."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.unit._daemon_fakes import FakeEngine, make_daemon
from twc.desired import DesiredInputs
from twc.engine.automation import UpReport
from twc.reconcile.shards import (
    EngineSlots,
    FanoutWakeup,
    Shard,
    ShardedDaemon,
    ShardLeader,
    ShardNamespaces,
    SlotEngine,
)
from twc.shards import ShardMap, assign


@dataclass
class MemoryStore:
    """The assignment ConfigMap, in memory."""

    shard_map: ShardMap | None = None
    writes: int = 0

    def extend(self, load: Mapping[str, int], *, max_workers_per_shard: int) -> ShardMap:
        extended = assign(
            self.shard_map or ShardMap(), load, max_workers_per_shard=max_workers_per_shard
        )
        if extended != self.shard_map:
            self.writes += 1
        self.shard_map = extended
        return extended


@dataclass
class FakeElector:
    leading: bool = False
    started: int = 0
    stopped: int = 0

    def is_leader(self) -> bool:
        return self.leading

    def start(self) -> FakeElector:
        self.started += 1
        return self

    def stop(self, *, release: bool = True) -> None:
        self.stopped += 1
        self.leading = False

    def hold(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def inherited_engines(self) -> tuple[Any, ...]:
        return ()


@dataclass
class World:
    load: dict[str, int]
    store: MemoryStore = field(default_factory=MemoryStore)
    made: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    electors: dict[int, list[FakeElector]] = field(default_factory=dict)
    slots: EngineSlots = field(default_factory=lambda: EngineSlots(2))

    def make_shard(self, index: int, namespaces: ShardNamespaces) -> Shard:
        self.made.append((index, namespaces()))
        harness = make_daemon()

        def elector() -> FakeElector:
            made = FakeElector()
            self.electors.setdefault(index, []).append(made)
            return made

        return Shard(
            index,
            f"prod.s{index:02d}",
            namespaces,
            harness.daemon,
            SlotEngine(FakeEngine(), self.slots),
            ShardLeader(elector),
        )


def _sharded(world: World, *, share: int | None = None) -> ShardedDaemon:
    return ShardedDaemon(
        "prod",
        store=world.store,
        load=lambda: dict(world.load),
        make_shard=world.make_shard,
        max_workers_per_shard=10,
        share=(lambda shards: share) if share is not None else None,
        slots=world.slots,
    )


def test_each_shard_gets_its_loop_and_a_new_namespace_updates_or_opens_one() -> None:
    world = World(load={"a": 6, "b": 6})
    sharded = _sharded(world)

    sharded.sync()
    assert world.made == [(0, ("a",)), (1, ("b",))]

    world.load["c"] = 3  # fits shard 0 (6 + 3 <= 10)
    sharded.sync()
    assert sharded.shards[0].namespaces() == ("a", "c")
    assert len(world.made) == 2

    world.load["d"] = 9  # no room anywhere: a third shard
    sharded.sync()
    assert world.made[-1] == (2, ("d",))
    assert sharded.shards[1].namespaces() == ("b",)  # nothing moved
    assert world.store.writes == 3


@dataclass
class SlowEngine:
    """An engine whose runs take a while, recording how many overlap."""

    delay: float = 0.2
    ups: list[float] = field(default_factory=list)

    def recover(self) -> Sequence[str]:
        return []

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        time.sleep(self.delay)
        self.ups.append(time.monotonic())
        return UpReport()

    def refresh(self) -> Sequence[str]:
        return []

    def preempt(self, reason: str) -> bool:
        return False

    def last_update(self) -> str | None:
        return None

    def worker_urns(self) -> Mapping[str, Sequence[str]]:
        return {}


def test_engine_runs_across_shards_never_exceed_the_slots() -> None:
    slots = EngineSlots(2)
    engines = [SlotEngine(SlowEngine(), slots) for _ in range(5)]
    threads = [threading.Thread(target=e.up, args=(DesiredInputs(), None)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert slots.peak == 2
    assert slots.running == 0
    assert all(not e.busy for e in engines)


def test_a_replica_takes_no_more_than_its_share_and_hands_back_its_surplus() -> None:
    world = World(load={"a": 9, "b": 9, "c": 9, "d": 9})
    sharded = _sharded(world, share=2)
    sharded.sync()
    assert sharded.shard_map is not None
    assert sharded.shard_map.shards == 4

    electors = {i: world.electors[i][-1] for i in range(4)}
    electors[0].leading = True
    assert sharded.may_acquire()
    electors[1].leading = True
    assert not sharded.may_acquire()  # 2 of 4 shards: its share with 2 replicas

    electors[2].leading = electors[3].leading = True  # e.g. it ran alone before
    sharded.shards[3].engine.busy = True  # shard 3 is in an up: not handed back now
    assert sharded.rebalance() == "prod.s02"
    assert electors[2].stopped == 1
    assert len(world.electors[2]) == 2  # standing again, behind the share check
    sharded.shards[3].engine.busy = False
    assert sharded.rebalance() == "prod.s03"
    assert sharded.rebalance() is None
    assert sharded.held() == 2


def test_a_lost_lease_stops_only_that_shards_engine() -> None:
    leaders = {0: FakeElector(leading=True), 1: FakeElector(leading=True)}
    harnesses = {i: make_daemon(leader=leaders[i]) for i in (0, 1)}
    for harness in harnesses.values():
        harness.step()
    ups = {i: len(h.engine.ups) for i, h in harnesses.items()}
    assert ups == {0: 1, 1: 1}

    leaders[1].leading = False  # shard 1's Lease is lost
    for harness in harnesses.values():
        harness.daemon.state = None
        harness.state = None  # force an up on both
        harness.step()

    assert len(harnesses[0].engine.ups) == 2
    assert len(harnesses[1].engine.ups) == 1
    assert harnesses[0].daemon.ready()[0]
    assert harnesses[1].daemon.ready() == (True, "standby: another daemon holds the lease")


def test_a_shared_watch_change_wakes_every_shards_loop() -> None:
    fanout = FanoutWakeup()
    loops = [threading.Event(), threading.Event()]
    for event in loops:
        fanout.subscribe(event)

    fanout.set()

    assert all(event.is_set() for event in loops)
    fanout.unsubscribe(loops[0])
    for event in loops:
        event.clear()
    fanout.set()
    assert [event.is_set() for event in loops] == [False, True]


def test_a_refresh_never_takes_the_slot_a_change_needs() -> None:
    # At 20 shards the refreshes alone would keep both slots busy, and a change would
    # wait behind them; a refresh takes a slot only when another stays free.
    import threading

    slots = EngineSlots(2)
    slots.acquire(refresh=True)  # one refresh runs
    second = threading.Thread(target=lambda: slots.acquire(refresh=True), daemon=True)
    second.start()
    second.join(0.2)
    assert second.is_alive(), "a second refresh would take the last free slot"
    assert slots.running == 1

    slots.acquire(refresh=False)  # an up takes the free slot at once
    assert slots.running == 2
    slots.release(refresh=False)
    slots.release(refresh=True)
    second.join(5)
    assert not second.is_alive(), "the waiting refresh starts once both slots are free"
    assert slots.running == 1
    slots.release(refresh=True)
    assert slots.running == 0


def test_a_waiting_change_goes_before_a_waiting_refresh() -> None:
    import threading

    slots = EngineSlots(2)
    order: list[str] = []
    slots.acquire(refresh=False)
    slots.acquire(refresh=False)  # both slots busy with ups

    def take(kind: str) -> None:
        slots.acquire(refresh=kind == "refresh")
        order.append(kind)

    refresh = threading.Thread(target=take, args=("refresh",), daemon=True)
    refresh.start()
    refresh.join(0.1)
    up = threading.Thread(target=take, args=("up",), daemon=True)
    up.start()
    up.join(0.1)
    slots.release(refresh=False)  # one slot free: the up, not the refresh
    up.join(5)
    assert order == ["up"]
    slots.release(refresh=False)
    slots.release(refresh=False)
    refresh.join(5)
    assert order == ["up", "refresh"]


def test_a_stopping_daemon_starts_none_of_the_engine_runs_waiting_for_a_slot() -> None:
    # The bench's 20-shard daemon, told to stop, started the shards' queued refreshes
    # one after another (minutes each) before it exited.
    from twc.reconcile.outcome import EngineNotStarted

    slots = EngineSlots(1)
    running = SlotEngine(SlowEngine(delay=0.5), slots)
    waiting = [SlotEngine(SlowEngine(), slots) for _ in range(2)]
    errors: list[BaseException] = []

    def call(work: Any) -> None:
        try:
            work()
        except EngineNotStarted as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=call, args=(lambda: running.up(DesiredInputs(), None),)),
        threading.Thread(target=call, args=(waiting[0].refresh,)),
        threading.Thread(target=call, args=(lambda: waiting[1].up(DesiredInputs(), None),)),
    ]
    threads[0].start()
    while slots.running == 0:
        time.sleep(0.01)
    for thread in threads[1:]:
        thread.start()
    time.sleep(0.1)
    assert slots.running == 1  # the other two wait for the one slot

    slots.close()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()

    assert len(errors) == 2, "both waiting runs gave up without starting"
    assert len(running.engine.ups) == 1, "the run in progress ended as it would"  # type: ignore[attr-defined]
    assert waiting[1].engine.ups == []  # type: ignore[attr-defined]
    assert slots.running == 0
    assert not any(engine.busy for engine in [running, *waiting])
    try:
        slots.acquire(refresh=False)
    except EngineNotStarted:
        pass
    else:
        raise AssertionError("a closed set of slots started a run")


def test_sigterm_to_a_sharded_daemon_closes_its_engine_slots() -> None:
    world = World(load={"a": 6, "b": 6})
    sharded = ShardedDaemon(
        "prod",
        store=world.store,
        load=lambda: dict(world.load),
        make_shard=world.make_shard,
        max_workers_per_shard=10,
        slots=world.slots,
    )
    sharded.sync()
    assert not world.slots.closed

    sharded.request_stop()

    assert world.slots.closed
    assert all(shard.daemon.stopping for shard in sharded.shards.values())


def test_a_run_that_never_started_is_folded_without_a_report() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from twc.reconcile.background import BackgroundEngine
    from twc.reconcile.outcome import EngineNotStarted
    from twc.reconcile.settings import DaemonSettings
    from twc.reconcile.state import LoopState

    class Actor:
        def refresh(self) -> list[str]:
            raise EngineNotStarted("stopping")

    class Silent:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"a run that never started was reported ({name})")

    engine = BackgroundEngine(
        "prod.s00",
        actor=Actor(),  # type: ignore[arg-type]
        reporter=Silent(),  # type: ignore[arg-type]
        settings=DaemonSettings(),
        clocks=(time.monotonic, None),
        wakeup=threading.Event(),
        executor=ThreadPoolExecutor(max_workers=1),
    )
    state = LoopState(started_at=0.0)
    engine.start_refresh()
    folded = engine.drain(state)

    assert folded is state, "the refresh stays due: nothing ran"
    assert not engine.busy()


def test_a_refresh_waiting_for_a_slot_gives_way_to_its_shards_change() -> None:
    from twc.engine.errors import EngineYielded

    slots = EngineSlots(1)
    running = SlotEngine(SlowEngine(delay=0.5), slots)
    waiting = SlotEngine(SlowEngine(), slots)
    yielded: list[BaseException] = []

    def refresh() -> None:
        try:
            waiting.refresh()
        except EngineYielded as exc:
            yielded.append(exc)

    up = threading.Thread(target=lambda: running.up(DesiredInputs(), None))
    up.start()
    while slots.running == 0:
        time.sleep(0.01)
    waits = threading.Thread(target=refresh)
    waits.start()
    time.sleep(0.1)
    assert waiting.busy, "the refresh waits for the one slot"

    assert waiting.preempt("a change to orders")
    waits.join(2)
    assert not waits.is_alive(), "it stopped waiting before the slot came free"
    assert len(yielded) == 1
    assert not waiting.busy
    up.join(5)
    assert slots.running == 0
    # The request ended with the refresh it stopped: the next one runs.
    assert not waiting.preempt("nothing runs")
    assert waiting.refresh() == []
