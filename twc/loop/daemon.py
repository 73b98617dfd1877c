"""The reconcile loop of ``twc run``: one loop per stack.

Each iteration is a pipeline, as the official worker controller's reconcile is:

1. **observe** (:mod:`twc.loop.observe`): the fleet file, the cluster's objects from the
   watches, the live replicas; then, for the desired workers, backlogs and credential
   digests;
2. **plan** (:mod:`twc.loop.plan`, pure): the desired fleet through the one
   desired-state function, the autoscaler's replicas, the hashes, skip / targeted /
   full ``up``;
3. **act** (:mod:`twc.loop.act`): the generated TemporalWorker objects, early apply,
   the engine's ``up``, ``refresh`` on schedule;
4. **report** (:mod:`twc.loop.report`): metrics, faults, status, finalizers, Events.

A failing step becomes an :class:`~twc.loop.outcome.Outcome` and the loop sleeps its
backoff; nothing escapes an iteration. The sleep between iterations is woken by the
watches (reconcile at once) and by :meth:`Daemon.request_stop` (SIGTERM: the step in
progress finishes, then the loop returns).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

from twc.connections import default_registry
from twc.kube.watch import QueueSource
from twc.loop.act import Actor, Effects
from twc.loop.asking import POLLERS_DEADLINE, AskerThread, BacklogAsker, PollerAsker
from twc.loop.background import BackgroundEngine
from twc.loop.decide import DesiredState, ReconcileAction, ReconcileDecision, decide_reconcile
from twc.loop.faults import BLOCKING, FaultBook
from twc.loop.guard import DeletionGuard
from twc.loop.health import DaemonMetrics, Liveness
from twc.loop.observe import Observer, Sources
from twc.loop.outcome import Outcome, outcome_of
from twc.loop.plan import Plan, desired_from, make_plan, with_conflicts
from twc.loop.report import FaultReporter, Reporter, shorten
from twc.loop.rollouts import RolloutActor
from twc.loop.sampling import Budgets
from twc.loop.settings import DaemonSettings
from twc.loop.state import LoopState
from twc.loop.state import sleep as interruptible_sleep

__all__ = ["Clocks", "Daemon", "LeaderGate"]

logger = logging.getLogger(__name__)

Sleep = Callable[[float, threading.Event], bool]


class LeaderGate(Protocol):
    """Whether this daemon may apply the stack now (the Lease elector)."""

    def is_leader(self) -> bool:
        """True while this daemon holds the Lease."""
        ...


def _engine_thread(stack: str) -> Executor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"twc-engine-{stack}")


@dataclass(frozen=True)
class Clocks:
    """The loop's time and the threads it hands work to, injected so that tests run on
    virtual time with deterministic stand-ins for the threads."""

    monotonic: Callable[[], float] = time.monotonic
    """Seconds on a monotonic clock: the only clock decisions read."""
    wall: Callable[[], float] = time.time
    """Unix time, for timestamps people read."""
    sleep: Sleep = interruptible_sleep
    """The interruptible sleep (a fake advances a fake clock)."""
    jitter: Callable[[], float] | None = field(default=random.random)
    """Source of backoff jitter in ``[0, 1]``; ``None`` for none."""
    engine: Callable[[str], Executor] = _engine_thread
    """Given the stack, where its engine runs go (one at a time): a thread of their own."""
    asker: Callable[[str], AskerThread] = AskerThread
    """Given the stack, where its questions to Temporal run: an event loop of their own."""


class Daemon:
    """One stack's reconcile loop."""

    def __init__(
        self,
        stack: str,
        settings: DaemonSettings,
        sources: Sources,
        effects: Effects,
        *,
        leader: LeaderGate | None = None,
        metrics: DaemonMetrics | None = None,
        clocks: Clocks | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        """Wire the loop.

        Args:
            stack: The stack's name (logs and metrics).
            settings: Intervals, backoff, autoscaling behaviour.
            sources: What the loop reads (fleet file, cluster, Temporal, config).
            effects: What the loop changes (the engine, the cluster's objects).
            leader: The Lease elector with ``--leader-elect``; ``None`` means this
                daemon always may apply (the backend's lock still serialises ``up``\\ s).
            metrics: Where to publish; a private set by default.
            clocks: Time, sleep and threads; the real ones by default.
            budgets: The request budgets for Temporal; the loop's own by default (a
                sharded daemon's loops share one).
        """
        self.stack = stack
        self.settings = settings
        self.clocks = clocks or Clocks()
        self.metrics = metrics or DaemonMetrics(stack)
        self.state: LoopState | None = None
        self.wakeup = threading.Event()
        self.exit_code = 0
        self._leader = leader
        self._stop = threading.Event()
        self._crashed: BaseException | None = None
        self._was_leader: bool | None = None
        self._last_replicas: dict[str, int] = {}
        self._accepted: dict[str, Any] | None = None
        self.liveness = Liveness(self.clocks.monotonic, settings.liveness_allowance)
        self._rounds_seen: float | None = None
        self.faults = FaultBook(self.clocks.monotonic, self.clocks.wall)
        fault_reporter = FaultReporter(stack=stack, metrics=self.metrics, book=self.faults)
        self.observer = self._observer(sources, fault_reporter, budgets)
        self.reporter = Reporter(
            stack=stack,
            metrics=self.metrics,
            faults=fault_reporter,
            writer=effects.writer,
            wall=self.clocks.wall,
            deployments=self.observer.deployments,
            pollers=self.observer.pollers,
            record=sources.record,
        )
        self.guard = DeletionGuard(
            registry=sources.registry or default_registry(),
            file=sources.file,
            record=sources.record,
            stack=stack,
            on_verdict=self.reporter.report_held,
        )
        self._resuming = sources.record is not None
        """Whether the first iteration that may apply still has to look at what the last
        recorded ``up`` applied (:meth:`_resume`)."""
        self._desired: dict[str, int] = {}
        self._observed: dict[str, int] = {}
        self._turn = effects.refresh_turn
        self._act(sources, effects)
        self.metrics.leader.labels(stack).set(0)

    def _act(self, sources: Sources, effects: Effects) -> None:
        may_apply = self._may_apply_now
        self.actor = Actor(
            effects,
            stack=self.stack,
            metrics=self.metrics,
            clock=self.clocks.monotonic,
            may_apply=may_apply,
            read_secret=sources.secret_data or sources.secrets,
            applied=sources.record,
        )
        self.rollouts = RolloutActor(
            sources.rollouts, stack=self.stack, may_apply=may_apply, loop=self.observer.event_loop
        )
        self._engine = BackgroundEngine(
            self.stack,
            actor=self.actor,
            reporter=self.reporter,
            settings=self.settings,
            clocks=(self.clocks.monotonic, self.clocks.jitter),
            wakeup=self.wakeup,
            executor=self.clocks.engine(self.stack),
        )

    def _may_apply_now(self) -> bool:
        return self._leader is None or self._leader.is_leader()

    def _observer(
        self, sources: Sources, faults: FaultReporter, budgets: Budgets | None
    ) -> Observer:
        # Questions to Temporal (pollers, backlogs) run on one thread of the loop's own,
        # sharing its clients: no iteration waits for an answer.
        asking = self.clocks.asker(self.stack)
        return Observer(
            sources,
            settings=self.settings,
            faults=faults,
            metrics=self.metrics,
            clock=self.clocks.monotonic,
            budgets=budgets or Budgets(),
            asker=PollerAsker(name=self.stack, thread=asking, wake=self.wakeup.set),
            sampler=BacklogAsker(
                thread=asking,
                wake=self.wakeup.set,
                clock=self.clocks.monotonic,
                wall=self.clocks.wall,
            ),
        )

    @property
    def queues(self) -> QueueSource:
        """The labelled Queue objects' source."""
        return self.observer.sources.queues

    @queues.setter
    def queues(self, source: QueueSource) -> None:
        self.observer.sources = replace(self.observer.sources, queues=source)

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
        """Whether the loop was asked to stop (or has ended)."""
        return self._stop.is_set()

    def live(self) -> tuple[bool, str]:
        """The liveness probe: the loop has not crashed, and it made progress when it
        should have (:class:`~twc.loop.health.Liveness`)."""
        if self._crashed is not None:
            return False, f"reconcile loop crashed: {self._crashed!r}"
        return self.liveness.check()

    def ready(self) -> tuple[bool, str]:
        """The readiness probe: a standby is ready; a leader once it reconciled once.

        A standby must count as ready, or a rolling update of the daemon's Deployment
        (new pods start as standbys) would never progress.
        """
        if not self._may_apply():
            return True, "standby: another daemon holds the lease"
        blocking = sorted(f.value for f in self.faults.active() if f in BLOCKING)
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
        now = self.clocks.monotonic()
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
                "message": shorten(outcome.message, 500),
            },
            "appliedHash": state.applied.fleet if state and state.applied else None,
            "blockedHash": state.blocked if state is not None else None,
            "invalidQueueObjects": dict(self.reporter.reported_invalid),
            "heldDeletions": self.reporter.held_status(),
            "objectConflicts": dict(self.reporter.reported_conflicts),
            "rejectedObjects": {
                key: {"reason": reason, "message": shorten(message, 500)}
                for key, (reason, message) in sorted(self.reporter.reported_native.items())
            },
            # Applied ahead of the engine and not yet adopted by a successful up: in the
            # cluster, not (yet) in the stack's state.
            "earlyApplied": self.actor.early_pending,
            "faults": {
                fault.value: {
                    "since": active.since_wall,
                    "seconds": round(now - active.since, 1),
                    "sources": sorted(active.sources),
                    "message": shorten(active.message, 500),
                }
                for fault, active in sorted(self.faults.active().items())
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
        sources = self.observer.sources
        if once:
            # No later iteration would take the answers in: the one iteration waits.
            self.observer.asker.thread.wait = POLLERS_DEADLINE
        sources.queues.start(self.wakeup)
        if sources.native is not None:
            sources.native.start(self.wakeup)
        state = LoopState(started_at=self.clocks.monotonic())
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
                    state = self._drain(state)
                    ok = state.last_outcome is not None and state.last_outcome.ok
                    return self.exit_code or (0 if ok else 1)
                state = self._wait(state)
        except BaseException as exc:
            self._crashed = exc
            raise
        finally:
            self._stop.set()  # the sources' threads end now, on purpose
            # SIGTERM: an engine run in progress is never abandoned; it ends first.
            self.state = self._drain(self.state or state)
            sources.queues.stop()
            if sources.native is not None:
                sources.native.stop()
            self.observer.close()
        logger.info("[%s] stopped", self.stack)
        return self.exit_code

    def _wait(self, state: LoopState) -> LoopState:
        """Sleep until the next iteration is due, or a wake (then answer it at once and
        let its burst settle)."""
        now = self.clocks.monotonic()
        delay = state.next_delay(
            now=now, settings=self.settings, sample_due_in=self.observer.next_sample_in(now)
        )
        if not self.clocks.sleep(delay, self.wakeup):
            return state  # due
        state = self._answer(state)
        self.state = state
        self._settle()
        return state

    def iterate(self, state: LoopState) -> LoopState:
        """Run one iteration from ``state``: observe, plan, act, report. Never raises for
        a failed step. A completed iteration is the loop's progress (``/healthz``): the
        next is due within the sleep the new state asks for.

        Returns:
            The state after the iteration.
        """
        state = self._iterate(state)
        now = self.clocks.monotonic()
        self.liveness.expect(state.next_delay(now=now, settings=self.settings))
        return state

    def _iterate(self, state: LoopState) -> LoopState:
        clock = self.clocks.monotonic
        state = self._collect(state)
        started = clock()
        deferred = False
        plan: Plan | None = None
        decision: ReconcileDecision | None = None
        try:
            state, plan = self._scaled(state, now=started)
            decision = plan.decision
            if decision.action is ReconcileAction.SKIP:
                logger.debug("[%s] %s: nothing to do", self.stack, decision.reason)
                if not self._engine.busy():
                    self.actor.settle_early(plan)
            elif self._stop.is_set():
                # Stopping: do not start an engine run that could outlive the grace period.
                logger.info("[%s] stopping: not starting an up (%s)", self.stack, decision.reason)
            else:
                # New workers now, the up on the engine's thread (or, while one is in
                # progress, after it; a refresh in progress gives way to a change).
                self.actor.apply_early(decision, plan)
                if not self._engine.busy():
                    self._engine.start_up(decision, plan, started)
                elif decision.workers:
                    self._engine.give_way(decision.reason)
                deferred = True
            if not self._stop.is_set():
                # Routing needs no engine run: gates, ramps and promotions every iteration.
                self.rollouts.act(plan.versions, plan.desired)
            self._accepted = plan.desired.accepted
            outcome = Outcome.success()
        except Exception as exc:  # noqa: BLE001 - nothing escapes an iteration: it becomes an outcome
            outcome = outcome_of(
                exc,
                attempt=state.next_attempt,
                settings=self.settings.backoff,
                jitter=self.clocks.jitter,
            )
        if deferred and outcome.ok:
            # The up's outcome is this iteration's: reported when it ends (_fold).
            return self._collect(state)
        state = state.finished(outcome, now=clock())
        self.reporter.finished(plan, decision, outcome, state, started=started, now=clock())
        if (
            outcome.ok
            and not self._stop.is_set()
            and state.refresh_due(now=clock(), settings=self.settings)
            and not self._engine.busy()
            and self._refresh_turn(state)
        ):
            self._engine.start_refresh()
        return self._collect(state)

    def _refresh_turn(self, state: LoopState) -> bool:
        # A due refresh waits for its turn in the process's budget (one shard's of
        # many; EngineSlots.refresh_turn) without holding the engine: until it starts,
        # the shard's changes and early objects go on as if none were due.
        return self._turn is None or self._turn(self.stack, state.refresh_due_at(self.settings))

    def _scaled(self, state: LoopState, *, now: float) -> tuple[LoopState, Plan]:
        """Observe and plan, then what needs no engine: replicas and views.

        Raises:
            Exception: Whatever a step raised (the caller makes it an outcome).
        """
        state, plan = self._planned(state, now=now)
        self._engine_free(plan)
        return state, plan

    def _planned(self, state: LoopState, *, now: float) -> tuple[LoopState, Plan]:
        plan = self.plan(state, now=now)
        if self._resuming and state.applied is None:
            state, plan = self._resume(state, plan, now=now)
        state = state.with_scaling(plan.scaling)
        self.reporter.planned(plan)
        return state, plan

    def _engine_free(self, plan: Plan) -> None:
        """What changes the cluster without the engine: replicas, then views.

        Raises:
            Exception: Whatever a step raised (the caller makes it an outcome).
        """
        # Replicas first, and never through the engine: a backlog burst is answered
        # in this iteration whatever the up below does.
        written = self.actor.scale(plan)
        self._last_replicas.update(
            {k: plan.current[k] for k in plan.decisions if k in plan.current}
        )
        self._last_replicas.update(written)
        self.actor.sync_views(plan)

    def _answer(self, state: LoopState) -> LoopState:
        """What a wake needs at once, before its burst settles: new workers' objects
        (early apply) and replicas. Only the ``up`` waits for the burst to end, so that
        one ``up`` covers all of it."""
        if self._stop.is_set() or not self._may_apply():
            return state
        try:
            # New workers before anything else, and before an engine run that ended
            # is folded in: folding reports it (statuses written, Temporal asked about
            # pollers), and a new Queue's worker waited for that report. Workers that
            # run's up created look new until it is folded; early apply finds them
            # there and leaves them.
            state, plan = self._planned(state, now=self.clocks.monotonic())
            if plan.decision.added:
                self.actor.apply_early(plan.decision, plan)
            self._engine_free(plan)
        except Exception as exc:  # noqa: BLE001 - the iteration after the settle meets it and reports it
            logger.debug("[%s] not answered before the settle: %s", self.stack, exc)
        return self._collect(state)

    def plan(self, state: LoopState, *, now: float) -> Plan:
        """Observe and plan, touching no engine.

        Raises:
            SpecError: The fleet file is invalid (or a connection does not resolve).
            TemporaryError: The cluster's objects have not been listed yet.
        """
        seen = self.observer.observe()
        if self._accepted is None:
            recalled = self.observer.recall()
            self.guard.remember(recalled.accepted, recalled.fleet)
            self._accepted = {k: dict(v) for k, v in recalled.accepted.items()}
        desired = desired_from(
            seen,
            accepted=self._accepted,
            registry=self.observer.registry,
            file=self.observer.sources.file,
        )
        existing = seen.live.keys() if seen.live is not None else None
        desired = self.guard.guard(seen.fleet, desired, existing, now=now, wall=self.clocks.wall())
        known = self.guard.previous.workers if self.guard.previous is not None else ()
        conflicts = self.observer.conflicts(desired, existing, known)
        desired = with_conflicts(
            seen.fleet,
            desired,
            conflicts,
            registry=self.observer.registry,
            file=self.observer.sources.file,
        )
        facts = self.observer.facts(desired)
        plan = make_plan(
            seen,
            desired,
            facts,
            state,
            settings=self.settings,
            now=now,
            last_replicas=self._last_replicas,
            watched=self.observer.watched_kinds(),
            program=self.observer.sources.program,
            native=self.observer.sources.native is not None,
            wall=self.clocks.wall(),
            views_of=self.stack if self.actor.keeps_views else None,
            deletions=self.guard.verdict,
        )
        self.guard.planned(desired)
        self._desired = dict(plan.replicas)
        self._observed = dict(seen.live or {})
        return plan

    def _resume(self, state: LoopState, plan: Plan, *, now: float) -> tuple[LoopState, Plan]:
        """A (re)started daemon takes what the last recorded ``up`` applied as applied,
        when the stack is still exactly as that ``up`` left it (:meth:`Actor.resume`):
        then only what changed since runs the engine (nothing, after a plain restart),
        instead of a full ``up`` of every stack and shard."""
        if not self._may_apply():
            return state, plan  # a standby looks when it leads
        self._resuming = False
        record = self.actor.recorded()
        if record is None or not self.actor.resume(record):
            return state, plan
        applied = DesiredState(
            fleet=record.fleet,
            shared=record.shared,
            workers=MappingProxyType(dict(record.workers)),
        )
        state = replace(state, applied=applied)
        decision = decide_reconcile(
            applied,
            plan.hashes,
            blocked=state.blocked_hash(now=now, settings=self.settings),
        )
        logger.info(
            "[%s] resumed: the stack is as the last recorded up left it (update %s); %s",
            self.stack,
            record.update,
            decision.reason,
        )
        return state, replace(plan, decision=decision)

    def _collect(self, state: LoopState) -> LoopState:
        return self._engine.collect(state)

    def _drain(self, state: LoopState) -> LoopState:
        # Waiting for the engine run (a stop, --once) is the loop's step: at most its deadline.
        self.liveness.expect(self.settings.engine.deadline + self.settings.engine.interrupt_grace)
        return self._engine.drain(state)

    # ------------------------------------------------------------ leadership
    def _settle(self, quiet: float = 0.3, limit: float = 2.0) -> None:
        # A `kubectl apply` of several objects arrives as a burst of watch events; wait
        # until the burst is over (a quiet moment, at most `limit` seconds) so that one
        # up covers all of it rather than one up per object.
        deadline = self.clocks.monotonic() + limit
        while not self._stop.is_set() and self.clocks.monotonic() < deadline:
            self.wakeup.clear()
            if not self.clocks.sleep(quiet, self.wakeup):
                return
        if self._stop.is_set():
            self.wakeup.set()

    def _await_first_list(self, timeout: float = 10.0) -> None:
        # The watch lists in its own thread; give it a moment so the first iteration
        # does not fail (and log) just for starting first. Iterations check it anyway.
        sources = self.observer.sources
        deadline = self.clocks.monotonic() + timeout
        self.liveness.expect(timeout)
        while (
            (
                sources.queues.snapshot() is None
                or (sources.native is not None and sources.native.snapshot() is None)
            )
            and not self._stop.is_set()
            and self.clocks.monotonic() < deadline
        ):
            self.clocks.sleep(0.1, self.wakeup)
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
                self.actor.new_term()
            self._was_leader = leading
        return leading

    def _standby(self) -> None:
        retry = self.settings.leader_election.retry_period
        # A standby's progress is its election rounds (a gate without rounds: its sleep).
        rounds = getattr(self._leader, "last_round", None)
        seen = rounds() if callable(rounds) else self.clocks.monotonic()
        if seen != self._rounds_seen:
            self._rounds_seen = seen
            self.liveness.expect(retry)
        self.clocks.sleep(retry, self.wakeup)
        if not self._stop.is_set():
            # Watch events are for the leader; a standby only waits for the Lease.
            self.wakeup.clear()
