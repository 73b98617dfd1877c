"""Observe: what an iteration reads from the outside, before it decides anything.

:meth:`Observer.observe` reads the fleet file, the cluster's objects and live replicas;
:meth:`Observer.facts` the desired workers' backlogs, credential digests, placement and versions.
Faults go to the report step's ``fault``; the iteration holds what it cannot know.
:func:`observe_facts` reads the versioned workers' Deployments and Temporal's routing, queues, gates
and backlogs; nothing lives in memory: a new leader continues where the last one was.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from twc.builders import connection_name, foreign_owner, worker_objects
from twc.connections import (
    Registry,
    ResolvedConnection,
    WatchedKind,
    default_registry,
    poller_failure,
)
from twc.desired import (
    QUEUE_KIND_KEY,
    STACKS_KEY,
    WORKER_KIND_KEY,
    DesiredFleet,
    ObjectList,
    kind_key,
)
from twc.errors import SpecError, TemporaryError, TwcConnectionError
from twc.kube.record import SELECTIONS, RecordStore, StackRecord
from twc.kube.watch import NativeSource, QueueSource, wake
from twc.kube.workloads import ObjectRef, ObservedVersion
from twc.native.status import PollerFacts
from twc.reconcile import asking
from twc.reconcile.asking import (
    SAMPLE_CONCURRENCY,
    Answer,
    Asker,
    BacklogSource,
    Budget,
    SecretReader,
    TaskQueueRef,
)
from twc.reconcile.health import DaemonMetrics
from twc.reconcile.outcome import Fault, sample_fault
from twc.reconcile.settings import DaemonSettings
from twc.rollout import RolloutObservation
from twc.shards import namespaces_changed
from twc.spec import Fleet, ResolvedWorker, load_fleet_file
from twc.versioning import GateInputReader, WorkerClients, observe_rollouts

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RolloutFacts:
    """What the observe step read about the versioned workers."""

    observed: Mapping[str, RolloutObservation] = field(default_factory=dict)
    specs: Mapping[str, Mapping[str, Mapping[str, Any] | None]] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class RolloutSource:
    """Where the daemon reads versioned workers from (and routes through)."""

    versions: Callable[[], Mapping[str, Mapping[str, ObservedVersion]]]  # per worker, build
    clients: WorkerClients
    read_input: GateInputReader | None = None  # a gate's ``inputFrom``


def observe_facts(
    source: RolloutSource | None, desired: DesiredFleet, loop: asyncio.AbstractEventLoop
) -> RolloutFacts | None:
    """The versioned workers as seen now; ``None`` without a source (the plan refuses)."""
    versioned = [w for w in desired.workers.values() if w.rollout is not None]
    if not versioned:
        return RolloutFacts()
    if source is None:
        return None
    try:
        found = source.versions()
    except Exception as exc:  # noqa: BLE001 - unknown versions stop the plan, never delete them
        return RolloutFacts(error=f"{type(exc).__name__}: {exc}")
    mine = {w.stack_key: found.get(w.stack_key, {}) for w in versioned}
    deployments = {k: {b: v.deployment for b, v in vs.items()} for k, vs in mine.items()}
    observed = loop.run_until_complete(
        observe_rollouts(
            versioned, desired.fleet, deployments, source.clients, concurrency=SAMPLE_CONCURRENCY
        )
    )
    specs = {k: {b: v.spec for b, v in vs.items()} for k, vs in mine.items()}
    return RolloutFacts(observed=observed, specs=specs)


POLLERS_INTERVAL = 30.0
"""Seconds a task queue's poller count is reused while it has pollers."""
POLLERS_RECHECK_INTERVAL = 5.0
"""The same without pollers, doubling per such answer up to :data:`POLLERS_INTERVAL`."""


