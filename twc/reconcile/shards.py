"""One daemon process for every shard of a sharded stack.

Each shard is a :class:`~twc.reconcile.daemon.Daemon` on its own thread over views of the shared
watches cut to its namespaces, applying its own stack; shards share engine slots, the
assignment, ``/metrics``, probes and ``/status``. Each has its own Lease: a replica takes one
only below its share and hands back its surplus, one idle shard per round.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from twc.desired import DesiredInputs, ObjectList
from twc.engine.automation import StackEngine, UpReport
from twc.engine.errors import EngineYielded
from twc.kube.watch import NativeSource, QueueSource
from twc.reconcile.daemon import Daemon, LeaderGate
from twc.reconcile.outcome import EngineNotStarted
from twc.shards import ShardMap, shard_part

logger = logging.getLogger(__name__)

Namespaces = Callable[[], tuple[str, ...]]
SYNC_INTERVAL = 2.0  # seconds between two rounds of the assignment and the hand-backs
_V = TypeVar("_V")
_W = TypeVar("_W")
_S = TypeVar("_S", QueueSource, NativeSource)


class FanoutWakeup(threading.Event):
    """Set by the shared watches: :meth:`set_for` wakes the loops a namespace concerns."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._subscribers: dict[threading.Event, Namespaces | None] = {}

    def subscribe(self, event: threading.Event, namespaces: Namespaces | None = None) -> None:
        """Set ``event`` on changes in ``namespaces`` (read at each change), or on all."""
        with self._lock:
            self._subscribers[event] = namespaces

    def unsubscribe(self, event: threading.Event) -> None:
        """Stop setting ``event``."""
        with self._lock:
            self._subscribers.pop(event, None)

    def set(self) -> None:
        """Wake every subscriber."""
        self.set_for(None)

    def set_for(self, namespace: str | None) -> None:
        """Wake the subscribers a change in ``namespace`` concerns (all for ``None``)."""
        super().set()
        with self._lock:
            subscribers = list(self._subscribers.items())
        for event, namespaces in subscribers:
            if namespace is None or namespaces is None or namespace in namespaces():
                event.set()


def shard_keyed(
    read: Callable[[], Mapping[str, Mapping[str, _V]]], namespaces: Namespaces
) -> Callable[[], dict[str, _V]]:
    """``read`` (entries per namespace) cut to the shard's namespaces."""

    def cut() -> dict[str, _V]:
        found = read()  # once: one consistent reading
        return {k: v for ns in namespaces() for k, v in (found.get(ns) or {}).items()}

    return cut


class KeptCuts:
    """Shared values cut to one shard's namespaces; a cut is made again only when its shared
    value is another object or the namespaces changed, else it is the same object."""

    def __init__(self, namespaces: Namespaces) -> None:
        self._namespaces = namespaces
        self._last: dict[str, tuple[object, tuple[str, ...], object]] = {}

    def get(self, key: str, shared: _V, cut: Callable[[_V, tuple[str, ...]], _W]) -> _W:
        """``cut(shared, namespaces)``, kept under ``key``."""
        ns, last = self._namespaces(), self._last.get(key)
        if last is None or last[0] is not shared or last[1] != ns:
            last = self._last[key] = (shared, ns, cut(shared, ns))
        return cast(_W, last[2])


def _cut_objects(found: ObjectList, ns: tuple[str, ...]) -> ObjectList:
    return found if found.objects is None else ObjectList.of_api(shard_part(found.objects, ns))


class ShardNamespaces:
    """One shard's namespaces, sorted, as the assignment gives them."""

    def __init__(self, initial: tuple[str, ...] = ()) -> None:
        self._namespaces = tuple(sorted(initial))

    def __call__(self) -> tuple[str, ...]:
        return self._namespaces

    def update(self, namespaces: tuple[str, ...]) -> bool:
        """Replace the namespaces; whether they changed."""
        old, self._namespaces = self._namespaces, tuple(sorted(namespaces))
        return old != self._namespaces


class _ShardView(Generic[_S]):
    """A shared watch cut to one shard's namespaces, waking its loop through ``fanout``."""

    def __init__(self, shared: _S, namespaces: Namespaces, fanout: FanoutWakeup) -> None:
        self._shared: _S = shared
        self._namespaces = namespaces
        self._fanout = fanout
        self._wakeup: threading.Event | None = None
        self._cuts = KeptCuts(namespaces)

    def start(self, wakeup: threading.Event) -> None:
        """Subscribe the loop's wake-up."""
        self._wakeup = wakeup
        self._fanout.subscribe(wakeup, self._namespaces)

    def stop(self) -> None:
        """Unsubscribe."""
        if self._wakeup is not None:
            self._fanout.unsubscribe(self._wakeup)

    def failure(self) -> str | None:
        """The shared watch's last failure."""
        failure = getattr(self._shared, "failure", None)
        return failure() if callable(failure) else None


