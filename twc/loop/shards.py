"""One daemon process for every shard of a sharded stack.

Each shard is reconciled by an ordinary :class:`~twc.loop.daemon.Daemon` on its own
thread, reading the process's shared watches through views of its namespaces
(:mod:`twc.loop.shardviews`) and applying its own Pulumi stack. What they share:

* **engine slots**: at most ``engine_concurrency`` engine runs at once across the
  shards (:class:`EngineSlots`); a shard waiting for a slot holds only itself up;
* **the assignment**: :meth:`ShardedDaemon.sync` extends it when a namespace appears
  (through an :class:`AssignmentStore`, so several replicas agree) and starts a loop
  for a shard the extension opened;
* **leadership**: each shard has its own Lease; a replica takes a free one only while
  it holds fewer than its share, and hands back its surplus (one per round, only a shard
  whose engine is idle) so a replica that joins gets its share. Losing one shard's
  Lease stops only that shard's loop from applying (its loop turns standby).
* one ``/metrics``, ``/healthz``, ``/readyz``, ``/status`` for all of them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from twc.desired import DesiredInputs
from twc.loop.daemon import Daemon
from twc.loop.outcome import EngineNotStarted
from twc.loop.shardviews import ShardNamespaces
from twc.shards import ShardMap
from twc.stackrun.automation import StackEngine, UpReport
from twc.stackrun.errors import EngineYielded

__all__ = [
    "AssignmentStore",
    "EngineSlots",
    "MergedMetrics",
    "Shard",
    "ShardLeader",
    "ShardedDaemon",
    "SlotEngine",
]

logger = logging.getLogger(__name__)


class EngineSlots:
    """At most ``n`` engine runs at once in this process, ups first, and refreshes held
    to a share of the time.

    A refresh never takes a slot an ``up`` waits for, nor the last free one while there
    are two or more: a change never waits behind the shards' refreshes. Nor do the
    refreshes together take more than ``refresh_share`` of the process's time: after a
    refresh of ``d`` seconds the next one (of any shard) starts no sooner than
    ``d * (1 - share) / share`` later, waiting refreshes in the order they came.
    """

    def __init__(
        self,
        n: int,
        *,
        refresh_share: float = 1.0,
        claim_ttl: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Allow ``n`` (at least 1) concurrent runs, refreshes ``refresh_share`` (in
        (0, 1]; 1 is no limit) of the time by ``clock``; a shard that has not asked for
        its turn (:meth:`refresh_turn`) for ``claim_ttl`` seconds is out of the line."""
        if not 0 < refresh_share <= 1:
            raise ValueError(f"refresh_share must be in (0, 1], got {refresh_share}")
        self.limit = max(1, n)
        self.refresh_share = refresh_share
        self._clock = clock
        self._free = threading.Condition()
        self._ups_waiting = 0
        self._refresh_line: list[int] = []
        """Tickets of the refreshes waiting, in the order they came."""
        self._tickets = 0
        self._refresh_after = float("-inf")
        """When the refresh budget lets the next refresh start."""
        self._claims: dict[str, tuple[float, float]] = {}
        """Per shard whose refresh is due: since when, and when it last asked."""
        self._claim_ttl = claim_ttl
        self.running = 0
        """Runs in progress now."""
        self.refreshing = 0
        """Of those, refreshes."""
        self.peak = 0
        """The most runs that were ever in progress at once."""
        self.refresh_seconds = 0.0
        """How long the refreshes that ended took, all together."""
        self.closed = False
        """Whether the process is stopping: no run starts any more."""

    def __enter__(self) -> EngineSlots:
        self.acquire(refresh=False)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release(refresh=False)

    def acquire(self, *, refresh: bool, give_way: Callable[[], bool] | None = None) -> float:
        """Wait for a slot (a refresh also for one it may take, for the refresh budget
        and for the refreshes that came before it).

        Args:
            refresh: Whether the run is a refresh.
            give_way: Asked while waiting (after :meth:`wake`): whether to stop waiting.

        Returns:
            When the run started (by the clock), for :meth:`release`.

        Raises:
            EngineNotStarted: The process is stopping (:meth:`close`), before or while
                this run waited: a SIGTERM'd daemon would otherwise start the shards'
                queued refreshes one after another, minutes each, before it exits.
            EngineYielded: ``give_way`` said so.
        """
        with self._free:
            ticket = self._enter_line(refresh)
            try:
                while not self._may_start(ticket):
                    if self.closed:
                        raise EngineNotStarted("the daemon is stopping: this run never started")
                    if give_way is not None and give_way():
                        raise EngineYielded("a change came while it waited for a slot")
                    self._free.wait(self._budget_left(ticket))
            finally:
                self._leave_line(ticket)
            self.running += 1
            self.refreshing += int(refresh)
            self.peak = max(self.peak, self.running)
            return self._clock()

    def release(self, *, refresh: bool, started: float | None = None) -> None:
        """Give a slot back; a refresh that ``started`` then spends its share of the
        budget (the next refresh waits in proportion to how long this one took)."""
        with self._free:
            self.running -= 1
            self.refreshing -= int(refresh)
            if refresh and started is not None:
                now = self._clock()
                took = max(0.0, now - started)
                self.refresh_seconds += took
                self._refresh_after = max(
                    self._refresh_after,
                    now + took * (1 - self.refresh_share) / self.refresh_share,
                )
            self._free.notify_all()

    def refresh_turn(self, stack: str, due_at: float) -> bool:
        """Whether ``stack``'s refresh, due since ``due_at``, may start now: the budget
        has room and no refresh due longer asks for it. Every shard whose refresh is
        due asks each iteration; the most overdue goes first, so none waits behind
        shards that came due after it.
        """
        with self._free:
            now = self._clock()
            self._claims[stack] = (due_at, now)
            for other, (_, asked) in list(self._claims.items()):
                if now - asked > self._claim_ttl:
                    del self._claims[other]  # stopped asking: stopped, standby or failing
            if self.closed or now < self._refresh_after or self._refresh_line:
                return False
            first = min(self._claims, key=lambda k: (self._claims[k][0], k))
            if first != stack:
                return False
            del self._claims[stack]
            return True

    def refreshes_due(self) -> int:
        """How many shards' refreshes wait for their turn."""
        with self._free:
            return len(self._claims)

    def refresh_wait(self) -> float:
        """Seconds until the refresh budget lets the next refresh start (0: now)."""
        with self._free:
            return max(0.0, self._refresh_after - self._clock())

    def wake(self) -> None:
        """Have every waiting run ask again whether to go on waiting."""
        with self._free:
            self._free.notify_all()

    def close(self) -> None:
        """The process is stopping: the runs in progress end as they would, none starts."""
        with self._free:
            self.closed = True
            self._free.notify_all()

    def _enter_line(self, refresh: bool) -> int | None:
        if not refresh:
            self._ups_waiting += 1
            return None
        self._tickets += 1
        self._refresh_line.append(self._tickets)
        return self._tickets

    def _leave_line(self, ticket: int | None) -> None:
        if ticket is None:
            self._ups_waiting -= 1
            return
        self._refresh_line.remove(ticket)
        # The next refresh in line may start now (or the one behind one that gave way).
        self._free.notify_all()

    def _may_start(self, ticket: int | None) -> bool:
        if self.closed or self.running >= self.limit:
            return False
        if ticket is None:
            return True
        kept_free = 1 if self.limit >= 2 else 0
        return (
            self._ups_waiting == 0
            and self.running + 1 <= self.limit - kept_free
            and self._refresh_line[0] == ticket
            and self._clock() >= self._refresh_after
        )

    def _budget_left(self, ticket: int | None) -> float | None:
        # A refresh held back by the budget alone wakes when it runs out; everything
        # else it waits for (a slot, an up, its turn) notifies.
        if ticket is None:
            return None
        left = self._refresh_after - self._clock()
        return left if left > 0 else None