class CachedFleetFile:
    """The fleet file, parsed again only when its bytes change; an invalid file's error raises.
    Its bytes are read only when its :func:`signature` changed or is within a second of the last
    read (git's rule for racily clean files: an edit forging the signature goes unseen). While
    another thread parses it, a read answers the last parse at once (``wait``: the new one)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._last: tuple[object, int, bytes | None, Fleet | SpecError] | None = None
        self.parses = 0

    def __call__(self, *, wait: bool = False) -> Fleet:
        now, seen, last = time.time_ns(), signature(self.path), self._last
        if self._lock.acquire(blocking=wait or last is None):  # else another thread parses it
            try:
                last = self._last
                if last is None or seen is None or last[0] != seen or last[1] - seen[2] < 10**9:
                    try:
                        data: bytes | None = self.path.read_bytes()
                    except OSError:
                        data = None
                    if last is None or data is None or last[2] != data:
                        self.parses += 1
                        try:
                            last = (seen, now, data, load_fleet_file(self.path))
                        except SpecError as exc:
                            last = (seen, now, data, exc)
                    self._last = last = (seen, now, data, last[3])
            finally:
                self._lock.release()
        assert last is not None
        if isinstance(answer := last[3], SpecError):
            raise SpecError(answer.issues)  # a new one: threads must not share tracebacks
        return answer


@dataclass(frozen=True)
class Sources:
    """Everything the loop reads from; ``None`` readers are absent (no cluster, no
    Temporal): without ``backlogs`` autoscaled replicas are held, without ``secrets``
    credentials stay out of the hash, without ``objects`` no foreign-object check."""

    fleet: Callable[[], Fleet]
    queues: QueueSource
    native: NativeSource | None = None
    backlogs: BacklogSource | None = None
    replicas: Callable[[], Mapping[str, int]] | None = None
    scaled: Callable[[], Collection[str]] | None = None
    deployments: Callable[[], Mapping[str, tuple[int, int]]] | None = None
    secrets: SecretReader | None = None
    secret_data: SecretReader | None = None
    registry: Registry = field(default_factory=default_registry)
    file: str = "<fleet>"
    rollouts: RolloutSource | None = None
    record: RecordStore | None = None
    objects: Callable[[ObjectRef], Mapping[str, object] | None] | None = None
    program: Mapping[str, Any] = field(default_factory=dict)
    dry_run: Callable[[Fleet, Mapping[str, str], Collection[str]], Mapping[str, str]] | None = None
    """The API server's dry run of some workers' Deployments (fleet, origins, workers): the
    refused ones, with why; raises when it cannot be asked."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What :meth:`Observer.observe` read: the fleet, the cluster's objects per kind key (``None``:
    the file alone), the live replicas (``None``: unknown or no cluster; ``live_known`` False:
    unreadable) and the autoscaler's Deployments (``None``: not known, then not claimed again)."""

    fleet: Fleet
    cluster: Mapping[str, ObjectList] | None
    live: Mapping[str, int] | None
    live_known: bool = True
    scaled: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    """What :meth:`Observer.facts` read: per autoscaled worker its backlog (``None``:
    unknown), per secret (``<ns>/<name>``) its digest, per connection its namespaces, and
    the versioned workers' versions (``None``: unknown)."""

    backlogs: Mapping[str, int | None] = field(default_factory=dict)
    credentials: Mapping[str, str] = field(default_factory=dict)
    placement: Mapping[str, Sequence[str]] = field(default_factory=dict)
    rollouts: RolloutFacts | None = field(default_factory=RolloutFacts)


_Resolved = tuple[ResolvedWorker, ResolvedConnection]
_Placement = tuple[list[ResolvedWorker], list[_Resolved], dict[str, list[str]]]
"""The autoscaled workers, each worker with its connection, per connection its namespaces."""


