"""The reconcile loop of ``twc run``: one loop per stack (DESIGN §5).

Each iteration:

1. loads the fleet file and merges the labelled kmsvc Queue objects from the watch
   (invalid ones are reported and skipped, one at a time);
2. samples the backlog of every autoscaled worker's task queue (bounded concurrency, a
   request-rate budget) and turns it into replicas with the HPA math;
3. hashes the desired fleet and runs ``up`` only when the hash differs from the last
   applied one, targeted at the changed workers' resources when only a few changed;
4. runs ``refresh`` on schedule; drift found makes the next iteration a full ``up``.

A failing step becomes an :class:`~twc.controller.outcome.Outcome` and the loop sleeps
its backoff; nothing escapes an iteration. The sleep between iterations is woken by the
Queue watch (reconcile at once) and by :meth:`Daemon.request_stop` (SIGTERM: the step
in progress finishes, then the loop returns). Every collaborator that talks to the
outside (engine, Queue source, backlogs, replica reader, leader gate) and the clocks are
injected, so the loop is unit-tested with fakes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from twc.builders import connection_name
from twc.connections import Registry, ResolvedConnection, default_registry
from twc.controller.automation import Overlay, StackEngine
from twc.controller.autoscale import ScaleDecision, ScalingState, WorkerScaleInput, scale_fleet
from twc.controller.backlog import BacklogSource, SecretReader, worker_key
from twc.controller.cluster_objects import merge_cluster_objects
from twc.controller.desired import (
    DesiredState,
    ReconcileAction,
    ReconcileDecision,
    decide_reconcile,
    desired_state,
)
from twc.controller.early import (
    EARLY_FIELD_MANAGER,
    EarlyApplier,
    ObjectRef,
    early_objects,
    plan_release,
    ref_of,
)
from twc.controller.faults import (
    BLOCKING,
    Fault,
    FaultBook,
    FaultChange,
    engine_fault,
    engine_reason,
    sample_fault,
)
from twc.controller.health import DaemonMetrics
from twc.controller.interruptible import LoopState
from twc.controller.interruptible import sleep as interruptible_sleep
from twc.controller.native import (
    FINALIZER,
    WORKER_PLURAL,
    IdentityKey,
    NativeMerge,
    NativeObject,
    NativeSnapshot,
    RejectedObject,
    finalizer_updates,
    identity_key,
)
from twc.controller.native_cluster import NativeSource, NativeWriter, rfc3339
from twc.controller.native_status import (
    DeploymentFacts,
    PollerFacts,
    accepted_status,
    rejected_status,
    status_patch,
)
from twc.controller.outcome import (
    FailureReason,
    Outcome,
    OutcomeKind,
    TemporaryError,
    outcome_of,
)
from twc.controller.queues import MergedFleet, QueueSource
from twc.controller.sampling import RateLimiter, TaskQueueRef, TokenBucket, sample_backlogs
from twc.controller.settings import DaemonSettings
from twc.errors import TwcConnectionError
from twc.spec import Fleet, ResolvedWorker
from twc.spec.crds import CRD_VERSION, WORKER_GROUP, WORKER_KIND

__all__ = ["Daemon", "LeaderGate", "Plan"]

_POSITIONAL = {"source", "connection_source"}
"""ResolvedWorker fields that say where in the file a worker is, not what it is."""

logger = logging.getLogger(__name__)

Sleep = Callable[[float, threading.Event], bool]


class LeaderGate(Protocol):
    """Whether this daemon may apply the stack now (the Lease elector)."""

    def is_leader(self) -> bool:
        """True while this daemon holds the Lease."""
        ...


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything one iteration decided before touching the engine."""

    merged: MergedFleet
    """The fleet file with the accepted Queue objects."""
    workers: Mapping[str, ResolvedWorker]
    """Every worker, keyed ``<namespace>/<name>``."""
    desired: DesiredState
    """The hashes of the desired fleet."""
    overlay: Overlay
    """The program's extra input for this desired state."""
    replicas: Mapping[str, int]
    """Desired replicas of every worker."""
    current: Mapping[str, int]
    """Replicas of the workers' Deployments in the cluster, where known."""
    decisions: Mapping[str, ScaleDecision]
    """The autoscaler's decisions, for autoscaled workers."""
    scaling: Mapping[str, ScalingState]
    """The autoscaler's state to keep."""
    native: NativePlan | None = None
    """The Kubernetes-native objects of this iteration."""


@dataclass(frozen=True, slots=True)
class NativePlan:
    """TemporalWorker and connection objects: what was merged, and who uses what."""

    connections: NativeMerge
    """Connection objects merged into the fleet."""
    workers: NativeMerge
    """TemporalWorker objects merged into the fleet."""
    objects: tuple[NativeObject, ...]
    """Every connection object in the cluster (finalizer candidates)."""
    worker_objects: tuple[NativeObject, ...]
    """Every TemporalWorker object in the cluster."""
    references: Mapping[str, IdentityKey]
    """Per worker key (file, Queue and native workers), the connection it uses."""

    @property
    def rejected(self) -> tuple[RejectedObject, ...]:
        """Every object left out."""
        return (*self.connections.rejected, *self.workers.rejected)