class SlotEngine:
    """A shard's engine that runs only while it holds one of the process's slots."""

    def __init__(self, engine: StackEngine, slots: EngineSlots) -> None:
        """Gate ``engine``'s runs on ``slots``."""
        self.engine = engine
        self.slots = slots
        self.busy = False
        """Whether this shard's engine runs (or waits for a slot) now."""
        self.give_way = threading.Event()
        """Set by :meth:`preempt`: the refresh waiting for a slot gives way."""

    def recover(self) -> Sequence[str]:
        """See :meth:`StackEngine.recover`."""
        with self._held():
            return self.engine.recover()

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        """See :meth:`StackEngine.up`."""
        with self._held():
            return self.engine.up(inputs, targets)

    def refresh(self) -> Sequence[str]:
        """See :meth:`StackEngine.refresh`; still waiting for a slot, it gives way to a
        change as a running one does (:meth:`preempt`).

        Raises:
            EngineYielded: :meth:`preempt` stopped it for a change.
        """
        try:
            with self._held(refresh=True):
                if self.give_way.is_set():
                    raise EngineYielded("a change came while it waited for a slot")
                return self.engine.refresh()
        finally:
            self.give_way.clear()

    def preempt(self, reason: str) -> bool:
        """See :meth:`StackEngine.preempt`: a refresh still waiting for a slot stops
        waiting too."""
        if self.engine.preempt(reason):
            return True
        if not self.busy:
            return False
        self.give_way.set()
        self.slots.wake()
        return True

    def worker_urns(self) -> Mapping[str, Sequence[str]]:
        """See :meth:`StackEngine.worker_urns` (reads the state; needs no slot)."""
        return self.engine.worker_urns()

    def last_update(self) -> str | None:
        """See :meth:`StackEngine.last_update` (one page of history; needs no slot)."""
        return self.engine.last_update()

    def _held(self, *, refresh: bool = False) -> _Held:
        return _Held(self, refresh=refresh)


