"""Act: carry out a plan — early apply, the engine's ``up``, ``refresh``, recovery.

The engine is the truth about the stack; everything here either runs it or prepares
for it:

* before the first engine run of each term as leader, what a killed predecessor left
  (a lock, pending operations) is repaired;
* a new worker's ServiceAccount and Deployment are applied ahead of the ``up``
  (:mod:`twc.loop.early`) and released to the engine once the ``up`` succeeded;
* ``up`` is targeted at the changed workers' resources when only a few changed;
* ``refresh`` runs on schedule and reports the resources that drifted;
* what each successful ``up`` applied is recorded with the stack's version, so a
  restarted daemon whose stack nobody changed since runs no ``up`` (:meth:`Actor.resume`);
* the generated TemporalWorker objects of Queue and fleet-file workers are kept as the
  plan says, on every iteration, engine run or not (:mod:`twc.loop.views`).
* autoscaled workers are scaled through their Deployment's ``scale`` subresource
  (:meth:`Actor.scale`), never through the engine.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from twc.errors import TemporaryError
from twc.kube.record import AppliedRecord
from twc.kube.workloads import ObjectRef, ref_of
from twc.kube.writer import ObjectWriter
from twc.loop.backlog import SecretReader
from twc.loop.decide import DesiredState, ReconcileAction, ReconcileDecision
from twc.loop.early import EARLY_FIELD_MANAGER, EarlyApplier, early_objects, plan_release
from twc.loop.health import DaemonMetrics
from twc.loop.plan import Plan
from twc.loop.views import ViewSync, ViewWriter
from twc.stackrun.automation import StackEngine, new_worker_targets, under_queue
from twc.stackrun.build import build_id

__all__ = ["Actor", "Effects", "Scaler"]

logger = logging.getLogger(__name__)


class Scaler(Protocol):
    """Writes an autoscaled worker's replicas (:class:`twc.kube.scale.ReplicaScaler`)."""

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Set the Deployment's replicas through its scale subresource."""
        ...


@dataclass(frozen=True)
class Effects:
    """Everything the loop changes: the stack (through the engine) and the cluster."""

    engine: StackEngine
    """Runs ``up``/``refresh`` and repairs a killed run's leftovers."""
    early: EarlyApplier | None = None
    """Applies a new worker's ServiceAccount and Deployment before the engine runs;
    ``None`` leaves it to the ``up``."""
    writer: ObjectWriter | None = None
    """Writes status, finalizers and Events back; ``None`` writes nothing."""
    temporal_address: str | None = None
    """The stack's Temporal address override (the program's ``twc:temporalAddress``),
    for early-applied pod templates."""
    views: ViewWriter | None = None
    """Writes the generated TemporalWorker objects of Queue and fleet-file workers;
    ``None`` keeps none."""
    scaler: Scaler | None = None
    """Writes autoscaled workers' replicas; ``None`` (no cluster) scales nothing."""
    refresh_turn: Callable[[str, float], bool] | None = None
    """Whether the stack's refresh, due since the given time, may start now (the
    process's refresh budget over its shards, :meth:`~twc.loop.shards.EngineSlots.refresh_turn`);
    ``None``: whenever it is due."""


class AppliedStore(Protocol):
    """Where what the last successful ``up`` applied is kept (:class:`RecordStore`)."""

    def load_applied(self) -> AppliedRecord | None:
        """What is recorded, if anything."""
        ...

    def save_applied(self, applied: AppliedRecord) -> None:
        """Record it."""
        ...