@dataclass(eq=False)
class Observer:
    """The iteration's reads (what one desired fleet gives is kept while it is the same object);
    questions to Temporal go to the askers' thread, only backlog samples waited for (briefly)."""

    sources: Sources
    _: KW_ONLY
    settings: DaemonSettings
    fault: Callable[[Fault, str, str | None], None]  # (fault, source, message; None: cleared)
    metrics: DaemonMetrics
    clock: Callable[[], float]
    budgets: Budget
    asker: Asker
    sampler: Asker

    def __post_init__(self) -> None:
        self._digests: dict[str, str] = {}
        self._verdicts: dict[str, tuple[ResolvedWorker, str | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._placed: tuple[DesiredFleet, _Placement] | None = None
        self._refs: tuple[DesiredFleet, Sequence[str], dict[str, TaskQueueRef]] | None = None

    def close(self) -> None:
        """Close the askers' thread and the rollouts' event loop."""
        self.asker.thread.close()  # the sampler's too: they share it
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """One loop for the daemon's life: temporalio clients are cached per loop."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def observe(self) -> Observation:
        """Read the fleet file, the cluster's objects and the live replicas."""
        fleet = self.sources.fleet()
        for name, watch in (
            ("queue-watch", self.sources.queues),
            ("native-watch", self.sources.native),
        ):
            # The watches retry in their own threads; the loop reports what they last saw.
            failure = getattr(watch, "failure", None)
            error = failure() if callable(failure) else None
            self.fault(Fault.KUBERNETES_UNAVAILABLE, name, str(error) if error else None)
        cluster: dict[str, ObjectList] | None = None
        if fleet.cluster_objects:
            cluster = self._cluster()
            if fleet.select is not None:
                cluster[STACKS_KEY] = self._selections(fleet.select.model_dump(exclude_none=True))
        live: Mapping[str, int] | None = None
        known, failure = True, None
        if self.sources.replicas is not None:
            try:
                live = self.sources.replicas()
            except Exception as exc:  # noqa: BLE001 - held and reported as a fault while it lasts
                known, failure = False, str(exc)
            self.fault(Fault.KUBERNETES_UNAVAILABLE, "replicas", failure)
        scaled: frozenset[str] | None = None
        if known and self.sources.scaled is not None:
            try:
                scaled = frozenset(self.sources.scaled())
            except Exception as exc:  # noqa: BLE001 - unknown ownership is only not re-claimed
                logger.debug("[%s] could not read replica ownership: %s", self.metrics.stack, exc)
        return Observation(fleet=fleet, cluster=cluster, live=live, live_known=known, scaled=scaled)

    def _cluster(self) -> dict[str, ObjectList]:
        # A kind whose list failed is unknown, never empty: its last accepted objects stay.
        out: dict[str, ObjectList] = {QUEUE_KIND_KEY: self.sources.queues.observed()}
        native = self.sources.native
        if native is None:  # no cluster: no such objects
            out |= dict.fromkeys((WORKER_KIND_KEY, *self.watched_kinds()), ObjectList.known(()))
        else:
            out.update(native.observed())
        for key, found in sorted(out.items()):
            failure = None if found.is_known else (found.failure or "unknown")
            self.fault(Fault.OBJECTS_UNKNOWN, key, failure)
        return out

    def _selections(self, select: Mapping[str, Any]) -> ObjectList:
        record = self.sources.record
        if record is None:
            return ObjectList.unknown("no stack record to publish the selection on")
        try:
            return record.selections(select, publish=True)
        except Exception as exc:  # noqa: BLE001 - unknown selections hold the selected kinds
            return ObjectList.unknown(f"{SELECTIONS} in {record.namespace}: {exc}")

    def recall(self) -> StackRecord:
        """The stack's record (empty without one)."""
        if (record := self.sources.record) is None:
            return StackRecord()
        try:
            found = record.load()
        except Exception as exc:
            raise TemporaryError(f"cannot read the stack's record {record}: {exc}") from exc
        if found is None:
            logger.info(
                "[%s] no record in %s yet: nothing accepted before", self.metrics.stack, record
            )
            return StackRecord()
        count = sum(len(v) for v in found.accepted.values())
        logger.info("[%s] accepted specs from %s: %d objects", self.metrics.stack, record, count)
        return found

    def watched_kinds(self) -> dict[str, WatchedKind]:
        """Per kind key, the connection kinds the registry knows."""
        return {kind_key(k.kind, k.api_group): k for k in self.sources.registry.watched_kinds()}

    def facts(self, desired: DesiredFleet) -> WorkerFacts:
        """Backlogs of the autoscaled workers, credential digests, placement, versions."""
        if (placed := self._placed) is None or placed[0] is not desired:  # the same fleet
            placed = self._placed = (desired, self._place(desired))
        autoscaled, resolved, placement = placed[1]
        return WorkerFacts(
            backlogs=self._sample(desired.fleet, autoscaled),
            credentials=self._credential_digests(resolved),
            placement=placement,
            rollouts=observe_facts(self.sources.rollouts, desired, self.event_loop()),
        )

    def _place(self, desired: DesiredFleet) -> _Placement:
        autoscaled = [
            w for w in desired.workers.values() if w.autoscaling is not None and w.rollout is None
        ]
        resolved: list[_Resolved] = []
        placement: dict[str, set[str]] = {}
        resolve = functools.cache(lambda to: self.sources.registry.resolve(to, desired.fleet))
        for worker in desired.workers.values():
            try:
                conn = resolve(worker.connection)  # once per connection and namespace
            except TwcConnectionError:
                continue  # reported where the worker was merged
            resolved.append((worker, conn))
            # Each namespace gets its own copy of the connection's secret: a shared state.
            placement.setdefault(connection_name(conn), set()).add(worker.namespace)
        return autoscaled, resolved, {name: sorted(ns) for name, ns in sorted(placement.items())}

    def _credential_digests(self, resolved: Sequence[_Resolved]) -> dict[str, str]:
        # Fingerprinted where the program reads each secret (secretSource, else the worker's).
        read = self.sources.secrets
        if read is None:
            return {}
        digests: dict[str, str] = {}
        for worker, conn in resolved:
            if conn.secret_name is None:
                continue
            namespace = conn.secret_source_namespace or worker.namespace
            key = f"{namespace}/{conn.secret_name}"
            if key in digests:
                continue
            try:
                digests[key] = conn.secret_digest(read(namespace, conn.secret_name))
            except LookupError:
                digests[key] = "missing"
            except Exception as exc:  # noqa: BLE001 - unreadable for now: the last digest stays
                logger.warning("[%s] could not read secret %s: %s", self.metrics.stack, key, exc)
                digests[key] = self._digests.get(key, "unknown")
        self._digests = digests
        return digests

    def _sample(self, fleet: Fleet, autoscaled: Sequence[ResolvedWorker]) -> dict[str, int | None]:
        source = self.sources.backlogs
        refs = source.refs(fleet, autoscaled) if autoscaled and source is not None else {}
        answers = {}
        if source is not None:
            answers = self.sampler.poll(
                refs.values(),
                source.describe,
                now=self.clock(),
                reuse=lambda a: self.settings.sampling.interval if a.ok else 0.0,
                limiter=self.budgets,
            )
        out: dict[str, int | None] = {}
        counts: dict[tuple[str, str], int] = {}
        times: dict[tuple[str, str], float] = {}
        errors: dict[str, BaseException] = {}
        for key, ref in refs.items():
            answer = answers.get(ref)
            out[key] = None  # not answered yet: replicas held, nothing failed
            if answer is None:
                continue
            if answer.error is None:
                queue, out[key] = (ref.namespace, ref.name), answer.value.scaled
                counts[queue], times[queue] = answer.value.count, answer.wall
                continue
            errors[key] = answer.error
            self.metrics.backlog_errors.labels(self.metrics.stack).inc()
            stack = self.metrics.stack
            logger.warning(
                "[%s/%s] backlog unknown, holding replicas: %s", stack, key, answer.error
            )
        self.metrics.publish(task_queue_backlog=counts, task_queue_backlog_sampled_at_seconds=times)
        for fault in (Fault.TEMPORAL_UNAVAILABLE, Fault.BACKLOG_SAMPLING_FAILED):
            lines = [f"{k}: {e}" for k, e in sorted(errors.items()) if sample_fault(e) is fault]
            text = f"{len(lines)} worker(s), replicas held; {'; '.join(lines)}" if lines else None
            self.fault(fault, "backlog", text)
        return out

    def next_sample_in(self, now: float) -> float | None:
        """Seconds until an autoscaled queue's sample is due; ``None`` without any."""
        return self.sampler.next_due(now, self.settings.sampling.interval)

    def conflicts(
        self, desired: DesiredFleet, existing: Collection[str] | None, known: Collection[str]
    ) -> dict[str, str]:
        """Per new worker one of whose objects exists and is not this stack's, why."""
        if (read := self.sources.objects) is None or existing is None:
            return {}
        out: dict[str, str] = {}
        for key in sorted(set(desired.workers) - set(existing) - set(known)):
            given = desired.inputs.versions.get(key)
            builds = given.versions if given is not None else ()
            taken: list[str] = []
            for entry in sorted(worker_objects(desired.workers[key], builds)):
                kind, _, where = entry.partition(" ")
                namespace, _, name = where.partition("/")
                try:
                    obj = read(ObjectRef(kind, namespace, name))
                except Exception as exc:  # noqa: BLE001 - unreadable: the engine's check decides
                    logger.debug("[%s] could not read %s: %s", self.metrics.stack, entry, exc)
                    continue
                why = foreign_owner(obj, self.metrics.stack) if obj is not None else None
                if why is not None:
                    taken.append(f"{entry} exists and was {why}")
            if taken:
                out[key] = "; ".join(taken) + "; twc does not take it over"
        return out

    def refusals(
        self, desired: DesiredFleet, previous: DesiredFleet | None, skip: Collection[str]
    ) -> dict[str, str]:
        """Per TemporalWorker object whose worker is new or changed since ``previous``, the
        API server's refusal of its Deployment; each verdict is kept while the worker is."""
        if (dry_run := self.sources.dry_run) is None:
            return {}
        before = previous.workers if previous is not None else {}
        known, self._verdicts = self._verdicts, {}
        ask: list[str] = []
        for key, origin in desired.origins.items():
            worker, old = desired.workers[key], before.get(key)
            if not origin.startswith("TemporalWorker ") or key in skip or old is worker:
                continue  # unchanged workers are the same objects: compared at once
            if old == worker:
                continue
            if key in known and known[key][0] == worker:
                self._verdicts[key] = known[key]
            else:
                ask.append(key)
        failure = None
        if ask:
            try:
                said = dry_run(desired.fleet, desired.origins, ask)
            except Exception as exc:  # noqa: BLE001 - not asked: nothing is refused, a fault says why
                failure = str(exc)
            else:
                self._verdicts |= {k: (desired.workers[k], said.get(k)) for k in ask}
        self.fault(Fault.KUBERNETES_UNAVAILABLE, "dry-run", failure)
        return {k: why for k, (_, why) in self._verdicts.items() if why is not None}

    def deployments(self) -> Mapping[str, tuple[int, int]] | None:
        """``(replicas, readyReplicas)`` of the worker Deployments; ``None`` unknown."""
        if (read := self.sources.deployments) is None:
            return None
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - unknown: the status says so
            logger.warning("[%s] could not read worker Deployments: %s", self.metrics.stack, exc)
            return None

    def pollers(self, desired: DesiredFleet, keys: Sequence[str]) -> dict[str, PollerFacts]:
        """The pollers of the named workers' task queues; an unanswered queue is missing."""
        source = self.sources.backlogs
        if not keys or source is None or not hasattr(source, "pollers"):
            return {}
        if (last := self._refs) is None or last[0] is not desired or last[1] != keys:
            workers = [desired.workers[k] for k in keys if k in desired.workers]
            last = self._refs = (desired, keys, source.refs(desired.fleet, workers))
        refs = last[2]
        answers = self.asker.poll(
            refs.values(),
            source.pollers,
            now=self.clock(),
            reuse=_pollers_reuse,
            deadline=asking.POLLERS_DEADLINE,
            take=self.budgets.take,
        )
        return {
            key: PollerFacts(a.value)
            if a.error is None
            else PollerFacts(None, *poller_failure(a.error))
            for key, ref in refs.items()
            if (a := answers.get(ref)) is not None
        }


def _pollers_reuse(answer: Answer) -> float:
    slow = min(POLLERS_INTERVAL, POLLERS_RECHECK_INTERVAL * 2.0 ** min(answer.repeats, 16))
    return POLLERS_INTERVAL if answer.ok and answer.value > 0 else slow


def signature(path: Path) -> tuple[int, int, int] | None:
    """``(inode, size, mtime ns)`` of the file ``path`` resolves to; ``None`` if none."""
    try:
        st = os.stat(path)  # follows symlinks: a ConfigMap's ..data swap shows
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class FleetFileWatch:
    """A thread that wakes the loops whenever the fleet file changes: given the parse
    (``read``), only the loops of the namespaces whose part of the file changed
    (:func:`twc.shards.namespaces_changed`, through a sharded daemon's fanout). An edit
    outside the namespaced lists, an invalid file, or a version a loop parsed that the
    watch never compared (two writes within one look) wakes every loop."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        wakeup: threading.Event,
        *,
        interval: float = 1.0,
        read: CachedFleetFile | None = None,
    ):
        self.path = Path(path)
        self.interval = interval
        self._wakeup = wakeup
        self._read = read
        self._last: tuple[Fleet, int] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes = 0

    def start(self) -> None:
        """Take the file as it is now, then watch it."""
        if self._thread is None:
            seen = signature(self.path)
            self._last = self._parsed()
            self._thread = threading.Thread(
                target=self._run, args=(seen,), name="fleet-file-watch", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop watching (waits for the thread: at most one interval)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5.0)

    def _parsed(self) -> tuple[Fleet, int] | None:
        try:
            return (self._read(wait=True), self._read.parses) if self._read is not None else None
        except SpecError:
            return None

    def _run(self, seen: tuple[int, int, int] | None) -> None:
        while not self._stop.wait(self.interval):
            now = signature(self.path)
            if now == seen:
                continue
            seen, self.changes = now, self.changes + 1
            last, self._last = self._last, self._parsed()
            changed = None
            if last is not None and self._last is not None and self._last[1] - last[1] <= 1:
                changed = namespaces_changed(last[0], self._last[0])
            if changed is None:
                logger.info("fleet file %s changed: reconciling now", self.path)
                self._wakeup.set()
                continue
            logger.info("fleet file %s changed in namespaces %s", self.path, sorted(changed))
            for namespace in sorted(changed):
                wake(self._wakeup, namespace)
