"""The reconcile loop of ``twc run``: one loop per stack.

Each iteration (:meth:`Daemon.iterate`) is observe → plan (pure) → execute → report. A
failing step becomes an :class:`~twc.reconcile.outcome.Outcome`; nothing escapes an iteration.
The sleep between iterations is woken by the watches and by :meth:`Daemon.request_stop`.
The :class:`DeletionGuard` holds mass deletions across iterations.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Protocol

from twc.desired import (
    DesiredFleet,
    DesiredInputs,
    GuardVerdict,
    Hold,
    HoldFailed,
    ObjectList,
    deletion_digest,
    desired_fleet,
    held_objects,
    judge_deletions,
)
from twc.reconcile.act import Actor, Effects
from twc.reconcile.asking import POLLERS_DEADLINE, SAMPLE_WAIT, Asker, AskerThread, Budget
from twc.reconcile.background import BackgroundEngine
from twc.reconcile.health import DaemonMetrics
from twc.reconcile.observe import Observation, Observer, Sources
from twc.reconcile.outcome import BLOCKING, FaultBook, Outcome, outcome_of
from twc.reconcile.plan import Memo, NativePlan, Plan, desired_from, make_plan, native_plan
from twc.reconcile.report import FaultReporter, Reporter, shorten
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import DesiredState, LoopState, ReconcileAction, decide_reconcile
from twc.reconcile.state import sleep as interruptible_sleep
from twc.spec import Fleet, load_fleet

logger = logging.getLogger(__name__)

QUIET = 0.3  # seconds without a wake that end a burst; the most a woken iteration rests
BURST_LIMIT = 2.0  # seconds an up waits at most for a burst of wakes to end


class LeaderGate(Protocol):
    """Whether this daemon may apply the stack now (the Lease elector)."""

    def is_leader(self) -> bool:
        """True while this daemon holds the Lease."""
        ...


@dataclass(frozen=True)
class Clocks:
    """The loop's time and threads, injected so tests run on virtual time with fakes."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    cpu: Callable[[], float] = time.thread_time  # the loop thread's own CPU time
    sleep: Callable[[float, threading.Event], bool] = interruptible_sleep
    jitter: Callable[[], float] | None = random.random
    engine: Callable[[str], Executor] = lambda stack: ThreadPoolExecutor(1, f"twc-engine-{stack}")
    asker: Callable[[str], AskerThread] = AskerThread


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
        budgets: Budget | None = None,
    ) -> None:
        self.stack, self.settings = stack, settings
        self.clocks = clocks or Clocks()
        self.metrics = metrics or DaemonMetrics(stack)
        self.state: LoopState | None = None
        self.wakeup = threading.Event()
        self.exit_code = 0
        self._leader = leader
        self._stop = threading.Event()
        self._crashed: BaseException | None = None
        self._was_leader: bool | None = None
        self._rounds_seen: float | None = None
        self._last_replicas: dict[str, int] = {}
        self._accepted: dict[str, Any] | None = None
        self._desired_memo, self._native_memo = Memo[DesiredFleet](), Memo[NativePlan]()
        self._hash_memo = Memo[DesiredState]()
        self._read_memos: dict[str, Memo[ObjectList]] = {}  # per kind, what the desired state reads
        self._resuming = sources.record is not None
        self._replicas: tuple[Mapping[str, int], Mapping[str, int]] = ({}, {})  # desired, current
        self._rested_at = 0.0  # when a woken iteration may begin (the last one's rest over)
        self._woken_at: float | None = None  # the first wake since the last quiet moment
        self._up_waits = False  # the last iteration's up waits for a quiet moment
        self.iterations: deque[dict[str, Any]] = deque(maxlen=8)  # the last ones, for ``/status``
        self._turn = effects.refresh_turn
        clock = self.clocks.monotonic
        # No liveness timeout set (it is > 0 when set): four reconcile intervals, at least 60 s.
        self._allowance = settings.liveness_timeout or max(4 * settings.reconcile_interval, 60.0)
        self._expect_progress()
        self.faults = FaultBook(clock, self.clocks.wall)
        faults = FaultReporter(stack=stack, metrics=self.metrics, book=self.faults)
        asking, wake = self.clocks.asker(stack), self.wakeup.set
        self.observer = Observer(
            sources,
            settings=settings,
            fault=faults.fault,
            metrics=self.metrics,
            clock=clock,
            budgets=budgets or Budget(),
            asker=Asker(thread=asking, wake=wake),
            sampler=Asker(thread=asking, wake=wake, wall=self.clocks.wall, wait=SAMPLE_WAIT),
        )
        self.reporter = Reporter(
            faults=faults, writer=effects.writer, wall=self.clocks.wall, observer=self.observer
        )
        self.guard = DeletionGuard(sources, stack=stack, on_verdict=self.reporter.report_held)
        self.actor = Actor(
            effects,
            sources,
            stack=stack,
            metrics=self.metrics,
            may_apply=self._may_apply_now,
            loop=self.observer.event_loop,
        )
        self._engine = BackgroundEngine(
            stack,
            actor=self.actor,
            reporter=self.reporter,
            settings=settings,
            clocks=(clock, self.clocks.jitter),
            wakeup=self.wakeup,
            executor=self.clocks.engine(stack),
        )
        self.metrics.leader.labels(stack).set(0)

    def _may_apply_now(self) -> bool:
        return self._leader is None or self._leader.is_leader()

    def request_stop(self, exit_code: int | None = None) -> None:
        """End the loop after the step in progress (SIGTERM); wakes any sleep at once."""
        if exit_code is not None:
            self.exit_code = exit_code
        self._stop.set()
        self.wakeup.set()

    @property
    def stopping(self) -> bool:
        """Whether the loop was asked to stop (or has ended)."""
        return self._stop.is_set()

    def live(self) -> tuple[bool, str]:
        """The liveness probe: not crashed, and progress when progress was due."""
        if self._crashed is not None:
            return False, f"reconcile loop crashed: {self._crashed!r}"
        now = self.clocks.monotonic()
        last, due = self._progress
        if now <= due:
            return True, "ok"
        return False, (
            f"the reconcile loop made no progress for {now - last:.0f} s (it was due "
            f"{now - due:.0f} s ago; liveness timeout {self._allowance:g} s)"
        )

    def _expect_progress(self, within: float = 0.0) -> None:
        """Progress now; the next is due within ``within`` seconds (plus the allowance)."""
        now = self.clocks.monotonic()
        # One pair replaced whole: the probe's thread reads both of one moment, without a lock.
        self._progress = (now, now + max(0.0, within) + self._allowance)

    def ready(self) -> tuple[bool, str]:
        """Readiness: a standby is; a leader once it reconciled and nothing blocks it."""
        if not self._may_apply():
            return True, "standby: another daemon holds the lease"
        if blocking := sorted(f.value for f in self.faults.active() if f in BLOCKING):
            return False, f"cannot apply the stack: {', '.join(blocking)}"
        if self.state is None or self.state.last_success_at is None:
            return False, "no successful reconcile yet"
        return True, f"ok: {self.state.iteration} iterations"

    def status(self) -> dict[str, Any]:
        """The loop's state in words, for ``/status``."""
        state = self.state or LoopState(started_at=0)
        outcome, reporter, now = state.last_outcome, self.reporter, self.clocks.monotonic()
        hold = self.guard.hold
        return {
            "stack": self.stack,
            "leading": self._was_leader is True,
            "iterations": state.iteration,
            "consecutiveFailures": state.consecutive_failures,
            "lastIteration": self.iterations[-1] if self.iterations else None,
            "recentIterations": list(self.iterations),
            "lastOutcome": None
            if outcome is None
            else {
                "kind": outcome.kind.value,
                "reason": outcome.reason.value if outcome.reason is not None else None,
                "message": shorten(outcome.message, 500),
            },
            "appliedHash": state.applied.fleet if state.applied else None,
            "blockedHash": state.blocked,
            "invalidQueueObjects": dict(reporter.reported_invalid),
            "heldDeletions": None
            if hold is None
            else {
                "workers": sorted(hold.workers),
                "digest": hold.digest,
                "since": hold.since_wall,
                "observations": hold.observations,
                "reason": hold.reason,
            },
            "objectConflicts": dict(reporter.reported_conflicts),
            "rejectedObjects": {
                key: {"reason": reason, "message": shorten(message, 500)}
                for key, (reason, message) in sorted(reporter.reported_native.items())
            },
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
                key: {"desired": desired, "current": self._replicas[1].get(key)}
                for key, desired in sorted(self._replicas[0].items())
            },
        }

    def run(self, *, once: bool = False) -> int:
        """Reconcile until stopped (``once``: one iteration); the exit code."""
        sources = self.observer.sources
        watches = [w for w in (sources.queues, sources.native) if w is not None]
        if once:
            # No later iteration would take the answers in: the one iteration waits.
            self.observer.asker.wait = self.observer.sampler.wait = POLLERS_DEADLINE
        for watch in watches:
            watch.start(self.wakeup)
        state = self.state = LoopState(started_at=self.clocks.monotonic())
        try:
            self._await_first_list(watches)
            while not self._stop.is_set():
                if not self._may_apply():
                    self._standby()
                    continue
                self.wakeup.clear()
                state = self.state = self.iterate(state)
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
            self.state = self._drain(self.state or state)
            for watch in watches:
                watch.stop()
            self.observer.close()
        logger.info("[%s] stopped", self.stack)
        return self.exit_code

    def iterate(self, state: LoopState) -> LoopState:
        """One iteration: observe → plan → execute → report; never raises for a failed step."""
        began, cpu = self.clocks.monotonic(), self.clocks.cpu()
        if self._engine.ended():
            self._apply_added(state, now=began)  # a new Queue's worker waits for no report
        state = self._engine.collect(state)
        started = self.clocks.monotonic()
        plan: Plan | None = None
        deferred = False
        try:
            plan = self.plan(state, now=started)
            if self._resuming and state.applied is None:
                state, plan = self._resume(state, plan, now=started)
            self.reporter.planned(plan)
            state = state.with_scaling(plan.scaling)
            deferred = self._execute(plan, started)
            outcome = Outcome.success()
        except Exception as exc:  # noqa: BLE001 - nothing escapes an iteration: it becomes an outcome
            settings, jitter = self.settings.backoff, self.clocks.jitter
            outcome = outcome_of(exc, attempt=state.next_attempt, settings=settings, jitter=jitter)
        if not (deferred and outcome.ok):  # else the up's outcome is this iteration's
            state = self._report(state, plan, outcome, started)
        state = self._engine.collect(state)
        self._expect_progress(state.next_delay(now=self.clocks.monotonic(), settings=self.settings))
        took, cpu = self.clocks.monotonic() - began, self.clocks.cpu() - cpu
        self._rested_at = began + took + min(cpu, QUIET)
        self.iterations.append(
            {
                "number": self.iterations[-1]["number"] + 1 if self.iterations else 1,
                "ok": outcome.ok,
                "seconds": round(took, 6),
                "cpuSeconds": round(cpu, 6),  # this thread's own work
                "endedAt": self.clocks.wall(),
            }
        )
        return state

    def observe(self, *, now: float) -> tuple[Observation, DesiredFleet]:
        """Step one: the cluster and the file, the desired fleet the guards allow."""
        observer = self.observer
        registry, file = observer.sources.registry, observer.sources.file
        seen = observer.observe()
        if self._accepted is None:
            recalled = observer.recall()
            self.guard.remember(recalled.accepted, recalled.fleet)
            self._accepted = {k: dict(v) for k, v in recalled.accepted.items()}
        # The same file, objects and accepted specs make the same desired fleet (a memo,
        # docs/architecture.md); of the objects, what it reads: not the status written back.
        cluster, memos = seen.cluster or {}, self._read_memos
        read = {k: memos.setdefault(k, Memo()).get((v,), v.trimmed) for k, v in cluster.items()}
        key = (seen.fleet, read, self._accepted)  # the fleet says whether objects are read
        make = functools.partial(desired_from, seen, accepted=key[2], registry=registry, file=file)
        desired = self._desired_memo.get(key, make)
        existing = seen.live.keys() if seen.live is not None else None
        listed, wall = seen.live_known, self.clocks.wall()
        desired = self.guard.guard(seen.fleet, desired, existing, known=listed, now=now, wall=wall)
        previous = self.guard.previous
        # Without new workers whose names others' objects have (``ObjectExists``), and
        # without objects whose Deployment the API server refuses (``InvalidSpec``).
        conflicts = observer.conflicts(desired, existing, previous.workers if previous else ())
        refused = observer.refusals(desired, previous, skip=conflicts)
        if conflicts or refused:
            inputs = desired.inputs.model_copy(update={"conflicts": conflicts, "refused": refused})
            desired = desired_fleet(seen.fleet, inputs, registry=registry, file=file)
        return seen, desired

    def plan(self, state: LoopState, *, now: float) -> Plan:
        """Observe, then the pure plan; touches no engine. Temporal is asked last, so the
        replicas its answers ask for wait for no other part of the plan."""
        seen, desired = self.observe(now=now)
        native, watched = None, self.observer.watched_kinds()
        if self.observer.sources.native is not None:
            # The same fleet and objects, the same native plan: two fifths of a no-op's CPU.
            views_of = self.stack if self.actor.views is not None else None
            make = functools.partial(native_plan, seen, desired, watched, views_of)
            native = self._native_memo.get((desired, seen.cluster, watched, views_of), make)
        plan = make_plan(
            seen,
            desired,
            self.observer.facts(desired),
            state,
            settings=self.settings,
            now=now,
            last_replicas=self._last_replicas,
            program=self.observer.sources.program,
            native=native,
            wall=self.clocks.wall(),
            memo=self._hash_memo,
        )
        self._replicas = dict(plan.replicas), dict(plan.current)
        return plan

    def _apply_added(self, state: LoopState, *, now: float) -> None:
        try:
            if (plan := self.plan(state, now=now)).decision.added:
                self.actor.apply_early(plan)
        except Exception as exc:  # noqa: BLE001 - the iteration that follows reports it
            logger.debug("[%s] new workers not applied early: %s", self.stack, exc)

    def _execute(self, plan: Plan, started: float) -> bool:
        self._up_waits = False
        current = {k: plan.current[k] for k in plan.decisions if k in plan.current}
        self._last_replicas.update(current | self.actor.scale(plan))  # the written win
        self.actor.sync_views(plan)
        decision, stopping = plan.decision, self._stop.is_set()
        deferred = False
        # Held workers come from the last plan carried out (not one whose up waits for a burst).
        if decision.action is ReconcileAction.SKIP:
            self.guard.previous = plan.desired
            logger.debug("[%s] %s: nothing to do", self.stack, decision.reason)
            if not self._engine.busy():
                self.actor.settle_early(plan)
        elif stopping:
            # An engine run started now could outlive the grace period.
            logger.info("[%s] stopping: not starting an up (%s)", self.stack, decision.reason)
        else:
            self.actor.apply_early(plan)
            if self._engine.busy():
                if decision.workers:
                    self._engine.give_way(decision.reason)  # a refresh yields to a change
            elif self._woken_at is not None and started - self._woken_at < BURST_LIMIT:
                # A `kubectl apply` is a burst of watch events: one up once they are quiet.
                self._up_waits = True
            else:
                self.guard.previous = plan.desired
                self._engine.start_up(plan, started)
            deferred = True
        if not stopping:
            self.actor.route(plan)
        self._accepted = plan.desired.accepted
        return deferred

    def _report(
        self, state: LoopState, plan: Plan | None, outcome: Outcome, started: float
    ) -> LoopState:
        now = self.clocks.monotonic
        state = state.finished(outcome, now=now())
        self.reporter.finished(plan, outcome, state, started=started, now=now())
        since = state.refresh_due_at(self.settings)
        due = outcome.ok and now() >= since and not self._stop.is_set() and not self._engine.busy()
        if due and (self._turn is None or self._turn(self.stack, since)):
            self._engine.start_refresh()
        return state

    def _wait(self, state: LoopState) -> LoopState:
        now = self.clocks.monotonic()
        sample_in = self.observer.next_sample_in(now)
        delay = state.next_delay(now=now, settings=self.settings, sample_due_in=sample_in)
        if not self.clocks.sleep(min(delay, QUIET) if self._up_waits else delay, self.wakeup):
            self._woken_at = None  # a quiet moment: an up that waited for one starts now
            return state
        now = self.clocks.monotonic()
        self._woken_at = now if self._woken_at is None else self._woken_at
        if not self._stop.is_set():
            # Rest the last iteration's CPU time, at most QUIET: a storm of wakes is half idle.
            self.clocks.sleep(self._rested_at - now, self._stop)
        return state

    def _resume(self, state: LoopState, plan: Plan, *, now: float) -> tuple[LoopState, Plan]:
        if not self._may_apply():
            return state, plan
        self._resuming = False
        record = self.actor.resume()
        if record is None:
            return state, plan
        applied = DesiredState(record.fleet, record.shared, MappingProxyType(dict(record.workers)))
        state = replace(state, applied=applied)
        blocked = state.blocked_hash(now=now, settings=self.settings)
        decision = decide_reconcile(applied, plan.hashes, blocked=blocked)
        said = f"the stack is as the last recorded up left it (update {record.update})"
        logger.info("[%s] resumed: %s; %s", self.stack, said, decision.reason)
        return state, replace(plan, decision=decision)

    def _drain(self, state: LoopState) -> LoopState:
        # Waiting for the engine run (a stop, --once) is the loop's step: at most its deadline.
        self._expect_progress(self.settings.engine.deadline + self.settings.engine.interrupt_grace)
        return self._engine.drain(state)

    def _await_first_list(self, watches: list[Any], timeout: float = 10.0) -> None:
        # The watches list in their own threads: the first iteration waits for them a moment.
        deadline = self.clocks.monotonic() + timeout
        self._expect_progress(timeout)
        while not all(map(_listed, watches)) and self.clocks.monotonic() < deadline:
            if self._stop.is_set():
                return
            self.clocks.sleep(0.1, self.wakeup)
        if not self._stop.is_set():
            self.wakeup.clear()

    def _may_apply(self) -> bool:
        leading = self._may_apply_now()
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
            self._expect_progress(retry)
        self.clocks.sleep(retry, self.wakeup)
        if not self._stop.is_set():
            self.wakeup.clear()  # watch events are for the leader