class ShardQueues(_ShardView[QueueSource]):
    """The shared Queue watch, cut to the shard's namespaces."""

    def observed(self) -> ObjectList:
        """The shard's objects as the desired state's input (unknown until listed); the same
        object while the shared one is and the shard's namespaces stay."""
        return self._cuts.get("queues", self._shared.observed(), _cut_objects)


class ShardNative(_ShardView[NativeSource]):
    """The shared TemporalWorker and connection watches, cut to the shard's namespaces."""

    def observed(self) -> dict[str, ObjectList]:
        """Per kind key, the shard's objects (a kind whose list failed stays unknown); the
        same object while the shared one is and the shard's namespaces stay."""
        found = self._shared.observed().items()
        return {key: self._cuts.get(key, shared, _cut_objects) for key, shared in found}


class EngineSlots:
    """At most ``n`` engine runs at once, ups first, refreshes held to ``refresh_share``."""

    def __init__(
        self,
        n: int,
        *,
        refresh_share: float = 1.0,
        claim_ttl: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < refresh_share <= 1:
            raise ValueError(f"refresh_share must be in (0, 1], got {refresh_share}")
        self.limit = max(1, n)
        self.refresh_share = refresh_share
        self._clock, self._claim_ttl = clock, claim_ttl
        self._free = threading.Condition()
        self._waiting = {True: 0, False: 0}  # runs waiting: refreshes (True), ups (False)
        self._refresh_after = float("-inf")
        self._claims: dict[str, tuple[float, float]] = {}  # stack: (due since, last asked)
        self.running = self.peak = 0  # runs now, the most at once
        self.refresh_seconds = 0.0
        self.closed = False

    def acquire(self, *, refresh: bool, give_way: Callable[[], bool] | None = None) -> float:
        """Wait for a slot (a refresh also for its turn and the budget); when it started."""
        with self._free:
            self._waiting[refresh] += 1
            try:
                while not self._may_start(refresh):
                    if self.closed:
                        raise EngineNotStarted("the daemon is stopping: this run never started")
                    if give_way is not None and give_way():
                        raise EngineYielded("a change came while it waited for a slot")
                    left = self._refresh_after - self._clock() if refresh else 0.0
                    self._free.wait(left if left > 0 else None)
            finally:
                self._waiting[refresh] -= 1
            self.running += 1
            self.peak = max(self.peak, self.running)
            return self._clock()

    def _may_start(self, refresh: bool) -> bool:
        if self.closed or self.running >= self.limit:
            return False
        kept_free = 1 if self.limit >= 2 else 0
        return not refresh or (
            self._waiting[False] == 0
            and self.running + 1 <= self.limit - kept_free
            and self._clock() >= self._refresh_after
        )

    def release(self, *, refresh: bool, started: float | None = None) -> None:
        """Give a slot back; a refresh that ``started`` then spends its budget."""
        with self._free:
            self.running -= 1
            if refresh and started is not None:
                now = self._clock()
                took = max(0.0, now - started)
                self.refresh_seconds += took
                pause = took * (1 - self.refresh_share) / self.refresh_share
                self._refresh_after = max(self._refresh_after, now + pause)
            self._free.notify_all()

    def refresh_turn(self, stack: str, due_at: float) -> bool:
        """Whether ``stack``'s refresh (due since ``due_at``) may start: budget, longest due."""
        with self._free:
            now = self._clock()
            self._claims[stack] = (due_at, now)
            # Out of line: who stopped asking (stopped, standby or failing).
            self._claims = {k: c for k, c in self._claims.items() if now - c[1] <= self._claim_ttl}
            if self.closed or now < self._refresh_after or self._waiting[True]:
                return False
            if min(self._claims, key=lambda k: (self._claims[k][0], k)) != stack:
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
        """The process is stopping: runs in progress end as they would, none starts."""
        with self._free:
            self.closed = True
            self._free.notify_all()


class SlotEngine:
    """A shard's engine that runs only while it holds one of the process's slots."""

    def __init__(self, engine: StackEngine, slots: EngineSlots) -> None:
        self.engine = engine
        self.slots = slots
        self.busy = False
        self.give_way = threading.Event()
        # Reads of the stack need no slot.
        self.worker_urns = engine.worker_urns
        self.last_update = engine.last_update

    @contextlib.contextmanager
    def _held(self, *, refresh: bool = False) -> Iterator[None]:
        self.busy = True
        try:
            give_way = self.give_way.is_set if refresh else None
            started = self.slots.acquire(refresh=refresh, give_way=give_way)
            try:
                yield
            finally:
                self.slots.release(refresh=refresh, started=started)
        finally:
            self.busy = False

    def recover(self) -> Sequence[str]:
        """:meth:`StackEngine.recover` in a slot."""
        with self._held():
            return self.engine.recover()

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        """:meth:`StackEngine.up` in a slot."""
        with self._held():
            return self.engine.up(inputs, targets)

    def refresh(self) -> Sequence[str]:
        """:meth:`StackEngine.refresh` in a slot; EngineYielded when :meth:`preempt` stopped it."""
        try:
            with self._held(refresh=True):
                if self.give_way.is_set():
                    raise EngineYielded("a change came while it waited for a slot")
                return self.engine.refresh()
        finally:
            self.give_way.clear()

    def preempt(self, reason: str) -> bool:
        """:meth:`StackEngine.preempt`; a refresh still waiting for a slot stops too."""
        if self.engine.preempt(reason):
            return True
        if not self.busy:
            return False
        self.give_way.set()
        self.slots.wake()
        return True


class Elector(LeaderGate, Protocol):
    """A shard's Lease elector (:class:`twc.kube.lease.LeaseElector`)."""

    def start(self) -> Any: ...
    def stop(self, *, release: bool = True) -> None: ...
    def hold(self) -> AbstractContextManager[None]: ...
    def inherited_engines(self) -> Sequence[Any]: ...


class ShardLeader:
    """A shard's leader gate whose elector can be replaced (to hand a Lease back)."""

    def __init__(self, make: Callable[[], Elector]) -> None:
        self._make = make
        self._elector = make()  # replaced whole by hand_back: a read needs no lock

    def is_leader(self) -> bool:
        """Whether this replica leads the shard now."""
        return self._elector.is_leader()

    def start(self) -> None:
        """Start the election."""
        self._elector.start()

    def hold(self) -> AbstractContextManager[None]:
        """Around an engine run: the Lease is not handed over during it."""
        return self._elector.hold()

    def inherited_engines(self) -> Sequence[Any]:
        """Engine records of earlier holders, taken over with the Lease."""
        return self._elector.inherited_engines()

    def stop(self) -> None:
        """Leave the election, handing the Lease back."""
        self._elector.stop(release=True)

    def hand_back(self) -> None:
        """Release the Lease and stand again (below this replica's share; one caller at a time)."""
        old, self._elector = self._elector, self._make()
        old.stop(release=True)
        self._elector.start()


@dataclass
class Shard:
    """One shard's loop and what steers it (``leader``: ``None`` without election)."""

    index: int
    stack: str
    namespaces: ShardNamespaces
    daemon: Daemon
    engine: SlotEngine
    leader: ShardLeader | None = None
    thread: threading.Thread | None = None
    exit_code: int | None = None


class AssignmentStore(Protocol):
    """Where the assignment is kept (:class:`twc.kube.shards.ShardMapStore`)."""

    def extend(self, load: Mapping[str, int], *, max_workers_per_shard: int) -> ShardMap: ...


class MergedMetrics:
    """Every shard's metrics registry as one ``/metrics``."""

    def __init__(self, registries: Callable[[], Iterable[CollectorRegistry]]) -> None:
        self._registries = registries

    def collect(self) -> list[Metric]:
        """One family per metric name, with every shard's samples."""
        families: dict[str, Metric] = {}
        for registry in self._registries():
            for family in registry.collect():
                found = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type, family.unit)
                )
                found.samples.extend(family.samples)
        return list(families.values())

    def render(self) -> bytes:
        """The merged metrics in the Prometheus text format."""
        return generate_latest(self)


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
        slots: EngineSlots,
    ) -> None:
        self.stack, self._store, self._load, self._make_shard = stack, store, load, make_shard
        self._max, self._share, self._slots = max_workers_per_shard, share, slots
        self._lock = threading.Lock()
        self.shards: dict[int, Shard] = {}
        self.shard_map: ShardMap | None = None
        self._stop = threading.Event()
        self.wakeup = threading.Event()
        self.exit_code = 0
        self._once = self._started = False

    @property
    def stopping(self) -> bool:
        """Whether the shards' loops were asked to stop (or end by themselves, ``once``)."""
        return self._stop.is_set() or self._once

    def request_stop(self, exit_code: int | None = None) -> None:
        """Stop every shard's loop after its step in progress (SIGTERM)."""
        if exit_code is not None:
            self.exit_code = exit_code
        self._stop.set()
        self.wakeup.set()
        self._close()

    def _close(self) -> None:
        self._slots.close()
        for shard in self._all():
            shard.daemon.request_stop()

    def _all(self) -> list[Shard]:
        with self._lock:
            return [self.shards[i] for i in sorted(self.shards)]

    def sync(self) -> ShardMap:
        """Extend the assignment for new namespaces and start loops for new shards."""
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

    def _leading(self) -> list[Shard]:
        return [s for s in self._all() if s.leader is None or s.leader.is_leader()]

    def held(self) -> int:
        """Shards whose Lease this replica holds (all of them without election)."""
        return len(self._leading())

    def may_acquire(self) -> bool:
        """Whether this replica may take one more shard's Lease (below its share)."""
        if self._share is None:
            return True
        shards = self.shard_map.shards if self.shard_map is not None else len(self._all())
        return self.held() < self._share(max(1, shards))

    def rebalance(self) -> str | None:
        """Above its share, hand back the Lease of the highest idle shard; its stack."""
        if self._share is None or self.shard_map is None:
            return None
        share = self._share(self.shard_map.shards)
        leading = [s for s in self._leading() if s.leader is not None]
        if len(leading) <= share:
            return None
        for shard in sorted(leading, key=lambda s: s.index, reverse=True):
            if not shard.engine.busy and shard.leader is not None:
                said = "[%s] handing back shard %s (holding %d, share %d)"
                logger.info(said, self.stack, shard.stack, len(leading), share)
                shard.leader.hand_back()
                return shard.stack
        return None

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
        """Run every shard until stopped (``once``: one iteration); the first non-zero exit code."""
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
                    if shard.thread is not None:
                        shard.thread.join()
            else:
                self._supervise()
        finally:
            self._close()
            for shard in self._all():
                if shard.thread is not None:
                    shard.thread.join()
                if shard.leader is not None:
                    shard.leader.stop()
        codes = [s.exit_code for s in self._all() if s.exit_code]
        return self.exit_code or (codes[0] if codes else 0)

    def _supervise(self) -> None:
        while not self._stop.is_set():
            self.wakeup.wait(SYNC_INTERVAL)
            self.wakeup.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
                self.rebalance()
            except Exception as exc:  # noqa: BLE001 - retried next round; shards run on
                logger.warning("[%s] shard assignment: %s", self.stack, exc)
            if not all(self._alive(s) for s in self._all()):
                return  # a crashed shard loop is a crashed daemon: liveness fails

    @staticmethod
    def _alive(shard: Shard) -> bool:
        return shard.thread is None or shard.thread.is_alive() or shard.exit_code == 0

    def live(self) -> tuple[bool, str]:
        """Liveness: every shard's loop runs."""
        for shard in self._all():
            ok, text = shard.daemon.live()
            if not ok or not self._alive(shard):
                return False, f"{shard.stack}: {text if not ok else 'its loop ended'}"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Readiness: every shard is ready (a standby shard is)."""
        shards = self._all()
        if not shards:
            return False, "no shard assignment yet"
        for shard in shards:
            ok, text = shard.daemon.ready()
            if not ok:
                return False, f"{shard.stack}: {text}"
        return True, f"ok: {len(shards)} shard(s), leading {self.held()}"

    def status(self) -> dict[str, Any]:
        """Every shard's ``/status``, and the assignment."""
        slots = self._slots
        return {
            "stack": self.stack,
            "assignment": self.shard_map.to_json() if self.shard_map is not None else None,
            "leading": self.held(),
            "leadingShards": sorted(s.stack for s in self._leading()),
            "engineSlots": {
                "limit": slots.limit,
                "running": slots.running,
                "peak": slots.peak,
                "refreshShare": slots.refresh_share,
                "refreshesDue": slots.refreshes_due(),
                "refreshWaitSeconds": round(slots.refresh_wait(), 1),
                "refreshSeconds": round(slots.refresh_seconds, 1),
            },
            "shards": {s.stack: s.daemon.status() for s in self._all()},
            "at": time.time(),
        }