class Actor:
    """Runs the engine for the loop."""

    def __init__(
        self,
        effects: Effects,
        *,
        stack: str,
        metrics: DaemonMetrics,
        clock: Callable[[], float],
        may_apply: Callable[[], bool],
        read_secret: SecretReader | None,
        applied: AppliedStore | None = None,
    ) -> None:
        """Act through ``effects``.

        Args:
            effects: The engine and the cluster writers.
            stack: The stack's name (logs, metrics).
            metrics: Where to count engine runs.
            clock: Monotonic time, for the durations logged.
            may_apply: Whether this daemon may apply now (it leads).
            read_secret: Reads credential secrets for early-applied pod templates.
            applied: Where what each successful ``up`` applied is recorded; ``None``
                records nothing (a restart then runs a full ``up``).
        """
        self.engine = effects.engine
        self._scaler = effects.scaler
        self._early = effects.early
        self._temporal_address = effects.temporal_address
        self._stack = stack
        self._metrics = metrics
        self._clock = clock
        self._may_apply = may_apply
        self._read_secret = read_secret
        self._recovered = False
        self._repaired: Sequence[str] = ()
        """What the last recovery repaired."""
        self._applied_store = applied
        self._applied: AppliedRecord | None = None
        """What this daemon last recorded (or resumed from)."""
        self._early_pending: set[ObjectRef] | None = None
        self._views = (
            ViewSync(effects.views, stack=stack, metrics=metrics, events=effects.writer)
            if effects.views is not None
            else None
        )
        # Early applies happen on the loop's thread, releases after an up on the
        # engine's (while an up runs in the background): one lock for the pending set.
        self._early_lock = threading.Lock()

    @property
    def early_pending(self) -> list[str]:
        """Objects applied ahead of the engine and not yet adopted by a successful up."""
        return sorted(str(ref) for ref in self._early_pending or ())

    def new_term(self) -> None:
        """A new term as leader may follow someone else's killed run: check again."""
        self._recovered = False

    # --------------------------------------------------------------- views
    @property
    def keeps_views(self) -> bool:
        """Whether this daemon keeps generated TemporalWorker objects."""
        return self._views is not None

    def sync_views(self, plan: Plan) -> None:
        """Keep the generated TemporalWorker objects as ``plan`` says (while leading).

        Never raises: a view not written now is written by a later iteration.
        """
        views = plan.native.views if plan.native is not None else None
        if self._views is None or views is None or not self._may_apply():
            return
        self._views.sync(views)

    # ------------------------------------------------------------------ up
    def apply_early(self, decision: ReconcileDecision, plan: Plan) -> None:
        """Apply new workers' objects now: ahead of an ``up`` started next, or while
        one is in progress (a Queue created during a long ``up`` gets its Deployment
        in the same second, not after that ``up``)."""
        if self._may_apply():
            self._apply_early(decision, plan)

    def settle_early(self, plan: Plan) -> None:
        """With nothing to apply and no engine run in progress: settle the objects still
        applied early. Those of a worker this plan has belong to the engine already
        (the stack holds the worker: nothing to apply), so they are released; those of
        a worker it does not have were never the engine's, so they are deleted. Without
        this, a Queue deleted while an up that did not have its worker ran (the worker
        applied early during it) left its Deployment running until the shard's next up,
        which a quiet shard may never run; so did a predecessor's objects when a
        restarted daemon resumed without an up."""
        if self._early is None or not self._may_apply():
            return
        pending = self._pending_early()
        if pending:
            self._release_early(plan, set(pending))

    def run_up(self, decision: ReconcileDecision, plan: Plan) -> None:
        """The engine's part of applying the plan: repair, ``up``, release the early
        objects it adopted (on the engine's own thread when the loop runs it in the
        background).

        Raises:
            TemporaryError: This daemon does not lead any more.
            Exception: Whatever the engine raised.
        """
        if not self._may_apply():
            raise TemporaryError("not leading any more; not applying")
        if not self._recovered:
            # Before this daemon's first engine run (of each term as leader): a killed
            # predecessor may have left a lock and pending operations.
            self.recover()
        targets = (
            self._targets(decision, plan) if decision.action is ReconcileAction.TARGETED else None
        )
        mode = "targeted" if targets else "full"
        workers = ", ".join(sorted(decision.workers)) or "-"
        logger.info("[%s] up (%s): %s [%s]", self._stack, mode, decision.reason, workers)
        self._metrics.engine_runs.labels(self._stack, "up", mode).inc()
        started = self._clock()
        with self._early_lock:
            # What this up adopts: objects applied early for workers it does not have
            # are deleted only if they were pending before it started.
            owned = set(self._early_pending or ())
        with self._engine_running("up"):
            report = self.engine.up(plan.inputs, targets)
        self._record_applied(plan.hashes, report.update)
        self._count_recoveries(report.recoveries)
        self.scale_new(plan, decision.added)
        self._release_early(plan, owned)
        changes = {op: n for op, n in report.changes.items() if op != "same" and n}
        logger.info(
            "[%s] up (%s) done in %.1f s: %s",
            self._stack,
            mode,
            self._clock() - started,
            changes or "no changes",
        )

    @contextlib.contextmanager
    def _engine_running(self, operation: str) -> Iterator[None]:
        """While the engine runs, the gauge says so."""
        gauge = self._metrics.engine_in_progress.labels(self._stack, operation)
        gauge.set(1)
        try:
            yield
        finally:
            gauge.set(0)

    def _targets(self, decision: ReconcileDecision, plan: Plan) -> list[str] | None:
        """The URNs a targeted ``up`` names: every resource of each changed or removed
        worker, and the component of each new one (its queue's too, when it hangs on
        one). ``None``: a full ``up``."""
        urns = self.engine.worker_urns()
        targets: list[str] = []
        for worker in sorted(decision.workers - decision.added):
            found = urns.get(worker)
            if not found:
                return None
            now = plan.workers.get(worker)
            hangs = under_queue(found[0])
            if now is None and hangs:
                # A Queue's worker going: its queue's component (and the Queue object
                # a file's queue has twc create) goes with it, in a full up.
                return None
            if now is not None and hangs != (now.derived and now.queue is not None):
                # It moves in or out from under a queue's component: a full up moves
                # it by its alias (its new URN is no target).
                return None
            if hangs and now is not None and now.queue is not None and now.queue.create_object:
                # Its queue's spec is in its hash, and the Queue object twc creates for
                # it belongs to its queue's component, not to it: a full up updates it.
                return None
            targets.extend(found)
        if decision.added:
            if not urns:
                return None
            # The stack's URNs all start alike: the new ones are named the same way.
            scheme, project = next(iter(urns.values()))[0].split("::")[:2]
            for key in sorted(decision.added):
                new = plan.workers.get(key)
                if new is None:
                    return None
                queue = (
                    f"{new.queue.namespace}/{new.queue.name}"
                    if new.derived and new.queue is not None
                    else None
                )
                targets.extend(new_worker_targets(scheme, project, key, queue=queue))
        return targets

    # ------------------------------------------------------------- scaling
    def scale(self, plan: Plan) -> dict[str, int]:
        """Write the plan's scaling decisions through the scale subresource.

        Never raises for one worker: a failed write is logged and retried by the next
        iteration (the live count still differs). Nothing is written while another
        daemon leads.

        Returns:
            The counts written, per worker key.
        """
        if self._scaler is None or not plan.scale or not self._may_apply():
            return {}
        done: dict[str, int] = {}
        for key, replicas in sorted(plan.scale.items()):
            namespace, _, name = key.partition("/")
            try:
                self._scaler.scale(namespace, name, replicas)
            except Exception as exc:  # noqa: BLE001 - one worker's failed scale never stops the loop; retried next iteration
                logger.warning("[%s/%s] could not scale to %d: %s", self._stack, key, replicas, exc)
                self._metrics.scale_writes.labels(self._stack, "failed").inc()
                continue
            current = plan.current.get(key)
            if current != replicas:
                logger.info("[%s/%s] scaled %s → %d", self._stack, key, current, replicas)
            done[key] = replicas
            self._metrics.scale_writes.labels(self._stack, "written").inc()
        return done

    def scale_new(self, plan: Plan, keys: set[str] | frozenset[str]) -> None:
        """Right after the ``up`` that created them: give new autoscaled workers the
        autoscaler's count (the engine created them at the API server's default)."""
        if self._scaler is None:
            return
        for key in sorted(keys):
            worker = plan.workers.get(key)
            replicas = plan.replicas.get(key)
            if worker is None or worker.autoscaling is None or replicas is None:
                continue
            try:
                self._scaler.scale(worker.namespace, worker.name, replicas)
            except Exception as exc:  # noqa: BLE001 - the next iteration scales it
                logger.info("[%s/%s] not scaled after its up: %s", self._stack, key, exc)

    # ------------------------------------------------------------- refresh
    def refresh(self) -> list[str]:
        """Refresh the stack; returns the resources that drifted.

        Raises:
            Exception: Whatever the engine raised.
        """
        self._metrics.engine_runs.labels(self._stack, "refresh", "full").inc()
        if not self._recovered:
            self.recover()
        with self._engine_running("refresh"):
            drifted = list(self.engine.refresh())
        if not drifted and self._applied is not None:
            # Nothing drifted: the stack is still as the recorded up left it, one
            # update later.
            self._record(replace(self._applied, update=self.engine.last_update() or "-"))
        return drifted

    def give_way(self, reason: str) -> bool:
        """Stop the refresh in progress so a change runs first; whether one was told to."""
        return self.engine.preempt(reason)

    def recover(self) -> None:
        """Repair what a killed run left (a lock, pending operations)."""
        with self._engine_running("recover"):
            actions = self.engine.recover()
        self._count_recoveries(actions)
        self._repaired = tuple(actions)
        self._recovered = True

    # -------------------------------------------------------------- resume
    def recorded(self) -> AppliedRecord | None:
        """What the last successful ``up`` of any earlier daemon recorded; ``None`` when
        nothing is, or it cannot be read now (a full ``up`` then, as before)."""
        if self._applied_store is None:
            return None
        try:
            return self._applied_store.load_applied()
        except Exception as exc:  # noqa: BLE001 - unreadable: the daemon applies the stack as if nothing were recorded
            logger.warning("[%s] the last applied state could not be read: %s", self._stack, exc)
            return None

    def resume(self, record: AppliedRecord) -> bool:
        """Whether the stack is exactly as ``record``'s ``up`` left it, so that a daemon
        (re)starting on the same desired state needs no ``up``: the same build of twc
        rendered it, no killed run left anything to repair, and no update of anyone
        else's (a manual ``twc up``, plain ``pulumi up``, a refresh that found drift)
        came after it.
        """
        if not self._may_apply():
            return False
        if record.build != build_id():
            logger.info("[%s] not resuming: another build of twc applied the stack", self._stack)
            return False
        try:
            if not self._recovered:
                self.recover()
            if self._repaired:
                logger.info("[%s] not resuming: a killed run was repaired", self._stack)
                return False
            update = self.engine.last_update()
        except Exception as exc:  # noqa: BLE001 - unsure: apply the stack as before
            logger.info("[%s] not resuming: %s", self._stack, exc)
            return False
        if update != record.update:
            logger.info(
                "[%s] not resuming: the stack's last update (%s) is not the last one applied (%s)",
                self._stack,
                update,
                record.update,
            )
            return False
        self._applied = record
        return True

    def _record_applied(self, hashes: DesiredState, update: str | None) -> None:
        if update is None:
            return
        self._record(
            AppliedRecord(
                fleet=hashes.fleet,
                shared=hashes.shared,
                workers=dict(hashes.workers),
                update=update,
                build=build_id(),
            )
        )

    def _record(self, applied: AppliedRecord) -> None:
        if self._applied_store is None:
            return
        try:
            self._applied_store.save_applied(applied)
        except Exception as exc:  # noqa: BLE001 - a restart then runs a full up, as before
            logger.warning("[%s] what the up applied was not recorded: %s", self._stack, exc)
            return
        self._applied = applied

    def _count_recoveries(self, actions: Sequence[str]) -> None:
        for action in actions:
            logger.warning("[%s] recovered the stack: %s", self._stack, action)
            self._metrics.recoveries.labels(self._stack, action.split(":", 1)[0]).inc()

    # --------------------------------------------------------- early apply
    def _apply_early(self, decision: ReconcileDecision, plan: Plan) -> None:
        """Apply new workers' ServiceAccount and Deployment ahead of the ``up``."""
        if self._early is None:
            return
        pending = self._pending_early()
        started = self._clock()
        applied: list[str] = []
        for key in sorted(decision.added):
            worker = plan.workers.get(key)
            if worker is None or worker.rollout is not None:
                # A versioned worker's Deployments are its versions': the up makes them.
                continue
            try:
                objects = early_objects(
                    worker,
                    plan.desired.fleet,
                    read_secret=self._read_secret,
                    temporal_address=self._temporal_address,
                    replicas=plan.replicas.get(key),
                    stack=self._stack,
                )
                refs = [ref_of(obj) for obj in objects]
                if any(self._early.exists(ref) for ref in refs):
                    # The engine created it already (it read a newer file than the hash).
                    continue
                for obj, ref in zip(objects, refs, strict=True):
                    with self._early_lock:
                        pending.add(ref)
                    self._early.apply(obj, EARLY_FIELD_MANAGER)
                replicas = plan.replicas.get(key)
                if worker.autoscaling is not None and replicas is not None and self._scaler:
                    # The autoscaler co-owns the count before the early manager is
                    # released (else the release would drop the field, and the API
                    # server would reset it to its default).
                    self._scaler.scale(worker.namespace, worker.name, replicas)
            except Exception as exc:  # noqa: BLE001 - early apply never fails the up; the up does it anyway
                # Never a failure: the up creates the worker anyway, a moment later.
                logger.info("[%s/%s] not applied early (the up will): %s", self._stack, key, exc)
                self._metrics.early_applies.labels(self._stack, "skipped").inc()
                continue
            applied.append(key)
            self._metrics.early_applies.labels(self._stack, "applied").inc()
        if applied:
            logger.info(
                "[%s] applied early in %.0f ms: %s",
                self._stack,
                (self._clock() - started) * 1000,
                ", ".join(applied),
            )

    def _pending_early(self) -> set[ObjectRef]:
        if self._early_pending is None:
            # Left by a daemon killed between its early apply and its up, if any.
            assert self._early is not None
            try:
                self._early_pending = set(self._early.managed_by(EARLY_FIELD_MANAGER))
            except Exception as exc:  # noqa: BLE001 - early apply never fails the up; the up does it anyway
                logger.warning("[%s] could not list early-applied objects: %s", self._stack, exc)
                return set()
        return self._early_pending

    def _release_early(self, plan: Plan, owned: set[ObjectRef]) -> None:
        """After a successful ``up``: the engine owns the early objects of its workers
        now. Objects applied early for a worker this ``up`` does not have are deleted
        only when they were pending before it started (their worker went away); ones
        applied while it ran belong to the next ``up``."""
        if self._early is None:
            return
        with self._early_lock:
            pending = set(self._early_pending or ())
        if not pending:
            return
        release, _ = plan_release(pending, plan.workers.keys())
        _, delete = plan_release(owned & pending, plan.workers.keys())
        for ref in release + delete:
            try:
                if ref in release:
                    self._early.release(ref, EARLY_FIELD_MANAGER)
                else:
                    logger.info("[%s] deleting %s: its worker is gone", self._stack, ref)
                    self._early.delete(ref)
            except Exception as exc:  # noqa: BLE001 - early apply never fails the up; the up does it anyway
                logger.warning("[%s] %s: will retry after the next up: %s", self._stack, ref, exc)
                continue
            with self._early_lock:
                if self._early_pending is not None:
                    self._early_pending.discard(ref)
            result = "released" if ref in release else "deleted"
            self._metrics.early_applies.labels(self._stack, result).inc()