def _listed(watch: Any) -> bool:
    found = watch.observed()  # unknown until listed (or while the list fails)
    return all(o.is_known for o in (found.values() if isinstance(found, dict) else (found,)))


class DeletionGuard:
    """One stack's hold on mass deletions: :func:`twc.desired.judge_deletions` kept across
    iterations, with its previous desired state and release.

    Held workers stay desired with the inputs they last came from; ``DeletionsHeld`` names them
    (on the stack's record too, for ``twc approve``). A released set stays released while its
    deletions are under way; the same set coming back later is held again.
    """

    def __init__(
        self, sources: Sources, *, stack: str, on_verdict: Callable[[GuardVerdict], None]
    ) -> None:
        self._sources = sources
        self._stack = stack
        self._on_verdict = on_verdict
        self.hold: Hold | None = None
        self.previous: DesiredFleet | None = None  # where held workers come from
        self._releasing: frozenset[str] = frozenset()

    def remember(self, accepted: Mapping[str, Any], fleet: Mapping[str, Any] | None) -> None:
        """Start from the desired state the record's last accepted objects and fleet make."""
        if fleet is None or self.previous is not None:
            return
        try:
            self.previous = desired_fleet(
                load_fleet(dict(fleet), self._sources.file),
                DesiredInputs(
                    fleet=dict(fleet),
                    cluster={k: ObjectList.known(v.values()) for k, v in accepted.items()},
                    accepted={k: dict(v) for k, v in accepted.items()},
                ),
                registry=self._sources.registry,
                file=self._sources.file,
            )
        except Exception as exc:  # noqa: BLE001 - held workers cannot come back; the guard still holds
            logger.warning("[%s] the recorded desired state does not load: %s", self._stack, exc)

    def guard(
        self,
        fleet: Fleet,
        desired: DesiredFleet,
        existing: Collection[str] | None,
        *,
        known: bool = True,
        now: float,
        wall: float,
    ) -> DesiredFleet:
        """``desired`` with held workers put back; ``existing``: workers running now, or None
        (then the previous plan's). Not ``known`` (their list failed), every deletion is held."""
        if existing is None and not known and self.previous is None:
            raise HoldFailed((), "the running workers are unknown and no earlier plan knows them")
        if existing is None:
            existing = set(self.previous.workers) if self.previous is not None else set()
        running = set(existing)
        deleting = frozenset(running - set(desired.workers))
        settings = fleet.deletion_guard
        if not known:  # fail closed: no share of an unknown set is safe to delete
            settings = settings.model_copy(update={"max_share": 0.0, "release_after": None})
        if not deleting or not deleting <= self._releasing:
            self._releasing = frozenset()
        approved: str | None = None
        if len(deleting) > settings.allowed(len(running)):
            approved = deletion_digest(deleting) if self._releasing else self._approved()
        verdict = judge_deletions(
            deleting,
            len(running),
            self.hold,
            now=now,
            wall=wall,
            settings=settings,
            approved=approved,
        )
        if verdict.released and not self._releasing:
            self._releasing = verdict.deleting
            names, why = ", ".join(sorted(verdict.deleting)), verdict.released
            said = "[%s] deleting %d workers (%s): %s"
            logger.warning(said, self._stack, len(verdict.deleting), why, names)
        self.hold = verdict.hold
        self._on_verdict(verdict)
        if verdict.hold is None:
            return desired
        if self.previous is None:
            raise HoldFailed(verdict.hold.workers, "no earlier desired state knows them")
        # Counted but not held: what an earlier plan let go and still stops has no inputs left.
        holdable = verdict.hold.workers & set(self.previous.workers)
        held, missing = held_objects(self.previous, holdable, desired)
        if missing:
            raise HoldFailed(missing, "no earlier input of theirs is known")
        inputs = desired.inputs.model_copy(update={"held": held})
        registry, file = self._sources.registry, self._sources.file
        return desired_fleet(fleet, inputs, registry=registry, file=file)

    def _approved(self) -> str | None:
        if (record := self._sources.record) is None:
            return None
        try:
            return record.approved()
        except Exception as exc:  # noqa: BLE001 - no approval read is no approval: still held
            logger.warning("[%s] could not read approvals from %s: %s", self._stack, record, exc)
            return None