class _Held:
    def __init__(self, engine: SlotEngine, *, refresh: bool) -> None:
        self._engine = engine
        self._refresh = refresh
        self._started: float | None = None

    def __enter__(self) -> None:
        self._engine.busy = True
        try:
            self._started = self._engine.slots.acquire(
                refresh=self._refresh,
                give_way=self._engine.give_way.is_set if self._refresh else None,
            )
        except BaseException:
            self._engine.busy = False
            raise

    def __exit__(self, *exc: object) -> None:
        self._engine.slots.release(refresh=self._refresh, started=self._started)
        self._engine.busy = False


class Elector(Protocol):
    """A shard's Lease elector (:class:`twc.kube.lease.LeaseElector`)."""

    def is_leader(self) -> bool:
        """Whether this replica holds the shard's Lease."""
        ...

    def start(self) -> Any:
        """Take part in the election."""
        ...

    def stop(self, *, release: bool = True) -> None:
        """Stop taking part (handing the Lease back)."""
        ...

    def hold(self) -> AbstractContextManager[None]:
        """Around an engine run: the Lease is not handed over during it."""
        ...

    def inherited_engines(self) -> Sequence[Any]:
        """Engine records of earlier holders, taken over with the Lease."""
        ...


class ShardLeader:
    """A shard's leader gate; the elector behind it can be replaced (to hand a Lease
    back and stand again later)."""

    def __init__(self, make: Callable[[], Elector]) -> None:
        """Elect through electors made by ``make``."""
        self._make = make
        self._lock = threading.Lock()
        self._elector = make()

    def is_leader(self) -> bool:
        """Whether this replica leads the shard now."""
        with self._lock:
            elector = self._elector
        return elector.is_leader()

    def start(self) -> None:
        """Start the election."""
        self._elector.start()

    def _current(self) -> Elector:
        with self._lock:
            return self._elector

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Around an engine run (the current elector's :meth:`Elector.hold`)."""
        with self._current().hold():
            yield

    def inherited_engines(self) -> Sequence[Any]:
        """The current elector's :meth:`Elector.inherited_engines`."""
        return self._current().inherited_engines()

    def stop(self) -> None:
        """Leave the election, handing the Lease back."""
        self._elector.stop(release=True)

    def hand_back(self) -> None:
        """Release the Lease and stand again (the new elector only takes a Lease
        while this replica holds less than its share)."""
        with self._lock:
            old = self._elector
            self._elector = self._make()
        old.stop(release=True)
        self._elector.start()


@dataclass
class Shard:
    """One shard's loop and what steers it."""

    index: int
    """The shard's index."""
    stack: str
    """Its Pulumi stack."""
    namespaces: ShardNamespaces
    """Its namespaces (grow with the assignment)."""
    daemon: Daemon
    """Its loop."""
    engine: SlotEngine
    """Its engine, gated on the process's slots."""
    leader: ShardLeader | None = None
    """Its Lease (``None`` without leader election)."""
    thread: threading.Thread | None = None
    exit_code: int | None = field(default=None)


class AssignmentStore(Protocol):
    """Where the assignment is kept (:class:`twc.kube.shardmap.ShardMapStore`)."""

    def extend(self, load: Mapping[str, int], *, max_workers_per_shard: int) -> ShardMap:
        """Assign new namespaces; the map as recorded."""
        ...


class MergedMetrics:
    """Every shard's metrics (each loop has its own registry) as one ``/metrics``."""

    def __init__(self, registries: Callable[[], Iterable[CollectorRegistry]]) -> None:
        """Merge the registries ``registries`` returns at each scrape."""
        self._registries = registries

    def collect(self) -> list[Metric]:
        """One family per metric name, with every shard's samples."""
        families: dict[str, Metric] = {}
        for registry in self._registries():
            for family in registry.collect():
                found = families.get(family.name)
                if found is None:
                    found = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = found
                found.samples.extend(family.samples)
        return list(families.values())

    def render(self) -> bytes:
        """The merged metrics in the Prometheus text format."""
        return generate_latest(self)

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value summed over shards (see ``DaemonMetrics.value``)."""
        found = False
        total = 0.0
        for family in self.collect():
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    found = True
                    total += sample.value
        return total if found else None


class ShardedDaemon:
    """Every shard of one stack in one process."""

    def __init__(
        self,
        stack: str,
        *,
        store: AssignmentStore,
        load: Callable[[], Mapping[str, int]],
        make_shard: Callable[[int, ShardNamespaces], Shard],
        max_workers_per_shard: int,
        share: Callable[[int], int] | None = None,
        interval: float = 2.0,
        slots: EngineSlots | None = None,
    ) -> None:
        """Prepare (nothing runs until :meth:`run`).

        Args:
            stack: The sharded stack's name.
            store: Keeps the assignment.
            load: Workers per namespace now (fleet file and cluster objects).
            make_shard: Builds shard ``index``'s loop over the given namespaces.
            max_workers_per_shard: The fleet's ``sharding.maxWorkersPerShard``.
            share: Given the number of shards, the most Leases this replica should hold
                (``None``: no leader election, every shard is this replica's).
            interval: Seconds between assignment checks.
            slots: The process's engine slots (reported on ``/status``).
        """
        self.stack = stack
        self._store = store
        self._load = load
        self._make_shard = make_shard
        self._max = max_workers_per_shard
        self._share = share
        self._interval = interval
        self._slots = slots
        self._lock = threading.Lock()
        self.shards: dict[int, Shard] = {}
        self.shard_map: ShardMap | None = None
        self._stop = threading.Event()
        self.wakeup = threading.Event()
        self.exit_code = 0
        self._once = False
        self._started = False

    # --------------------------------------------------------------- control
    @property
    def stopping(self) -> bool:
        """Whether the shards' loops were asked to stop (or, with ``once``, end by
        themselves): their threads then end on purpose."""
        return self._stop.is_set() or self._once

    def request_stop(self, exit_code: int | None = None) -> None:
        """Stop every shard's loop after its step in progress (SIGTERM)."""
        if exit_code is not None:
            self.exit_code = exit_code
        self._stop.set()
        self.wakeup.set()
        if self._slots is not None:
            self._slots.close()
        for shard in self._all():
            shard.daemon.request_stop()

    def _all(self) -> list[Shard]:
        with self._lock:
            return [self.shards[i] for i in sorted(self.shards)]

    # ------------------------------------------------------------ assignment
    def sync(self) -> ShardMap:
        """Extend the assignment for new namespaces; start loops for new shards.

        Raises:
            Exception: The assignment could not be read or written (retried by the
                next round; the running shards go on meanwhile).
        """
        shard_map = self._store.extend(self._load(), max_workers_per_shard=self._max)
        self.shard_map = shard_map
        for index in range(shard_map.shards):
            namespaces = shard_map.namespaces_of(index)
            with self._lock:
                shard = self.shards.get(index)
            if shard is None:
                shard = self._make_shard(index, ShardNamespaces(namespaces))
                with self._lock:
                    self.shards[index] = shard
                logger.info("[%s] shard %s: %s", self.stack, shard.stack, ", ".join(namespaces))
                if self._started:
                    self._start(shard)
            elif shard.namespaces.update(namespaces):
                logger.info(
                    "[%s] shard %s now has %s", self.stack, shard.stack, ", ".join(namespaces)
                )
                shard.daemon.wakeup.set()
        return shard_map

    # ------------------------------------------------------------ leadership
    def held(self) -> int:
        """Shards whose Lease this replica holds (all of them without election)."""
        return sum(1 for s in self._all() if s.leader is None or s.leader.is_leader())

    def may_acquire(self) -> bool:
        """Whether this replica may take one more shard's Lease (below its share)."""
        if self._share is None:
            return True
        shards = self.shard_map.shards if self.shard_map is not None else len(self._all())
        return self.held() < self._share(max(1, shards))

    def rebalance(self) -> str | None:
        """Hand back one Lease when this replica holds more than its share: the
        highest-index shard it leads whose engine is idle. Returns its stack."""
        if self._share is None or self.shard_map is None:
            return None
        share = self._share(self.shard_map.shards)
        leading = [s for s in self._all() if s.leader is not None and s.leader.is_leader()]
        if len(leading) <= share:
            return None
        for shard in sorted(leading, key=lambda s: s.index, reverse=True):
            if not shard.engine.busy:
                assert shard.leader is not None
                logger.info(
                    "[%s] handing back shard %s (holding %d, share %d)",
                    self.stack,
                    shard.stack,
                    len(leading),
                    share,
                )
                shard.leader.hand_back()
                return shard.stack
        return None

    # ------------------------------------------------------------------ run
    def _start(self, shard: Shard) -> None:
        if shard.leader is not None:
            shard.leader.start()

        def body() -> None:
            try:
                shard.exit_code = shard.daemon.run(once=self._once)
            except BaseException:  # a crashed loop fails liveness (the pod restarts)
                logger.exception("[%s] shard %s crashed", self.stack, shard.stack)
                shard.exit_code = 1
                raise

        shard.thread = threading.Thread(target=body, name=f"twc-{shard.stack}", daemon=True)
        shard.thread.start()

    def run(self, *, once: bool = False) -> int:
        """Run every shard until stopped (or one iteration each with ``once``).

        Returns:
            The exit code: the first non-zero one of a shard, else 0.
        """
        self._once = once
        first: BaseException | None = None
        for attempt in range(30):
            try:
                self.sync()
                break
            except Exception as exc:  # noqa: BLE001 - no assignment yet: retried a while, then fatal
                first = first or exc
                logger.warning("[%s] shard assignment not available: %s", self.stack, exc)
                if self._stop.wait(min(1.0 + attempt, 5.0)):
                    return self.exit_code
        else:
            raise RuntimeError(f"[{self.stack}] no shard assignment: {first}")
        self._started = True
        for shard in self._all():
            self._start(shard)
        try:
            if once:
                for shard in self._all():
                    assert shard.thread is not None
                    shard.thread.join()
            else:
                while not self._stop.is_set():
                    self.wakeup.wait(self._interval)
                    self.wakeup.clear()
                    if self._stop.is_set():
                        break
                    try:
                        self.sync()
                        self.rebalance()
                    except Exception as exc:  # noqa: BLE001 - retried next round; shards run on
                        logger.warning("[%s] shard assignment: %s", self.stack, exc)
                    if any(not self._alive(s) for s in self._all()):
                        # A crashed shard loop is a crashed daemon: liveness fails.
                        break
        finally:
            if self._slots is not None:
                self._slots.close()
            for shard in self._all():
                shard.daemon.request_stop()
            for shard in self._all():
                if shard.thread is not None:
                    shard.thread.join()
                if shard.leader is not None:
                    shard.leader.stop()
        codes = [s.exit_code for s in self._all() if s.exit_code]
        return self.exit_code or (codes[0] if codes else 0)

    @staticmethod
    def _alive(shard: Shard) -> bool:
        return shard.thread is None or shard.thread.is_alive() or shard.exit_code == 0

    # --------------------------------------------------------------- probes
    def live(self) -> tuple[bool, str]:
        """Liveness: every shard's loop runs."""
        for shard in self._all():
            ok, text = shard.daemon.live()
            if not ok or not self._alive(shard):
                return False, f"{shard.stack}: {text if not ok else 'its loop ended'}"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Readiness: every shard is ready (a standby shard is)."""
        if not self._all():
            return False, "no shard assignment yet"
        for shard in self._all():
            ok, text = shard.daemon.ready()
            if not ok:
                return False, f"{shard.stack}: {text}"
        return True, f"ok: {len(self._all())} shard(s), leading {self.held()}"

    def status(self) -> dict[str, Any]:
        """Every shard's ``/status``, and the assignment."""
        shard_map = self.shard_map
        return {
            "stack": self.stack,
            "assignment": shard_map.to_json() if shard_map is not None else None,
            "leading": self.held(),
            "leadingShards": sorted(
                s.stack for s in self._all() if s.leader is None or s.leader.is_leader()
            ),
            "engineSlots": None
            if self._slots is None
            else {
                "limit": self._slots.limit,
                "running": self._slots.running,
                "peak": self._slots.peak,
                "refreshShare": self._slots.refresh_share,
                "refreshesDue": self._slots.refreshes_due(),
                "refreshWaitSeconds": round(self._slots.refresh_wait(), 1),
                "refreshSeconds": round(self._slots.refresh_seconds, 1),
            },
            "shards": {s.stack: s.daemon.status() for s in self._all()},
            "at": time.time(),
        }
