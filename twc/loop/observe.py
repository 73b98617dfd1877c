"""Observe: what the iteration reads from the outside, before it decides anything.

Two steps, because the second needs the desired state:

1. :meth:`Observer.observe`: the fleet file (parsed again only when its bytes change),
   the cluster's objects from the watches (as the desired state's
   :class:`~twc.desired.ObjectList` per kind) and the replicas the worker Deployments run
   with;
2. :meth:`Observer.facts`: for the desired workers, their task-queue backlogs (bounded
   concurrency, a request-rate budget), the digests of their connections' credential
   secrets and the namespaces each connection serves.

Faults seen here (a failing watch, an unreadable cluster, Temporal not answering) are
reported to a :class:`FaultSink` while they last; the iteration goes on with what it
has, holding what it cannot know (replicas of an unsampled worker stay).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from twc.builders import connection_name, foreign_owner
from twc.connections import (
    Registry,
    ResolvedConnection,
    WatchedKind,
    default_registry,
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
from twc.kube.watch import NativeSource, QueueSource
from twc.kube.workloads import ObjectRef
from twc.loop.asking import BacklogAsker, PollerAsker
from twc.loop.backlog import BacklogSource, SecretReader
from twc.loop.faults import Fault, sample_fault
from twc.loop.health import DaemonMetrics
from twc.loop.rollouts import RolloutSource, observe_facts
from twc.loop.sampling import SAMPLE_CONCURRENCY, Budgets, SampleResult, TaskQueueRef
from twc.loop.settings import DaemonSettings
from twc.loop.versions import RolloutFacts
from twc.native.status import PollerFacts
from twc.spec import Fleet, ResolvedWorker, StackSelector, load_fleet_file

__all__ = [
    "CachedFleetFile",
    "FaultSink",
    "Observation",
    "Observer",
    "Sources",
    "WorkerFacts",
]

logger = logging.getLogger(__name__)

POLLERS_INTERVAL = 30.0
"""Seconds a task queue's poller count (its workers' ``Polling`` condition) is reused
while it has pollers."""
POLLERS_RECHECK_INTERVAL = 5.0
"""The same for a task queue without pollers, doubling with each such answer up to
:data:`POLLERS_INTERVAL`: a worker that starts polling shows it soon."""


class FaultSink(Protocol):
    """Where observed faults go (the loop's report step)."""

    def fault(self, fault: Fault, source: str, message: str) -> None:
        """``source`` sees ``fault`` now."""
        ...

    def fault_cleared(self, fault: Fault, source: str) -> None:
        """``source`` no longer sees ``fault``."""
        ...


class CachedFleetFile:
    """The fleet file, parsed again only when its bytes change (one parse for every
    reader: a sharded daemon's loops share one). An invalid file's error is raised to
    every reader until its bytes change."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Read ``path`` on each call."""
        self.path = Path(path)
        self._lock = threading.Lock()
        self._last: tuple[bytes | None, Fleet | SpecError] | None = None
        self.parses = 0
        """How often the file was parsed."""

    def __call__(self) -> Fleet:
        """The fleet.

        Raises:
            SpecError: The file is invalid (or unreadable).
        """
        try:
            data: bytes | None = self.path.read_bytes()
        except OSError:
            data = None
        with self._lock:
            if self._last is None or data is None or self._last[0] != data:
                self.parses += 1
                try:
                    answer: Fleet | SpecError = load_fleet_file(self.path)
                except SpecError as exc:
                    answer = exc
                self._last = (data, answer)
            answer = self._last[1]
        if isinstance(answer, SpecError):
            # A new one each time: one exception raised from several threads would
            # collect all of their tracebacks.
            raise SpecError(answer.issues)
        return answer


@dataclass(frozen=True)
class Sources:
    """Everything the loop reads from: the fleet file, the cluster, Temporal."""

    fleet: Callable[[], Fleet]
    """Reads and validates the fleet file; raises ``SpecError``."""
    queues: QueueSource
    """The labelled Queue objects (a watch, or a fixed set)."""
    native: NativeSource | None = None
    """TemporalWorker and connection objects; ``None`` without a cluster."""
    backlogs: BacklogSource | None = None
    """Task-queue backlogs; ``None`` holds autoscaled workers' replicas (no metric)."""
    replicas: Callable[[], Mapping[str, int]] | None = None
    """Replicas of the worker Deployments in the cluster, keyed ``<ns>/<worker>``."""
    scaled: Callable[[], Collection[str]] | None = None
    """Worker Deployments whose ``spec.replicas`` the daemon's autoscaler field manager
    owns (keyed like ``replicas``); ``None``: every live count counts as the
    autoscaler's (no cluster to claim the field in)."""
    deployments: Callable[[], Mapping[str, tuple[int, int]]] | None = None
    """``(replicas, readyReplicas)`` of the worker Deployments, for object status."""
    secrets: SecretReader | None = None
    """Reads credential secrets (or a digest per key, from a cache), so a rotated
    secret changes the desired state; ``None`` leaves secrets out of the hash."""
    secret_data: SecretReader | None = None
    """Reads a credential secret's real data (a new worker's early-applied pod template
    is fingerprinted with it); ``secrets`` when ``None``."""
    registry: Registry | None = None
    """The connection-provider registry (the process-wide one by default)."""
    file: str = "<fleet>"
    """The fleet file's name, for messages."""
    rollouts: RolloutSource | None = None
    """Versioned workers' Deployments and routing (:mod:`twc.loop.rollouts`); ``None``
    without a cluster."""
    record: RecordStore | None = None
    """The stack's record (last accepted specs, held deletions, approvals); ``None``
    without a cluster."""
    objects: Callable[[ObjectRef], Mapping[str, object] | None] | None = None
    """Reads a worker's Deployment or ServiceAccount (``None`` when absent), to find new
    workers whose names someone else's objects have; ``None`` skips that check."""
    program: Mapping[str, Any] = field(default_factory=dict)
    """Inputs of the program outside the fleet (config such as the Temporal address);
    a change forces a full ``up``."""


@dataclass(frozen=True, slots=True)
class Observation:
    """What the first step read."""

    fleet: Fleet
    """The fleet file."""
    cluster: Mapping[str, ObjectList] | None
    """The cluster's objects per kind key; ``None`` when the fleet is the file alone."""
    live: Mapping[str, int] | None
    """Replicas of the worker Deployments; ``None`` when unknown (or no cluster)."""
    live_known: bool = True
    """False when the replicas could not be read (as opposed to: no cluster at all)."""
    scaled: frozenset[str] | None = None
    """Worker Deployments whose replicas the autoscaler's field manager owns; ``None``
    when that is not known (then it is not claimed again)."""


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    """What the second step read for the desired workers."""

    backlogs: Mapping[str, int | None] = field(default_factory=dict)
    """Per autoscaled worker, its backlog; ``None`` when the sample failed."""
    credentials: Mapping[str, str] = field(default_factory=dict)
    """Per credential secret (``<ns>/<name>``), the digest of its data."""
    placement: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Per connection, the namespaces its workers run in."""
    rollouts: RolloutFacts | None = field(default_factory=RolloutFacts)
    """The versioned workers' versions and routing; ``None`` when unknown."""


class Observer:
    """The iteration's reads."""

    def __init__(
        self,
        sources: Sources,
        *,
        settings: DaemonSettings,
        faults: FaultSink,
        metrics: DaemonMetrics,
        clock: Callable[[], float],
        budgets: Budgets,
        asker: PollerAsker,
        sampler: BacklogAsker,
    ) -> None:
        """Read from ``sources``.

        Args:
            sources: The fleet file, cluster and Temporal readers.
            settings: The sampling interval.
            faults: Where faults seen while reading go.
            metrics: Where the backlogs sampled (and the failed samples) are published;
                its stack names the logs.
            clock: Monotonic seconds (how old an answer is).
            budgets: The backlog samples' rate and the poller questions' allowance.
            asker: Asks the poller questions on its thread: an iteration takes in the
                answers that came and never waits for the others.
            sampler: Samples backlogs on its thread, likewise.
        """
        self.sources = sources
        self._settings = settings
        self._faults = faults
        self._limiter = budgets.samples
        self._metrics = metrics
        self._stack = metrics.stack
        self._digests: dict[str, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock = clock
        self._pollers: dict[TaskQueueRef, tuple[PollerFacts, float, int]] = {}
        """Per task queue, its last poller count, when it was read, and how many answers
        in a row had no pollers."""
        self._poller_allowance = budgets.pollers
        self.asker = asker
        self.sampler = sampler
        self._failed: dict[TaskQueueRef, SampleResult] = {}
        """Per task queue, its last answer when that was a failure (the worker's
        replicas are held and the fault reported until a good one comes)."""
        self._samples: dict[TaskQueueRef, tuple[SampleResult, float]] = {}
        """Per autoscaled task queue, its last good backlog sample and when it was taken."""
        self._sampled_at: dict[TaskQueueRef, float] = {}
        """Per autoscaled task queue, the Unix time of that sample (published with it)."""

    @property
    def registry(self) -> Registry:
        """The connection-provider registry."""
        return self.sources.registry or default_registry()

    def close(self) -> None:
        """Close the askers' thread and the rollouts' event loop."""
        self.asker.close()
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """One loop for the daemon's life: temporalio clients are cached per loop."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    # ------------------------------------------------------------ step one
    def observe(self) -> Observation:
        """Read the fleet file, the cluster's objects and the live replicas.

        Raises:
            SpecError: The fleet file is invalid.
            TemporaryError: The cluster's objects have not been listed yet.
        """
        fleet = self.sources.fleet()
        self._check_watches()
        cluster: dict[str, ObjectList] | None = None
        if fleet.cluster_objects:
            cluster = self._cluster()
            if fleet.select is not None:
                cluster[STACKS_KEY] = self._selections(fleet.select)
        live, known = self._read_live()
        scaled: frozenset[str] | None = None
        if known and self.sources.scaled is not None:
            try:
                scaled = frozenset(self.sources.scaled())
            except Exception as exc:  # noqa: BLE001 - unknown ownership is only not re-claimed
                logger.debug("[%s] could not read replica ownership: %s", self._stack, exc)
        return Observation(fleet=fleet, cluster=cluster, live=live, live_known=known, scaled=scaled)

    def _cluster(self) -> dict[str, ObjectList]:
        # A kind whose list failed (or never succeeded) is unknown, never empty: the
        # desired state keeps its last accepted objects, or refuses to be computed
        # (ObjectsUnknown) when there are none yet.
        out: dict[str, ObjectList] = {QUEUE_KIND_KEY: self.sources.queues.observed()}
        native = self.sources.native
        if native is None:
            # No cluster: no such objects at all.
            out[WORKER_KIND_KEY] = ObjectList.known(())
            for kind in self.registry.watched_kinds():
                out[kind_key(kind.kind, kind.api_group)] = ObjectList.known(())
        else:
            out.update(native.observed())
        for key, found in sorted(out.items()):
            if found.is_known:
                self._faults.fault_cleared(Fault.OBJECTS_UNKNOWN, key)
            else:
                self._faults.fault(Fault.OBJECTS_UNKNOWN, key, found.failure or "unknown")
        return out

    def _selections(self, select: StackSelector) -> ObjectList:
        """The other stacks' selections, this stack's published first (unknown, so
        nothing selected is applied, when either fails)."""
        record = self.sources.record
        if record is None:
            return ObjectList.unknown("no stack record to publish the selection on")
        try:
            return record.selections(select.model_dump(exclude_none=True), publish=True)
        except Exception as exc:  # noqa: BLE001 - unknown selections hold the selected kinds
            return ObjectList.unknown(f"{SELECTIONS} in {record.namespace}: {exc}")

    def recall(self) -> StackRecord:
        """The stack's record: the accepted specs (and fleet) a previous daemon kept.

        Raises:
            TemporaryError: The record exists but cannot be read now; without it an
                object that is invalid now would lose its running workers.
        """
        record = self.sources.record
        if record is None:
            return StackRecord()
        try:
            found = record.load()
        except Exception as exc:
            raise TemporaryError(f"cannot read the stack's record {record}: {exc}") from exc
        if found is None:
            logger.info("[%s] no record in %s yet: nothing accepted before", self._stack, record)
            return StackRecord()
        logger.info(
            "[%s] accepted specs from %s: %d objects",
            self._stack,
            record,
            sum(len(v) for v in found.accepted.values()),
        )
        return found

    def watched_kinds(self) -> dict[str, WatchedKind]:
        """Per kind key, the connection kinds the registry knows."""
        return {kind_key(k.kind, k.api_group): k for k in self.registry.watched_kinds()}

    def _check_watches(self) -> None:
        # The watches retry in their own threads; the loop reports what they last saw.
        for source, watch in (
            ("queue-watch", self.sources.queues),
            ("native-watch", self.sources.native),
        ):
            failure = getattr(watch, "failure", None)
            error = failure() if callable(failure) else None
            if error:
                self._faults.fault(Fault.KUBERNETES_UNAVAILABLE, source, str(error))
            else:
                self._faults.fault_cleared(Fault.KUBERNETES_UNAVAILABLE, source)

    def _read_live(self) -> tuple[Mapping[str, int] | None, bool]:
        read = self.sources.replicas
        if read is None:
            return None, True
        try:
            found = read()
        except Exception as exc:  # noqa: BLE001 - what cannot be read is held and reported as a fault
            # Without live counts the autoscaler starts from its own last decisions.
            # Logged once as a fault while it lasts, not every iteration.
            logger.debug("[%s] could not read worker replicas: %s", self._stack, exc)
            self._faults.fault(Fault.KUBERNETES_UNAVAILABLE, "replicas", str(exc))
            return None, False
        self._faults.fault_cleared(Fault.KUBERNETES_UNAVAILABLE, "replicas")
        return found, True

    # ------------------------------------------------------------ step two
    def facts(self, desired: DesiredFleet) -> WorkerFacts:
        """Backlogs of the autoscaled workers, credential digests, connection placement."""
        # Versioned workers scale per version, on each version's own backlog (below).
        autoscaled = {
            k: w
            for k, w in desired.workers.items()
            if w.autoscaling is not None and w.rollout is None
        }
        backlogs = self._sample(desired.fleet, autoscaled)
        resolved: list[tuple[ResolvedWorker, ResolvedConnection]] = []
        for worker in desired.workers.values():
            try:
                resolved.append((worker, self.registry.resolve_worker(worker, desired.fleet)))
            except TwcConnectionError:
                continue  # reported where the worker was merged
        return WorkerFacts(
            backlogs=backlogs,
            credentials=self._credential_digests(resolved),
            placement=_placement(resolved),
            rollouts=observe_facts(
                self.sources.rollouts,
                desired,
                self.event_loop(),
                concurrency=SAMPLE_CONCURRENCY,
            ),
        )

    def _credential_digests(
        self, resolved: Sequence[tuple[ResolvedWorker, ResolvedConnection]]
    ) -> dict[str, str]:
        # The program fingerprints each credential secret where it reads it (the
        # secretSource namespace, else each worker's namespace); so does this.
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
            except Exception as exc:  # noqa: BLE001 - what cannot be read is held and reported as a fault
                # Unreadable for now: keep the last digest rather than trigger an up.
                logger.warning("[%s] could not read secret %s: %s", self._stack, key, exc)
                digests[key] = self._digests.get(key, "unknown")
        self._digests = digests
        return digests

    def _sample(
        self, fleet: Fleet, autoscaled: Mapping[str, ResolvedWorker]
    ) -> dict[str, int | None]:
        source = self.sources.backlogs
        if not autoscaled or source is None:
            self._samples = {}
            self._sampled_at = {}
            self._failed = {}
            self._metrics.set_backlogs(())
            self._sampling_faults({})
            return {}
        refs = source.refs(fleet, autoscaled.values())
        now = self._clock()
        wanted = set(refs.values())
        # Queues no autoscaled worker uses any more are forgotten.
        self._samples = {r: v for r, v in self._samples.items() if r in wanted}
        self._sampled_at = {r: v for r, v in self._sampled_at.items() if r in self._samples}
        results = self._sampled(list(dict.fromkeys(refs.values())), now)
        return self._publish(refs, results)

    def _sampled(
        self, refs: Sequence[TaskQueueRef], now: float
    ) -> dict[TaskQueueRef, SampleResult | None]:
        """The sampler's answers taken in and what is due asked for, without waiting.

        A queue's last good sample stands while its next one is in flight (a backlog is
        at most ``interval`` plus one answer old); a failure stands until a good answer
        replaces it; a queue never answered yet maps to ``None`` (replicas held, no
        fault: nothing failed).
        """
        self._take_samples()
        wanted = set(refs)
        self._failed = {r: v for r, v in self._failed.items() if r in wanted}
        flying = self.sampler.in_flight()
        interval = self._settings.sampling.interval
        due = [
            ref
            for ref in refs
            if ref not in flying
            and (ref not in self._samples or now - self._samples[ref][1] >= interval)
        ]
        if due:
            source = self.sources.backlogs
            assert source is not None
            self.sampler.ask(due, source.describe, self._limiter)
            if self._answered():
                self._take_samples()
        self.sampler.forget(wanted)
        results: dict[TaskQueueRef, SampleResult | None] = {}
        for ref in refs:
            good = self._samples.get(ref)
            results[ref] = good[0] if good is not None else self._failed.get(ref)
        return results

    def _take_samples(self) -> None:
        # The loop's thread only (an iteration, or its wait working out the next sample).
        for ref, answer in self.sampler.answers().items():
            if answer.result.ok:
                self._samples[ref] = (answer.result, answer.at)
                self._sampled_at[ref] = answer.wall
                self._failed.pop(ref, None)
            else:
                self._samples.pop(ref, None)
                self._sampled_at.pop(ref, None)
                self._failed[ref] = answer.result

    def _publish(
        self,
        refs: Mapping[str, TaskQueueRef],
        results: Mapping[TaskQueueRef, SampleResult | None],
    ) -> dict[str, int | None]:
        """Per worker its backlog (``None``: unknown, replicas held), published with
        each sample's time; failures counted and reported as faults."""
        out: dict[str, int | None] = {}
        published: list[tuple[str, str, int, float]] = []
        errors: dict[str, BaseException] = {}
        for key, ref in refs.items():
            result = results.get(ref)
            if result is not None and result.ok and result.backlog is not None:
                out[key] = result.backlog.count
                published.append(
                    (ref.namespace, ref.name, result.backlog.count, self._sampled_at[ref])
                )
            elif result is None and ref in results:
                out[key] = None  # its first sample is on its way (a sampler's)
            else:
                out[key] = None
                errors[key] = (
                    result.error
                    if result is not None and result.error is not None
                    else LookupError("not sampled")
                )
                self._metrics.backlog_errors.labels(self._stack).inc()
                logger.warning(
                    "[%s/%s] backlog unknown, holding replicas: %s",
                    self._stack,
                    key,
                    result.error if result is not None else "not sampled",
                )
        self._metrics.set_backlogs(dict.fromkeys(published))
        self._sampling_faults(errors)
        return out

    def next_sample_in(self, now: float) -> float | None:
        """Seconds until an autoscaled queue's sample is due; ``None`` without any."""
        # Answers that changed nothing woke nobody: their times count here.
        self._take_samples()
        flying = self.sampler.in_flight()
        taken = [at for ref, (_, at) in self._samples.items() if ref not in flying]
        if flying:
            # An answer on its way is taken no sooner than now; an unchanged one wakes
            # nobody, so the loop looks again an interval from now at the latest.
            taken.append(now)
        if not taken:
            return None
        oldest = min(taken)
        return max(0.0, oldest + self._settings.sampling.interval - now)

    def _sampling_faults(self, errors: Mapping[str, BaseException]) -> None:
        found: dict[Fault, list[str]] = {}
        for key, error in sorted(errors.items()):
            found.setdefault(sample_fault(error), []).append(f"{key}: {error}")
        for fault in (Fault.TEMPORAL_UNAVAILABLE, Fault.BACKLOG_SAMPLING_FAILED):
            lines = found.get(fault)
            if lines:
                text = f"{len(lines)} worker(s), replicas held; {'; '.join(lines)}"
                self._faults.fault(fault, "backlog", text)
            else:
                self._faults.fault_cleared(fault, "backlog")

    def conflicts(
        self, desired: DesiredFleet, existing: Collection[str] | None, known: Collection[str]
    ) -> dict[str, str]:
        """New workers whose Deployment or ServiceAccount exists and is not this stack's.

        Only workers new to the stack are read (neither running nor in the previous
        desired state): a worker the stack already holds is never second-guessed, even
        if someone relabelled its objects.

        Returns:
            Per worker key, why (``ObjectExists``); unreadable objects count as free
            (the engine's own ownership check still refuses them).
        """
        read = self.sources.objects
        if read is None or existing is None:
            return {}
        out: dict[str, str] = {}
        for key in sorted(set(desired.workers) - set(existing) - set(known)):
            namespace, _, name = key.partition("/")
            taken: list[str] = []
            for kind in ("Deployment", "ServiceAccount"):
                try:
                    obj = read(ObjectRef(kind, namespace, name))
                except Exception as exc:  # noqa: BLE001 - unreadable: the engine's check decides
                    logger.debug("[%s] could not read %s %s: %s", self._stack, kind, key, exc)
                    continue
                why = foreign_owner(obj, self._stack) if obj is not None else None
                if why is not None:
                    taken.append(f"{kind} {key} exists and was {why}")
            if taken:
                out[key] = "; ".join(taken) + "; twc does not take it over"
        return out

    # ---------------------------------------------------- for object status
    def deployments(self) -> Mapping[str, tuple[int, int]] | None:
        """``(replicas, readyReplicas)`` of the worker Deployments; ``None`` unknown."""
        read = self.sources.deployments
        if read is None:
            return None
        try:
            return read()
        except Exception as exc:  # noqa: BLE001 - what cannot be read is held and reported as a fault
            logger.warning("[%s] could not read worker Deployments: %s", self._stack, exc)
            return None

    def pollers(self, desired: DesiredFleet, keys: Sequence[str]) -> dict[str, PollerFacts]:
        """The pollers of the named workers' task queues (what ``twc status`` checks).

        A count is reused for :data:`POLLERS_INTERVAL` while the queue has pollers (for
        :data:`POLLERS_RECHECK_INTERVAL`, doubling, while it has none), and the queues
        asked about keep to the pollers allowance, oldest answer first. The due
        questions go to the asker's thread; the answers that came are taken in, and one
        that says something new wakes the loop. A worker whose queue was not answered
        yet is missing from the result (``NotChecked``).
        """
        source = self.sources.backlogs
        if not keys or source is None or not hasattr(source, "pollers"):
            return {}
        workers = [desired.workers[k] for k in keys if k in desired.workers]
        refs = source.refs(desired.fleet, workers)
        now = self._clock()
        wanted = set(refs.values())
        known = self._take_pollers({r: v for r, v in self._pollers.items() if r in wanted}, wanted)
        flying = self.asker.in_flight()
        due = sorted(
            (r for r in wanted if r not in flying and self._pollers_due(known.get(r), now)),
            key=lambda r: (known[r][1] if r in known else float("-inf"), str(r)),
        )
        due = due[: self._poller_allowance.take(len(due), now)]
        if due:
            self.asker.ask(due, source.pollers, now)
            if self._answered():
                known = self._take_pollers(known, wanted)
        self.asker.forget(wanted)
        self._pollers = known  # queues no worker uses any more are forgotten
        return {key: known[ref][0] for key, ref in refs.items() if ref in known}

    def _take_pollers(
        self, known: dict[TaskQueueRef, tuple[PollerFacts, float, int]], wanted: set[TaskQueueRef]
    ) -> dict[TaskQueueRef, tuple[PollerFacts, float, int]]:
        for ref, (facts, asked_at) in self.asker.answers().items():
            if ref in wanted:
                known[ref] = (facts, asked_at, self._misses(facts, known.get(ref)))
        return known

    def _answered(self) -> bool:
        """Whether the questions just asked were waited for (the thread's ``wait``)."""
        thread = self.asker.thread
        return thread.wait > 0 and thread.settle(thread.wait)

    @staticmethod
    def _misses(facts: PollerFacts, last: tuple[PollerFacts, float, int] | None) -> int:
        """Answers in a row without pollers, this one included."""
        if facts.pollers is not None and facts.pollers > 0:
            return 0
        return (last[2] if last is not None else 0) + 1

    def _pollers_due(self, cached: tuple[PollerFacts, float, int] | None, now: float) -> bool:
        if cached is None:
            return True
        facts, read_at, misses = cached
        if facts.pollers is not None and facts.pollers > 0:
            interval = POLLERS_INTERVAL
        else:
            backoff = POLLERS_RECHECK_INTERVAL * 2 ** min(max(misses - 1, 0), 16)
            interval = min(POLLERS_INTERVAL, backoff)
        return now - read_at >= interval


def _placement(
    resolved: Sequence[tuple[ResolvedWorker, ResolvedConnection]],
) -> dict[str, list[str]]:
    """The namespaces each connection serves. The program copies its secret (and
    fingerprints it) per namespace, so a worker leaving the last one of them, or arriving
    in a new one, changes the connection's resources too: a targeted up of that worker
    alone would leave them behind, so this is part of the shared state (a full up)."""
    placement: dict[str, set[str]] = {}
    for worker, conn in resolved:
        placement.setdefault(connection_name(conn), set()).add(worker.namespace)
    return {name: sorted(namespaces) for name, namespaces in sorted(placement.items())}