class Daemon:
    """One stack's reconcile loop."""

    def __init__(
        self,
        *,
        stack: str,
        load_fleet: Callable[[], Fleet],
        engine: StackEngine,
        settings: DaemonSettings,
        queues: QueueSource,
        backlogs: BacklogSource | None = None,
        current_replicas: Callable[[], Mapping[str, int]] | None = None,
        read_secret: SecretReader | None = None,
        metrics: DaemonMetrics | None = None,
        leader: LeaderGate | None = None,
        file: str = "<fleet>",
        shared: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Sleep = interruptible_sleep,
        jitter: Callable[[], float] | None = random.random,
        limiter: RateLimiter | None = None,
        early: EarlyApplier | None = None,
        temporal_address: str | None = None,
        native: NativeSource | None = None,
        writer: NativeWriter | None = None,
        deployments: Callable[[], Mapping[str, tuple[int, int]]] | None = None,
        registry: Registry | None = None,
    ) -> None:
        """Wire the loop.

        Args:
            stack: The stack's name (logs and metrics).
            load_fleet: Reads and validates the fleet file; raises ``SpecError``.
            engine: Runs ``up``/``refresh`` and repairs a killed run's leftovers.
            settings: Intervals, backoff, autoscaling behaviour, sampling limits.
            queues: The labelled Queue objects (a watch, or a fixed set).
            backlogs: Samples task-queue backlogs; ``None`` holds autoscaled workers'
                replicas (no metric).
            current_replicas: Reads the workers' Deployments' replicas from the cluster.
            read_secret: Reads connection credential secrets, so a rotated secret
                changes the desired state (the program rolls the workers on it);
                ``None`` leaves secrets out of the hash.
            metrics: Where to publish; a private set by default.
            leader: The Lease elector with ``--leader-elect``; ``None`` means this
                daemon always may apply (the backend's lock still serialises ``up``\\ s).
            file: The fleet file's name for messages.
            shared: Extra inputs of the program outside the fleet (config such as the
                Temporal address); a change forces a full ``up``.
            clock: Monotonic time in seconds; the only clock decisions read.
            wall: Unix time, for the last-success metric only.
            sleep: The interruptible sleep (a fake advances a fake clock).
            jitter: Source of backoff jitter in ``[0, 1]``; ``None`` for none.
            limiter: The backlog request-rate budget; a token bucket from the
                sampling settings by default.
            early: Applies a new worker's ServiceAccount and Deployment before the
                engine runs (``twc.controller.early``); ``None`` leaves it to the ``up``.
            temporal_address: The stack's Temporal address override (the program's
                ``twc:temporalAddress``), for early-applied pod templates.
            native: TemporalWorker and connection objects from the cluster; ``None``
                without a cluster.
            writer: Writes status, finalizers and Events back; ``None`` writes nothing.
            deployments: Reads ``(replicas, readyReplicas)`` of the worker Deployments,
                for TemporalWorker status.
            registry: The connection-provider registry (the process-wide one by
                default).
        """
        self.stack = stack
        self.settings = settings
        self.engine = engine
        self.queues = queues
        self.metrics = metrics or DaemonMetrics(stack)
        self.state: LoopState | None = None
        self.wakeup = threading.Event()
        self.exit_code = 0
        self._load_fleet = load_fleet
        self._backlogs = backlogs
        self._current_replicas = current_replicas
        self._read_secret = read_secret
        self._digests: dict[str, str] = {}
        self._leader = leader
        self._file = file
        self._shared = dict(shared or {})
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self._jitter = jitter
        self._limiter = limiter or TokenBucket(
            settings.sampling.rate_per_s, burst=settings.sampling.burst
        )
        self._early = early if settings.early_apply else None
        self._temporal_address = temporal_address
        self._early_pending: set[ObjectRef] | None = None
        self._stop = threading.Event()
        self._recovered = False
        self._crashed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_replicas: dict[str, int] = {}
        self._reported_invalid: dict[str, str] = {}
        self._desired: dict[str, int] = {}
        self._observed: dict[str, int] = {}
        self._was_leader: bool | None = None
        self._native = native
        self._writer = writer
        self._deployments = deployments
        self._registry = registry
        # Connections used by the stack as last applied; None until an up (or a skip
        # that confirms the state) succeeded: then no finalizer is released.
        self._applied_refs: frozenset[IdentityKey] | None = None
        self._reported_native: dict[str, tuple[str, str]] = {}
        self._pending_events: list[tuple[NativeObject, str, str]] = []
        self._written: dict[str, dict[str, Any]] = {}
        self._apply_failed: dict[str, str] = {}
        self._metric_kinds: set[str] = set()
        self._faults = FaultBook(clock, wall)
        self.metrics.leader.labels(stack).set(0)

    # --------------------------------------------------------------- control
    def request_stop(self, exit_code: int | None = None) -> None:
        """End the loop after the step in progress (SIGTERM); wakes any sleep at once.

        Args:
            exit_code: The code :meth:`run` returns; unchanged when ``None``.
        """
        if exit_code is not None:
            self.exit_code = exit_code
        self._stop.set()
        self.wakeup.set()

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested."""
        return self._stop.is_set()

    def live(self) -> tuple[bool, str]:
        """The liveness probe: the loop has not crashed."""
        if self._crashed is not None:
            return False, f"reconcile loop crashed: {self._crashed!r}"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """The readiness probe: a standby is ready; a leader once it reconciled once.

        A standby must count as ready, or a rolling update of the daemon's Deployment
        (new pods start as standbys) would never progress.
        """
        if not self._may_apply():
            return True, "standby: another daemon holds the lease"
        blocking = sorted(f.value for f in self._faults.active() if f in BLOCKING)
        if blocking:
            return False, f"cannot apply the stack: {', '.join(blocking)}"
        state = self.state
        if state is None or state.last_success_at is None:
            return False, "no successful reconcile yet"
        return True, f"ok: {state.iteration} iterations"

    def status(self) -> dict[str, Any]:
        """The loop's state in words, for ``/status`` (and people reading it)."""
        state = self.state
        outcome = state.last_outcome if state is not None else None
        return {
            "stack": self.stack,
            "leading": self._was_leader is True,
            "iterations": state.iteration if state is not None else 0,
            "consecutiveFailures": state.consecutive_failures if state is not None else 0,
            "lastOutcome": None
            if outcome is None
            else {
                "kind": outcome.kind.value,
                "reason": outcome.reason.value if outcome.reason is not None else None,
                "message": _shorten(outcome.message, 500),
            },
            "appliedHash": state.applied.fleet if state and state.applied else None,
            "blockedHash": state.blocked if state is not None else None,
            "invalidQueueObjects": dict(self._reported_invalid),
            "rejectedObjects": {
                key: {"reason": reason, "message": _shorten(message, 500)}
                for key, (reason, message) in sorted(self._reported_native.items())
            },
            # Applied ahead of the engine and not yet adopted by a successful up: in the
            # cluster, not (yet) in the stack's state.
            "earlyApplied": sorted(str(ref) for ref in self._early_pending or ()),
            "faults": {
                fault.value: {
                    "since": active.since_wall,
                    "seconds": round(self._clock() - active.since, 1),
                    "sources": sorted(active.sources),
                    "message": _shorten(active.message, 500),
                }
                for fault, active in sorted(self._faults.active().items())
            },
            "workers": {
                key: {"desired": desired, "current": self._observed.get(key)}
                for key, desired in sorted(self._desired.items())
            },
        }

    # ------------------------------------------------------------------ loop
    def run(self, *, once: bool = False) -> int:
        """Reconcile until stopped (or one iteration with ``once``).

        Returns:
            The process exit code: 0 after a requested stop; with ``once``, 0 if the
            iteration succeeded; 1 after losing the Lease.
        """
        self.queues.start(self.wakeup)
        if self._native is not None:
            self._native.start(self.wakeup)
        state = LoopState(started_at=self._clock())
        self.state = state
        try:
            self._await_first_list()
            while not self._stop.is_set():
                if not self._may_apply():
                    self._standby()
                    continue
                self.wakeup.clear()
                state = self.iterate(state)
                self.state = state
                if once:
                    ok = state.last_outcome is not None and state.last_outcome.ok
                    return self.exit_code or (0 if ok else 1)
                delay = state.next_delay(now=self._clock(), settings=self.settings)
                if self._sleep(delay, self.wakeup):
                    self._settle()
        except BaseException as exc:
            self._crashed = exc
            raise
        finally:
            self.queues.stop()
            if self._native is not None:
                self._native.stop()
            if self._loop is not None:
                self._loop.close()
                self._loop = None
        logger.info("[%s] stopped", self.stack)
        return self.exit_code

    def _settle(self, quiet: float = 0.3, limit: float = 2.0) -> None:
        # A `kubectl apply` of several objects arrives as a burst of watch events; wait
        # until the burst is over (a quiet moment, at most `limit` seconds) so that one
        # up covers all of it rather than one up per object.
        deadline = self._clock() + limit
        while not self._stop.is_set() and self._clock() < deadline:
            self.wakeup.clear()
            if not self._sleep(quiet, self.wakeup):
                return
        if self._stop.is_set():
            self.wakeup.set()

    def _await_first_list(self, timeout: float = 10.0) -> None:
        # The watch lists in its own thread; give it a moment so the first iteration
        # does not fail (and log) just for starting first. Iterations check it anyway.
        deadline = self._clock() + timeout
        while (
            (
                self.queues.snapshot() is None
                or (self._native is not None and self._native.snapshot() is None)
            )
            and not self._stop.is_set()
            and self._clock() < deadline
        ):
            self._sleep(0.1, self.wakeup)
        if not self._stop.is_set():
            self.wakeup.clear()

    def _may_apply(self) -> bool:
        leading = self._leader is None or self._leader.is_leader()
        if leading != self._was_leader:
            self.metrics.leader.labels(self.stack).set(1 if leading else 0)
            if self._leader is not None:
                word = "leading: applying the stack" if leading else "standby: not leading"
                logger.info("[%s] %s", self.stack, word)
            if not leading:
                # A new term may follow someone else's killed run: check again then.
                self._recovered = False
            self._was_leader = leading
        return leading

    def _standby(self) -> None:
        retry = self.settings.leader_election.retry_period
        self._sleep(retry, self.wakeup)
        if not self._stop.is_set():
            # Watch events are for the leader; a standby only waits for the Lease.
            self.wakeup.clear()

    def iterate(self, state: LoopState) -> LoopState:
        """Run one iteration from ``state``; never raises for a failed step.

        Returns:
            The state after the iteration.
        """
        started = self._clock()
        attempted: DesiredState | None = None
        plan: Plan | None = None
        decision: ReconcileDecision | None = None
        try:
            plan = self.plan(state, now=started)
            state = state.with_scaling(plan.scaling)
            if plan.native is not None and plan.native.rejected:
                # Rejections need no engine: say so now, not after a long up.
                self._write_rejected(plan.native)
            decision = decide_reconcile(
                state.applied,
                plan.desired,
                target_threshold=self.settings.target_threshold,
                blocked=state.blocked_hash(now=started, settings=self.settings),
            )
            if decision.action is ReconcileAction.SKIP:
                logger.debug("[%s] %s: nothing to do", self.stack, decision.reason)
            elif self._stop.is_set():
                # Stopping: do not start an engine run that could outlive the grace period.
                logger.info("[%s] stopping: not starting an up (%s)", self.stack, decision.reason)
            else:
                attempted = plan.desired
                self._apply(decision, plan)
                self._last_replicas.update(plan.replicas)
            outcome = Outcome.success()
        except Exception as exc:
            outcome = outcome_of(
                exc,
                attempt=state.next_attempt,
                settings=self.settings.backoff,
                jitter=self._jitter,
            )
        state = state.finished(outcome, now=self._clock(), attempted=attempted)
        self._record(outcome, started)
        if plan is not None and plan.native is not None:
            self._write_back(plan, decision, outcome, state)
        if (
            outcome.ok
            and not self._stop.is_set()
            and state.refresh_due(now=self._clock(), settings=self.settings)
        ):
            state = self._refresh(state)
        return state

    # -------------------------------------------------------------- planning
    def plan(self, state: LoopState, *, now: float) -> Plan:
        """Compute the desired fleet, replicas and hashes; touches no engine.

        Raises:
            SpecError: The fleet file is invalid (or a connection does not resolve).
            TemporaryError: The Queue objects have not been listed yet.
        """
        fleet = self._load_fleet()
        objects = self.queues.snapshot()
        if objects is None:
            # Reconciling without the Queue objects would delete every derived worker.
            raise TemporaryError("Queue objects not listed yet", delay=1.0)
        self._check_watch()
        snapshot = NativeSnapshot()
        if self._native is not None:
            found = self._native.snapshot()
            if found is None:
                # Without them every TemporalWorker's Deployment would be deleted.
                raise TemporaryError("TemporalWorker and connection objects not listed yet")
            snapshot = found
        registry = self._registry or default_registry()
        cluster_merge = merge_cluster_objects(
            fleet, objects, snapshot, registry=registry, file=self._file
        )
        conns, merged, natives = (
            cluster_merge.connections,
            cluster_merge.merged,
            cluster_merge.workers,
        )
        self._report_invalid(merged)
        workers = {worker_key(w): w for w in merged.fleet.resolved_workers()}
        native_plan: NativePlan | None = None
        if self._native is not None:
            native_plan = NativePlan(
                connections=conns,
                workers=natives,
                objects=tuple(
                    NativeObject.of(
                        obj,
                        group=kind.api_group,
                        version=kind.version,
                        plural=kind.plural,
                        kind=kind.kind,
                    )
                    for kind, objs in sorted(snapshot.connections.items())
                    for obj in objs
                ),
                worker_objects=tuple(
                    NativeObject.of(
                        obj,
                        group=WORKER_GROUP,
                        version=CRD_VERSION,
                        plural=WORKER_PLURAL,
                        kind=WORKER_KIND,
                    )
                    for obj in snapshot.workers
                ),
                references={
                    key: identity_key(registry.resolve_worker(w, merged.fleet).identity)
                    for key, w in workers.items()
                },
            )

        live = self._read_current()
        autoscaled = {k: w for k, w in workers.items() if w.autoscaling is not None}
        backlogs = self._sample(merged.fleet, autoscaled)
        inputs: dict[str, WorkerScaleInput] = {}
        for key, worker in autoscaled.items():
            bounds = worker.autoscaling
            assert bounds is not None  # filtered above
            current = live.get(key) if live is not None else None
            if current is None:
                unknown = live is None and self._current_replicas is not None
                if unknown and key not in self._last_replicas:
                    # Unknown is not zero: from 0 the autoscaler would go to minReplicas
                    # and an up would shrink a running fleet blind.
                    raise TemporaryError(
                        f"the replicas of {key} are unknown (the cluster could not be "
                        "read); not scaling it blind"
                    )
                current = self._last_replicas.get(key, 0)
            inputs[key] = WorkerScaleInput(
                backlog=backlogs.get(key),
                current=current,
                bounds=bounds,
                behavior=self.settings.autoscale.with_scale_down_window(
                    bounds.scale_down_stabilization_seconds
                ),
            )
        decisions, scaling = scale_fleet(inputs, state.scaling, now=now)
        for key, decision in decisions.items():
            if decision.changed:
                logger.info(
                    "[%s/%s] replicas %d -> %d (%s; backlog %s, recommendation %d)",
                    self.stack,
                    key,
                    decision.current,
                    decision.replicas,
                    decision.reason,
                    backlogs.get(key),
                    decision.recommendation,
                )
        scaled = {k: d.replicas for k, d in decisions.items()}
        desired = desired_state(
            # Where a worker sits in the file (`source`, `connection_source`) is for
            # messages only: removing one worker must not change the hash of the rest.
            {k: w.model_dump(mode="json", exclude=_POSITIONAL) for k, w in workers.items()},
            replicas=scaled,
            shared=self._shared_state(merged.fleet, workers),
        )
        replicas = {k: scaled.get(k, w.replicas) for k, w in workers.items()}
        observed = dict(live or {})
        self.metrics.set_workers(replicas, {k: observed.get(k) for k in workers})
        self._desired, self._observed = dict(replicas), observed
        return Plan(
            merged=merged,
            workers=workers,
            desired=desired,
            overlay=cluster_merge.overlay(scaled),
            replicas=replicas,
            current={k: v for k, v in observed.items() if k in workers},
            decisions=decisions,
            scaling=scaling,
            native=native_plan,
        )

    def _shared_state(self, fleet: Fleet, workers: Mapping[str, ResolvedWorker]) -> dict[str, Any]:
        # Whatever is not one worker's own: a change here touches many workers' inputs.
        dump = fleet.model_dump(
            mode="json",
            include={"cluster_connections", "connections", "custom_connections", "queues"},
        )
        registry = self._registry or default_registry()
        resolved: list[tuple[ResolvedWorker, ResolvedConnection]] = []
        for worker in workers.values():
            try:
                resolved.append((worker, registry.resolve_worker(worker, fleet)))
            except TwcConnectionError:
                continue  # reported where the worker is merged
        return {
            "fleet": dump,
            "program": self._shared,
            "credentials": self._credential_digests(resolved),
            "placement": _placement(resolved),
        }

    def _credential_digests(
        self, resolved: Sequence[tuple[ResolvedWorker, ResolvedConnection]]
    ) -> dict[str, str]:
        # The program fingerprints each credential secret where it reads it (the
        # secretSource namespace, else each worker's namespace); so does this.
        if self._read_secret is None:
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
                digests[key] = conn.secret_digest(self._read_secret(namespace, conn.secret_name))
            except LookupError:
                digests[key] = "missing"
            except Exception as exc:
                # Unreadable for now: keep the last digest rather than trigger an up.
                logger.warning("[%s] could not read secret %s: %s", self.stack, key, exc)
                digests[key] = self._digests.get(key, "unknown")
        self._digests = digests
        return digests

    def _report_invalid(self, merged: MergedFleet) -> None:
        now = {r.key: r.reason for r in merged.rejected}
        for key, reason in now.items():
            if self._reported_invalid.get(key) != reason:
                logger.warning(
                    "[%s/queue %s] skipping invalid Queue object: %s", self.stack, key, reason
                )
        for key in set(self._reported_invalid) - set(now):
            logger.info("[%s/queue %s] Queue object no longer invalid (or gone)", self.stack, key)
        self._reported_invalid = now
        self.metrics.invalid_queues.labels(self.stack).set(len(now))
        self.metrics.cluster_queues.labels(self.stack).set(len(merged.accepted))

    def _read_current(self) -> Mapping[str, int] | None:
        if self._current_replicas is None:
            return None
        try:
            found = self._current_replicas()
        except Exception as exc:
            # Without live counts the autoscaler starts from its own last decisions.
            # Logged once as a fault while it lasts, not every iteration.
            logger.debug("[%s] could not read worker replicas: %s", self.stack, exc)
            self._fault(Fault.KUBERNETES_UNAVAILABLE, "replicas", str(exc))
            return None
        self._fault_cleared(Fault.KUBERNETES_UNAVAILABLE, "replicas")
        return found

    def _check_watch(self) -> None:
        # The watches retry in their own threads; the loop reports what they last saw.
        for source, watch in (("queue-watch", self.queues), ("native-watch", self._native)):
            failure = getattr(watch, "failure", None)
            error = failure() if callable(failure) else None
            if error:
                self._fault(Fault.KUBERNETES_UNAVAILABLE, source, str(error))
            else:
                self._fault_cleared(Fault.KUBERNETES_UNAVAILABLE, source)

    def _fault(self, fault: Fault, source: str, message: str) -> None:
        change = self._faults.report(fault, source, message)
        if change is not None:
            self._fault_changed(change)

    def _fault_cleared(self, fault: Fault, source: str) -> None:
        change = self._faults.clear(fault, source)
        if change is not None:
            self._fault_changed(change)

    def _fault_changed(self, change: FaultChange) -> None:
        name = change.fault.value
        self.metrics.fault_active.labels(self.stack, name).set(1 if change.raised else 0)
        if change.raised:
            self.metrics.faults.labels(self.stack, name).inc()
            logger.warning("[%s] fault %s: %s", self.stack, name, _shorten(change.message, 500))
        else:
            logger.info("[%s] fault %s cleared after %.1f s", self.stack, name, change.duration)

    def _sample(
        self, fleet: Fleet, autoscaled: Mapping[str, ResolvedWorker]
    ) -> dict[str, int | None]:
        if not autoscaled or self._backlogs is None:
            self.metrics.set_backlogs(())
            self._sampling_faults({})
            return {}
        source = self._backlogs
        refs = source.refs(fleet, autoscaled.values())
        if self._loop is None:
            # One loop for the daemon's life: temporalio clients are cached per loop.
            self._loop = asyncio.new_event_loop()
        results = self._loop.run_until_complete(
            sample_backlogs(
                refs.values(),
                source.describe,
                concurrency=self.settings.sampling.concurrency,
                limiter=self._limiter,
            )
        )
        out: dict[str, int | None] = {}
        published: list[tuple[str, str, int]] = []
        errors: dict[str, BaseException] = {}
        for key, ref in refs.items():
            result = results.get(ref)
            if result is not None and result.ok and result.backlog is not None:
                out[key] = result.backlog.count
                published.append((ref.namespace, ref.name, result.backlog.count))
            else:
                out[key] = None
                errors[key] = (
                    result.error
                    if result is not None and result.error is not None
                    else LookupError("not sampled")
                )
                self.metrics.backlog_errors.labels(self.stack).inc()
                logger.warning(
                    "[%s/%s] backlog unknown, holding replicas: %s",
                    self.stack,
                    key,
                    result.error if result is not None else "not sampled",
                )
        self.metrics.set_backlogs(dict.fromkeys(published))
        self._sampling_faults(errors)
        return out

    def _sampling_faults(self, errors: Mapping[str, BaseException]) -> None:
        found: dict[Fault, list[str]] = {}
        for key, error in sorted(errors.items()):
            found.setdefault(sample_fault(error), []).append(f"{key}: {error}")
        for fault in (Fault.TEMPORAL_UNAVAILABLE, Fault.BACKLOG_SAMPLING_FAILED):
            lines = found.get(fault)
            if lines:
                text = f"{len(lines)} worker(s), replicas held; {'; '.join(lines)}"
                self._fault(fault, "backlog", text)
            else:
                self._fault_cleared(fault, "backlog")

    # ------------------------------------------------------------ write-back
    def _write_back(
        self,
        plan: Plan,
        decision: ReconcileDecision | None,
        outcome: Outcome,
        state: LoopState,
    ) -> None:
        # Status, finalizers and Events for the native objects. Never fails the loop:
        # whatever does not get written now is written by a later iteration.
        native = plan.native
        assert native is not None
        applied = state.applied
        if outcome.ok and applied is not None and applied.fleet == plan.desired.fleet:
            self._applied_refs = frozenset(native.references.values())
        self._report_native(native)
        if outcome.ok:
            self._apply_failed.clear()
        if not outcome.ok and decision is not None and decision.action is not ReconcileAction.SKIP:
            changed = decision.workers if decision.action is ReconcileAction.TARGETED else None
            for key, obj in native.workers.accepted.items():
                if changed is None or key in changed:
                    self._event_once(obj, "ApplyFailed", _shorten(outcome.message, 900))
        if self._writer is None:
            return
        self._flush_events()
        try:
            self._update_finalizers(native)
        except Exception as exc:
            logger.warning("[%s] finalizer update failed (retrying): %s", self.stack, exc)
        try:
            self._update_status(plan, native, applied)
        except Exception as exc:
            logger.warning("[%s] status write-back failed (retrying): %s", self.stack, exc)

    def _report_native(self, native: NativePlan) -> None:
        now = {f"{r.obj.kind} {r.obj.key}": r for r in native.rejected}
        for key, rejected in now.items():
            before = self._reported_native.get(key)
            if before != (rejected.reason, rejected.message):
                logger.warning(
                    "[%s] skipping %s: %s: %s", self.stack, key, rejected.reason, rejected.message
                )
                self._pending_events.append((rejected.obj, rejected.reason, rejected.message))
        for key in set(self._reported_native) - set(now):
            logger.info("[%s] %s no longer rejected (or gone)", self.stack, key)
        self._reported_native = {k: (r.reason, r.message) for k, r in now.items()}
        # Kinds seen before stay labelled, so a gauge falls back to 0 when they go.
        self._metric_kinds |= {WORKER_KIND, *(o.kind for o in native.objects)}
        for kind in self._metric_kinds:
            count = sum(1 for r in native.rejected if r.obj.kind == kind)
            self.metrics.invalid_objects.labels(self.stack, kind).set(count)
        self.metrics.native_objects.labels(self.stack, WORKER_KIND).set(
            len(native.workers.accepted)
        )

    def _event_once(self, obj: NativeObject, reason: str, message: str) -> None:
        # Once per object and message while the failure lasts (cleared on success).
        key = f"{obj.kind} {obj.key}"
        if self._apply_failed.get(key) == message:
            return
        self._apply_failed[key] = message
        self._pending_events.append((obj, reason, message))

    def _flush_events(self) -> None:
        assert self._writer is not None
        pending, self._pending_events = self._pending_events, []
        for obj, reason, message in pending:
            try:
                self._writer.event(obj, reason, message)
            except Exception as exc:
                logger.warning("[%s] could not record an Event on %s: %s", self.stack, obj, exc)

    def _update_finalizers(self, native: NativePlan) -> None:
        assert self._writer is not None
        current = frozenset(native.references.values())
        keep = current | (self._applied_refs or frozenset())
        updates = finalizer_updates(native.objects, keep)
        if self._applied_refs is None:
            # What the stack holds is not known yet: protect, never release.
            updates = [(obj, fins) for obj, fins in updates if FINALIZER in fins]
        for obj, finalizers in updates:
            added = FINALIZER in finalizers
            try:
                self._writer.set_finalizers(obj, finalizers)
            except Exception as exc:
                # A 409 (changed since read) or 404 (gone): the next iteration decides
                # again from fresh objects. One object never holds up the others.
                logger.warning("[%s] finalizers of %s not updated: %s", self.stack, obj, exc)
                continue
            logger.info(
                "[%s] %s %s: %s",
                self.stack,
                "protecting" if added else "releasing",
                obj,
                "referenced by a worker" if added else "no worker uses it any more",
            )

    def _write_rejected(self, native: NativePlan) -> None:
        self._report_native(native)
        if self._writer is None:
            return
        self._flush_events()
        try:
            self._update_status(None, native, None, only_rejected=True)
        except Exception as exc:
            logger.warning("[%s] status write-back failed (retrying): %s", self.stack, exc)

    def _update_status(
        self,
        plan: Plan | None,
        native: NativePlan,
        applied: DesiredState | None,
        *,
        only_rejected: bool = False,
    ) -> None:
        assert self._writer is not None
        now = rfc3339(self._wall())
        accepted = {} if only_rejected else native.workers.accepted
        rejected = {r.obj.key: r for r in native.workers.rejected}
        deployments = self._read_deployments() if accepted else {}
        pollers = self._check_pollers(plan, sorted(accepted)) if plan is not None else {}
        seen: set[str] = set()
        for obj in native.worker_objects:
            if obj.deleting or (only_rejected and obj.key not in rejected):
                continue
            seen.add(obj.uid)
            written = self._written.get(obj.uid)
            if written is not None and all(obj.status.get(k) == v for k, v in written.items()):
                # The watch caught up with our writes: read the object itself again, so
                # a status someone else changed is noticed (and corrected).
                del self._written[obj.uid]
            previous = {**obj.status, **self._written.get(obj.uid, {})}
            key = obj.key
            if key in rejected:
                desired = rejected_status(
                    previous,
                    generation=obj.generation,
                    reason=rejected[key].reason,
                    message=_shorten(rejected[key].message, 900),
                    now=now,
                )
            elif key in accepted and plan is not None:
                in_stack = applied is not None and applied.workers.get(
                    key
                ) == plan.desired.workers.get(key)
                dep = deployments.get(key) if deployments is not None else None
                desired = accepted_status(
                    previous,
                    generation=obj.generation,
                    applied=in_stack,
                    desired_replicas=plan.replicas.get(key, 0),
                    deployment=DeploymentFacts(*dep) if dep is not None else None,
                    pollers=pollers.get(key),
                    connection_ref=_ref_dict(native.references.get(key)),
                    now=now,
                    task_queue=plan.workers[key].task_queue_name if key in plan.workers else None,
                )
            else:
                continue
            patch = status_patch(previous, desired)
            if patch is None:
                continue
            try:
                self._writer.patch_status(obj, patch)
            except Exception as exc:
                logger.warning("[%s] status of %s not written: %s", self.stack, obj, exc)
                continue
            self._written[obj.uid] = {**self._written.get(obj.uid, {}), **patch["status"]}
            if "phase" in patch["status"]:
                logger.info("[%s] TemporalWorker %s: %s", self.stack, key, desired["phase"])
        if not only_rejected:
            for uid in set(self._written) - seen:
                del self._written[uid]

    def _read_deployments(self) -> Mapping[str, tuple[int, int]] | None:
        if self._deployments is None:
            return None
        try:
            return self._deployments()
        except Exception as exc:
            logger.warning("[%s] could not read worker Deployments: %s", self.stack, exc)
            return None

    def _check_pollers(self, plan: Plan, keys: list[str]) -> dict[str, PollerFacts]:
        source = self._backlogs
        if not keys or source is None or not hasattr(source, "pollers"):
            return {}
        workers = [plan.workers[k] for k in keys if k in plan.workers]
        refs = source.refs(plan.merged.fleet, workers)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        concurrency = asyncio.Semaphore(max(1, self.settings.sampling.concurrency))

        async def one(ref: TaskQueueRef) -> PollerFacts:
            async with concurrency:
                try:
                    return PollerFacts(await source.pollers(ref))
                except Exception as exc:
                    return _poller_failure(exc)

        async def every() -> dict[TaskQueueRef, PollerFacts]:
            unique = sorted(set(refs.values()), key=str)
            results = await asyncio.gather(*(one(r) for r in unique))
            return dict(zip(unique, results, strict=True))

        found = self._loop.run_until_complete(every())
        return {key: found[ref] for key, ref in refs.items()}

    # ---------------------------------------------------------------- engine
    def _recover(self) -> None:
        actions = self.engine.recover()
        for action in actions:
            logger.warning("[%s] recovered the stack: %s", self.stack, action)
            self.metrics.recoveries.labels(self.stack, action.split(":", 1)[0]).inc()
        self._recovered = True

    def _apply(self, decision: ReconcileDecision, plan: Plan) -> None:
        if self._leader is not None and not self._leader.is_leader():
            raise TemporaryError("not leading any more; not applying")
        if not self._recovered:
            # Before this daemon's first engine run (of each term as leader): a killed
            # predecessor may have left a lock and pending operations.
            self._recover()
        targets = self._targets(decision) if decision.action is ReconcileAction.TARGETED else None
        mode = "targeted" if targets else "full"
        workers = ", ".join(sorted(decision.workers)) or "-"
        logger.info("[%s] up (%s): %s [%s]", self.stack, mode, decision.reason, workers)
        self.metrics.engine_runs.labels(self.stack, "up", mode).inc()
        gauge = self.metrics.engine_in_progress.labels(self.stack)
        gauge.set(1)
        started = self._clock()
        self._apply_early(decision, plan)
        try:
            report = self.engine.up(plan.overlay, targets)
        finally:
            gauge.set(0)
        self._release_early(plan)
        changes = {op: n for op, n in report.changes.items() if op != "same" and n}
        logger.info(
            "[%s] up (%s) done in %.1f s: %s",
            self.stack,
            mode,
            self._clock() - started,
            changes or "no changes",
        )

    def _apply_early(self, decision: ReconcileDecision, plan: Plan) -> None:
        """Apply new workers' ServiceAccount and Deployment ahead of the ``up``."""
        if self._early is None:
            return
        pending = self._pending_early()
        started = self._clock()
        applied: list[str] = []
        for key in sorted(decision.added):
            worker = plan.workers.get(key)
            if worker is None:
                continue
            try:
                objects = early_objects(
                    worker,
                    plan.merged.fleet,
                    read_secret=self._read_secret,
                    temporal_address=self._temporal_address,
                    replicas=plan.overlay.replicas.get(key),
                )
                refs = [ref_of(obj) for obj in objects]
                if any(self._early.exists(ref) for ref in refs):
                    # The engine created it already (it read a newer file than the hash).
                    continue
                for obj, ref in zip(objects, refs, strict=True):
                    pending.add(ref)
                    self._early.apply(obj, EARLY_FIELD_MANAGER)
            except Exception as exc:
                # Never a failure: the up creates the worker anyway, a moment later.
                logger.info("[%s/%s] not applied early (the up will): %s", self.stack, key, exc)
                self.metrics.early_applies.labels(self.stack, "skipped").inc()
                continue
            applied.append(key)
            self.metrics.early_applies.labels(self.stack, "applied").inc()
        if applied:
            logger.info(
                "[%s] applied early in %.0f ms: %s",
                self.stack,
                (self._clock() - started) * 1000,
                ", ".join(applied),
            )

    def _pending_early(self) -> set[ObjectRef]:
        if self._early_pending is None:
            # Left by a daemon killed between its early apply and its up, if any.
            assert self._early is not None
            try:
                self._early_pending = set(self._early.managed_by(EARLY_FIELD_MANAGER))
            except Exception as exc:
                logger.warning("[%s] could not list early-applied objects: %s", self.stack, exc)
                return set()
        return self._early_pending

    def _release_early(self, plan: Plan) -> None:
        """After a successful ``up``: the engine owns the early objects now."""
        if self._early is None or not self._early_pending:
            return
        release, delete = plan_release(self._early_pending, plan.workers.keys())
        for ref in release + delete:
            try:
                if ref in release:
                    self._early.release(ref, EARLY_FIELD_MANAGER)
                else:
                    logger.info("[%s] deleting %s: its worker is gone", self.stack, ref)
                    self._early.delete(ref)
            except Exception as exc:
                logger.warning("[%s] %s: will retry after the next up: %s", self.stack, ref, exc)
                continue
            self._early_pending.discard(ref)
            result = "released" if ref in release else "deleted"
            self.metrics.early_applies.labels(self.stack, result).inc()

    def _targets(self, decision: ReconcileDecision) -> list[str] | None:
        if decision.added:
            # New workers have no URNs yet; only a full up creates them.
            return None
        urns = self.engine.worker_urns()
        targets: list[str] = []
        for worker in sorted(decision.workers):
            found = urns.get(worker)
            if not found:
                return None
            targets.extend(found)
        return targets

    def _refresh(self, state: LoopState) -> LoopState:
        self.metrics.engine_runs.labels(self.stack, "refresh", "full").inc()
        gauge = self.metrics.engine_in_progress.labels(self.stack)
        gauge.set(1)
        try:
            if not self._recovered:
                self._recover()
            drifted = list(self.engine.refresh())
        except Exception as exc:
            logger.warning("[%s] refresh failed (retrying next interval): %s", self.stack, exc)
            self.metrics.reconcile_errors.labels(self.stack, "RefreshFailed").inc()
            self._engine_faults(outcome_of(exc, attempt=1, settings=self.settings.backoff))
            return state.refreshed(now=self._clock())
        finally:
            gauge.set(0)
        state = state.refreshed(now=self._clock())
        self.metrics.drifted.labels(self.stack).set(len(drifted))
        if not drifted:
            logger.info("[%s] refresh: no drift", self.stack)
            return state
        logger.warning(
            "[%s] drift found in %d resource(s): %s; a full up follows",
            self.stack,
            len(drifted),
            ", ".join(sorted(drifted)),
        )
        self.metrics.drift_detected.labels(self.stack).inc()
        self.wakeup.set()
        return replace(state, applied=None)

    def _engine_faults(self, outcome: Outcome) -> None:
        # A failed engine run that names the backend or the cluster raises that fault;
        # any successful iteration clears them (a failed up is retried before a skip).
        fault = None if outcome.ok else engine_fault(outcome.reason, outcome.message)
        for each in (Fault.STATE_BACKEND_UNWRITABLE, Fault.KUBERNETES_UNAVAILABLE):
            if each is fault:
                self._fault(each, "engine", engine_reason(outcome.message))
            elif outcome.ok:
                self._fault_cleared(each, "engine")

    def _record(self, outcome: Outcome, started: float) -> None:
        self._engine_faults(outcome)
        self.metrics.reconciles.labels(self.stack, outcome.kind.value).inc()
        self.metrics.reconcile_duration.labels(self.stack).observe(self._clock() - started)
        if outcome.ok:
            self.metrics.last_success.labels(self.stack).set(self._wall())
            return
        reason = outcome.reason.value if outcome.reason is not None else "Unknown"
        self.metrics.reconcile_errors.labels(self.stack, reason).inc()
        # The engine's reason, not its whole progress output.
        message = _shorten(engine_reason(outcome.message))
        if outcome.kind is OutcomeKind.TEMPORARY:
            # A traceback helps only for errors nobody anticipated, not engine failures.
            unexpected = outcome.reason is FailureReason.UNEXPECTED and not type(
                outcome.exception
            ).__name__.endswith("CommandError")
            logger.warning(
                "[%s] reconcile failed (%s, attempt %d), retrying in %.1f s: %s",
                self.stack,
                reason,
                outcome.attempt,
                outcome.delay or 0.0,
                message,
                exc_info=outcome.exception if unexpected else None,
            )
        else:
            logger.error(
                "[%s] reconcile failed permanently (%s); waiting for the input to change: %s",
                self.stack,
                reason,
                message,
            )


def _ref_dict(ident: IdentityKey | None) -> dict[str, str] | None:
    if ident is None:
        return None
    group, kind, name, namespace = ident
    out = {"apiGroup": group, "kind": kind, "name": name}
    if namespace:
        out["namespace"] = namespace
    return out


def _poller_failure(exc: BaseException) -> PollerFacts:
    # The reasons of the TaskQueueCheck (providers/taskqueue.py), which `twc status` uses.
    from temporalio.service import RPCError, RPCStatusCode

    from twc.errors import Reason, TwcConnectionError

    if isinstance(exc, LookupError):
        return PollerFacts(None, "AuthSecretInvalid", str(exc))
    if isinstance(exc, TwcConnectionError):
        auth = exc.reason == Reason.AUTH_SECRET_INVALID
        return PollerFacts(None, "AuthSecretInvalid" if auth else "TemporalUnavailable", str(exc))
    if isinstance(exc, RPCError):
        reason = {
            RPCStatusCode.NOT_FOUND: "NamespaceNotFound",
            RPCStatusCode.UNAUTHENTICATED: "AuthSecretInvalid",
            RPCStatusCode.PERMISSION_DENIED: "AuthSecretInvalid",
        }.get(exc.status, "TemporalUnavailable")
        return PollerFacts(None, reason, f"{exc.status.name}: {exc.message}")
    return PollerFacts(None, "TemporalUnavailable", f"{type(exc).__name__}: {exc}")


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


def _shorten(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else f"{text[: limit // 2]} [...] {text[-limit // 2 :]}"
