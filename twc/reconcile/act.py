"""Execute a plan: replicas (``scale``), views, early apply, ``up``, ``refresh``, routing.

Before a term's first engine run a killed run's leftovers are repaired; what each ``up``
applied is recorded, so a restarted daemon on an unchanged stack runs none. Only the
engine's own failure fails an iteration.

Early apply: a new worker's ServiceAccount and Deployment are server-side-applied under the
daemon's field manager, only where nothing exists yet, before the engine runs; the ``up``
that follows takes every field over, then the daemon lets go. The engine stays the truth.
Views: the planned generated TemporalWorkers are created, put back and deleted while
leading; an edit of a view's spec is undone with a ``ViewOverwritten`` Warning Event.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol

from prometheus_client import Counter, Gauge

from twc import builders
from twc.connections import PodSpecOptions, default_registry
from twc.desired import deletions_beyond_share, queue_key
from twc.engine.automation import StackEngine, new_worker_targets, under_queue
from twc.engine.build import build_id
from twc.errors import TemporaryError
from twc.kube.client import status_of
from twc.kube.record import AppliedRecord
from twc.kube.workloads import ObjectRef, ref_of
from twc.kube.writer import ObjectWriter
from twc.native.objects import worker_native
from twc.native.views import FROM_QUEUE, VIEW_LABEL, ViewPlan, ViewWrite, spec_matches
from twc.reconcile.health import DaemonMetrics, metric
from twc.reconcile.observe import Sources
from twc.reconcile.plan import Plan
from twc.reconcile.state import ReconcileAction
from twc.spec import Fleet, ResolvedWorker
from twc.versioning import carry_out_all

logger = logging.getLogger(__name__)


VIEW_OVERWRITTEN = "ViewOverwritten"  # the Event on a view whose edit was put back
SCALE_CONCURRENCY = 8  # replica writes in flight at once, per loop


class ViewWriter(Protocol):
    """The writes of views (:class:`twc.kube.writer.TemporalWorkerViews` is the real one)."""

    def apply(self, body: Mapping[str, Any], *, resource_version: str | None) -> dict[str, Any]:
        """Server-side apply a view (conditional on ``resource_version`` when given)."""
        ...

    def replace_spec(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str
    ) -> dict[str, Any]: ...

    def delete(self, namespace: str, name: str, uid: str) -> None: ...


class ViewSync:
    """Carries out the views part of each plan."""

    def __init__(
        self,
        writer: ViewWriter,
        *,
        stack: str,
        metrics: DaemonMetrics,
        events: ObjectWriter | None = None,
    ) -> None:
        self._writer = writer
        self._stack = stack
        self._events = events
        registry = metrics.registry
        what = "Writes of generated TemporalWorker objects, by operation."
        self._writes = metric(Counter, registry, "temporalworker_view_writes", what, "operation")
        what = "Generated TemporalWorker objects of Queue and fleet-file workers."
        self._shown = metric(Gauge, registry, "temporalworker_views", what)
        self._skipped: dict[str, str] = {}

    def sync(self, views: ViewPlan) -> None:
        """Create, put back and delete views as planned; never raises."""
        for key, reason in sorted(views.skipped.items()):
            if self._skipped.get(key) != reason:
                logger.warning("[%s] no TemporalWorker view of %s: %s", self._stack, key, reason)
        for key in set(self._skipped) - set(views.skipped):
            logger.info("[%s] TemporalWorker view of %s no longer held back", self._stack, key)
        self._skipped = dict(views.skipped)
        self._shown.labels(self._stack).set(len(views.shown))
        for write in views.writes:
            try:
                self._write(write)
            except Exception as exc:  # noqa: BLE001 - a view never fails the loop; the next iteration retries
                if status_of(exc) == 404:  # no TemporalWorker CRD (deleted): no view to write now
                    logger.debug("[%s] no view written: %s", self._stack, exc)
                    break
                logger.warning(
                    "[%s] view %s not written (retrying): %s", self._stack, write.view.key, exc
                )
        for gone in views.deletes:
            obj = gone.obj
            try:
                self._writer.delete(obj.namespace or "", obj.name, obj.uid)
            except Exception as exc:  # noqa: BLE001 - a view never fails the loop; the next iteration retries
                logger.warning("[%s] view %s not deleted (retrying): %s", self._stack, obj.key, exc)
                continue
            self._writes.labels(self._stack, "delete").inc()
            logger.info(
                "[%s] deleted TemporalWorker view %s: its worker (%s) is gone",
                self._stack,
                obj.key,
                gone.source,
            )

    def _write(self, write: ViewWrite) -> None:
        view = write.view
        stored = self._writer.apply(view.body, resource_version=write.resource_version)
        if not spec_matches(stored, view.spec):
            # Fields another manager added survive an apply (it removes only its own).
            meta = stored.get("metadata") or {}
            stored = self._writer.replace_spec(
                str(meta.get("namespace")),
                str(meta.get("name")),
                view.spec,
                str(meta.get("resourceVersion")),
            )
        self._writes.labels(self._stack, "create" if write.create else "update").inc()
        if not write.edited_by:
            word = "created" if write.create else "updated"
            logger.info(
                "[%s] %s TemporalWorker view %s (%s)", self._stack, word, view.key, view.source
            )
            return
        said = "[%s] TemporalWorker view %s was edited by %s: put back (%s)"
        logger.warning(said, self._stack, view.key, ", ".join(write.edited_by), view.source)
        if self._events is None:
            return
        where = (
            "the Queue object or the fleet's defaults"
            if view.body["metadata"]["labels"].get(VIEW_LABEL) == FROM_QUEUE
            else "the fleet file"
        )
        message = (
            f"this TemporalWorker is generated by twc from {view.source} and shows the "
            f"worker twc runs for it: the change to its spec by {', '.join(write.edited_by)} "
            f"was undone; change {where} instead"
        )
        try:
            self._events.event(worker_native(stored), VIEW_OVERWRITTEN, message)
        except Exception as exc:  # noqa: BLE001 - a view never fails the loop; the next iteration retries
            logger.warning("[%s] could not record an Event on %s: %s", self._stack, view.key, exc)


EARLY_FIELD_MANAGER = "twc-early-apply"


class EarlyApplier(Protocol):
    """The cluster calls early apply needs (:class:`twc.kube.client.Cluster`)."""

    def exists(self, ref: ObjectRef) -> bool: ...

    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        """Server-side apply without forcing conflicts."""

    def release(self, ref: ObjectRef, field_manager: str) -> bool:
        """Drop ``field_manager``'s fields; False if the object is gone."""

    def delete(self, ref: ObjectRef) -> None: ...

    def managed_by(self, field_manager: str) -> list[ObjectRef]:
        """Worker Deployments and ServiceAccounts ``field_manager`` owns fields of."""


def early_objects(
    worker: ResolvedWorker,
    fleet: Fleet,
    *,
    read_secret: Callable[[str, str], Mapping[str, bytes]] | None,
    temporal_address: str | None = None,
    replicas: int | None = None,
    stack: str | None = None,
) -> list[dict[str, Any]]:
    """The ServiceAccount and Deployment the program would apply for ``worker``.

    Raises LookupError when the connection's secret is missing, TwcConnectionError when
    the connection does not resolve."""
    conn = default_registry().resolve_worker(worker, fleet)
    if temporal_address:
        conn = replace(conn, host_port=temporal_address)
    keys: frozenset[str] | None = None
    digest: str | None = None
    if conn.secret_name is not None:
        if read_secret is None:
            raise LookupError("no access to the connection's secret")
        data = read_secret(conn.secret_source_namespace or worker.namespace, conn.secret_name)
        digest = conn.secret_digest(data)
        keys = frozenset(data)
    deployment = builders.worker_deployment(
        worker,
        conn,
        conn.fingerprint(digest),
        replicas=replicas if worker.autoscaling else None,
        options=PodSpecOptions(secret_keys=keys),
        connection_name=builders.connection_name(conn),
        stack=stack,
    )
    return [builders.worker_service_account(worker, stack=stack), deployment]


def plan_release(
    pending: Collection[ObjectRef], desired_workers: Collection[str]
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """After an ``up``: ``(release, delete)``, objects of workers still desired and of the rest."""
    wanted = set(desired_workers)
    refs = sorted(set(pending))  # each once, in order, then split in two
    return [r for r in refs if r.worker in wanted], [r for r in refs if r.worker not in wanted]


class Scaler(Protocol):
    """Writes an autoscaled worker's replicas (:class:`twc.kube.workloads.ReplicaScaler`)."""

    def scale(self, namespace: str, name: str, replicas: int) -> None: ...


@dataclass(frozen=True)
class Effects:
    """Everything the loop changes: the stack (through the engine) and the cluster."""

    engine: StackEngine
    early: EarlyApplier | None = None  # None: new workers wait for the up
    writer: ObjectWriter | None = None  # status, finalizers, Events; None writes none
    temporal_address: str | None = None  # ``twc:temporalAddress``, for early pod templates
    views: ViewWriter | None = None  # generated TemporalWorker objects; None keeps none
    scaler: Scaler | None = None  # None (no cluster) scales nothing
    refresh_turn: Callable[[str, float], bool] | None = None


class Actor:
    """Carries out plans for one stack's loop, while ``may_apply`` (it leads)."""

    def __init__(
        self,
        effects: Effects,
        sources: Sources,
        *,
        stack: str,
        metrics: DaemonMetrics,
        may_apply: Callable[[], bool],
        loop: Callable[[], asyncio.AbstractEventLoop],
    ) -> None:
        self.engine = effects.engine
        self._effects, self._sources = effects, sources
        self._stack, self._metrics = stack, metrics
        self._may_apply, self._loop = may_apply, loop
        self._recovered = False
        self._repaired: Sequence[str] = ()
        self._applied: AppliedRecord | None = None  # last recorded (or resumed from)
        self._objects: dict[str, list[str]] | None = None  # each worker's, at the last up
        self._early_pending: set[ObjectRef] | None = None
        self._early_lock = threading.Lock()  # applies: loop's thread; releases: engine's
        self.views = (  # the generated TemporalWorker objects' keeper; None keeps none
            ViewSync(effects.views, stack=stack, metrics=metrics, events=effects.writer)
            if effects.views is not None
            else None
        )

    @property
    def early_pending(self) -> list[str]:
        """Objects applied ahead of the engine and not yet adopted by a successful up."""
        return sorted(str(ref) for ref in self._early_pending or ())

    def new_term(self) -> None:
        """A new term as leader may follow someone else's killed run: check again."""
        self._recovered = False

    def sync_views(self, plan: Plan) -> None:
        """Keep the generated TemporalWorker objects as planned; never raises."""
        views = plan.native.views if plan.native is not None else None
        if self.views is not None and views is not None and self._may_apply():
            self.views.sync(views)

    def route(self, plan: Plan) -> None:
        """Carry out the versioned workers' rollout plans; failures are logged, never raised."""
        source, versions = self._sources.rollouts, plan.versions
        if source is None or not versions.plans or not self._may_apply():
            return
        desired = plan.desired
        results = self._loop().run_until_complete(
            carry_out_all(
                versions.plans,
                versions.observed,
                desired.workers,
                desired.fleet,
                source.clients,
                read_input=source.read_input,
            )
        )
        for key, result in sorted(results.items()):
            for action in result.done:
                logger.info("[%s/%s] rollout: %s", self._stack, key, action)
            if result.error:
                level = logging.INFO if result.conflict else logging.WARNING
                logger.log(level, "[%s/%s] rollout: %s", self._stack, key, result.error)
        for key, rollout in sorted(versions.plans.items()):
            if rollout.deleted:
                gone = ", ".join(rollout.deleted)
                logger.info(
                    "[%s/%s] rollout: the Deployments of %s are deleted", self._stack, key, gone
                )

    def apply_early(self, plan: Plan) -> None:
        """Apply new workers' ServiceAccount and Deployment now, ahead of the ``up``."""
        if self._effects.early is None or not self._may_apply():
            return
        pending = self._pending_early()
        applied = [
            key
            for key in sorted(plan.decision.added)
            # A versioned worker's Deployments are its versions': the up makes them.
            if (worker := plan.workers.get(key)) is not None
            and worker.rollout is None
            and self._early_one(worker, plan, pending)
        ]
        if applied:
            logger.info("[%s] applied early: %s", self._stack, ", ".join(applied))

    def settle_early(self, plan: Plan) -> None:
        """Nothing to apply: release early objects of planned workers, delete the others'."""
        if self._may_apply():
            self._release_early(plan, set(self._pending_early()))

    def run_up(self, plan: Plan) -> None:
        """Repair, ``up``, scale new workers, release the early objects it took (engine thread)."""
        decision = plan.decision
        if not self._may_apply():
            raise TemporaryError("not leading any more; not applying")
        if not self._recovered:
            self.recover()  # a killed predecessor may have left a lock
        objects, retiring = builders.fleet_worker_objects(plan.workers, plan.inputs.versions)
        targeted = decision.action is ReconcileAction.TARGETED
        targets = self._targets(plan, objects, retiring) if targeted else None
        mode = "targeted" if targets else "full"
        workers = ", ".join(sorted(decision.workers)) or "-"
        logger.info("[%s] up (%s): %s [%s]", self._stack, mode, decision.reason, workers)
        self._metrics.engine_runs.labels(self._stack, "up", mode).inc()
        with self._early_lock:
            # Early objects of workers it does not have go only if pending before it.
            owned = set(self._early_pending or ())
        with self._metrics.engine_in_progress.labels(self._stack, "up").track_inprogress():
            report = self.engine.up(plan.inputs, targets)
        self._objects = objects
        if report.update is not None:
            h = plan.hashes
            self._record(
                AppliedRecord(h.fleet, h.shared, dict(h.workers), report.update, build_id())
            )
        self._count_recoveries(report.recoveries)
        autoscaled = {k for k, w in plan.workers.items() if w.autoscaling is not None}
        added = {k: plan.replicas[k] for k in autoscaled & decision.added if k in plan.replicas}
        self.scale(replace(plan, scale=added))  # new autoscaled workers: the autoscaler's count
        self._release_early(plan, owned)
        changes = {op: n for op, n in report.changes.items() if op != "same" and n}
        logger.info("[%s] up (%s) done: %s", self._stack, mode, changes or "no changes")

    def _targets(
        self, plan: Plan, objects: dict[str, list[str]], retiring: list[str]
    ) -> list[str] | None:
        decision, urns = plan.decision, self.engine.worker_urns()
        # Deleting objects of a kind beyond the fleet's share (before this daemon's first up:
        # fewer of a kind than the state holds) makes a whole-stack up: its ownership check
        # judges them. ``objects``, ``retiring``: :func:`~twc.builders.fleet_worker_objects`.
        share = plan.desired.fleet.deletion_guard.max_share
        wanted = {"objects": objects, "retiring": retiring, "maxShare": share}
        if decision.modified and (
            any(_fewer(urns.get(k, ()), objects.get(k, ())) for k in decision.modified)
            if self._objects is None
            else deletions_beyond_share(self._objects, wanted, None)[0]
        ):
            return None
        targets: list[str] = []
        for worker in sorted(decision.workers - decision.added):
            found = urns.get(worker)
            if not found:
                return None
            now = plan.workers.get(worker)
            queue = now.queue if now is not None and now.derived else None
            made = queue is not None and queue.create_object
            # A Queue's worker going, moving under or from a queue, or whose queue twc makes: full.
            if made or under_queue(found[0]) != (queue is not None):
                return None
            targets.extend(found)
        if decision.added and not urns:
            return None
        for key in sorted(decision.added):
            scheme, project = next(iter(urns.values()))[0].split("::")[:2]
            new = plan.workers.get(key)
            if new is None:
                return None
            targets.extend(new_worker_targets(scheme, project, key, queue=queue_key(new)))
        return targets

    def scale(self, plan: Plan) -> dict[str, int]:
        """Write the plan's replicas (while leading), a few at once; returns those written."""
        scaler = self._effects.scaler
        if scaler is None or not plan.scale or not self._may_apply():
            return {}
        keys = sorted(plan.scale)

        def one(key: str) -> bool:
            replicas, (namespace, _, name) = plan.scale[key], key.partition("/")
            try:
                scaler.scale(namespace, name, replicas)
            except Exception as exc:  # noqa: BLE001 - one worker's failed scale never stops the loop; retried next iteration
                logger.warning("[%s/%s] could not scale to %d: %s", self._stack, key, replicas, exc)
                self._metrics.scale_writes.labels(self._stack, "failed").inc()
                return False
            if (current := plan.current.get(key)) != replicas:
                logger.info("[%s/%s] scaled %s → %d", self._stack, key, current, replicas)
            self._metrics.scale_writes.labels(self._stack, "written").inc()
            return True

        with ThreadPoolExecutor(min(len(keys), SCALE_CONCURRENCY)) as pool:  # none waits
            written = list(pool.map(one, keys))
        return {key: plan.scale[key] for key, ok in zip(keys, written, strict=True) if ok}

    def refresh(self) -> list[str]:
        """Refresh the stack; returns the resources that drifted."""
        self._metrics.engine_runs.labels(self._stack, "refresh", "full").inc()
        if not self._recovered:
            self.recover()
        with self._metrics.engine_in_progress.labels(self._stack, "refresh").track_inprogress():
            drifted = list(self.engine.refresh())
        if not drifted and self._applied is not None:
            # Still as the recorded up left it, one update later.
            self._record(replace(self._applied, update=self.engine.last_update() or "-"))
        return drifted

    def recover(self) -> None:
        """Repair what a killed run left (a lock, pending operations)."""
        with self._metrics.engine_in_progress.labels(self._stack, "recover").track_inprogress():
            actions = self.engine.recover()
        self._count_recoveries(actions)
        self._repaired = tuple(actions)
        self._recovered = True

    def resume(self) -> AppliedRecord | None:
        """The last recorded ``up``, if the stack is as it left it (same twc, nothing to repair)."""
        store = self._sources.record
        try:
            record = store.load_applied() if store is not None else None
        except Exception as exc:  # noqa: BLE001 - unreadable: the daemon applies the stack as if nothing were recorded
            logger.warning("[%s] the last applied state could not be read: %s", self._stack, exc)
            return None
        if record is None or not self._may_apply():
            return None
        why = ""
        try:
            if record.build != build_id():
                why = "another build of twc applied the stack"
            elif not self._recovered:
                self.recover()
            if not why and self._repaired:
                why = "a killed run was repaired"
            elif not why and (update := self.engine.last_update()) != record.update:
                why = f"the stack's last update ({update}) is not the last one applied"
        except Exception as exc:  # noqa: BLE001 - unsure: apply the stack as before
            why = str(exc)
        if why:
            logger.info("[%s] not resuming: %s", self._stack, why)
            return None
        self._applied = record
        return record

    def _record(self, applied: AppliedRecord) -> None:
        store = self._sources.record
        if store is None:
            return
        try:
            store.save_applied(applied)
        except Exception as exc:  # noqa: BLE001 - a restart then runs a full up, as before
            logger.warning("[%s] what the up applied was not recorded: %s", self._stack, exc)
            return
        self._applied = applied

    def _count_recoveries(self, actions: Sequence[str]) -> None:
        for action in actions:
            logger.warning("[%s] recovered the stack: %s", self._stack, action)
            self._metrics.recoveries.labels(self._stack, action.split(":", 1)[0]).inc()

    def _early_one(self, worker: ResolvedWorker, plan: Plan, pending: set[ObjectRef]) -> bool:
        early, scaler = self._effects.early, self._effects.scaler
        assert early is not None
        key, replicas = worker.stack_key, plan.replicas.get(worker.stack_key)
        try:
            objects = early_objects(
                worker,
                plan.desired.fleet,
                read_secret=self._sources.secret_data or self._sources.secrets,
                temporal_address=self._effects.temporal_address,
                replicas=replicas,
                stack=self._stack,
            )
            refs = [ref_of(obj) for obj in objects]
            if any(early.exists(ref) for ref in refs):
                return False  # the engine made it already (it read a newer file)
            for obj, ref in zip(objects, refs, strict=True):
                with self._early_lock:
                    pending.add(ref)
                early.apply(obj, EARLY_FIELD_MANAGER)
            if worker.autoscaling is not None and replicas is not None and scaler:
                # The autoscaler co-owns the count first (else the API server resets it).
                scaler.scale(worker.namespace, worker.name, replicas)
        except Exception as exc:  # noqa: BLE001 - early apply never fails the up; the up does it anyway
            logger.info("[%s/%s] not applied early (the up will): %s", self._stack, key, exc)
            self._metrics.early_applies.labels(self._stack, "skipped").inc()
            return False
        self._metrics.early_applies.labels(self._stack, "applied").inc()
        return True

    def _pending_early(self) -> set[ObjectRef]:
        early = self._effects.early
        if self._early_pending is None and early is not None:  # what a killed daemon left
            try:
                self._early_pending = set(early.managed_by(EARLY_FIELD_MANAGER))
            except Exception as exc:  # noqa: BLE001 - early apply never fails the up; the up does it anyway
                logger.warning("[%s] could not list early-applied objects: %s", self._stack, exc)
        return self._early_pending if self._early_pending is not None else set()

    def _release_early(self, plan: Plan, owned: set[ObjectRef]) -> None:
        early = self._effects.early
        with self._early_lock:
            pending = set(self._early_pending or ())
        if early is None or not pending:
            return
        release, gone = plan_release(pending, plan.workers.keys())
        delete = [ref for ref in gone if ref in owned]
        for ref in release + delete:
            try:
                if ref in release:
                    early.release(ref, EARLY_FIELD_MANAGER)
                else:
                    logger.info("[%s] deleting %s: its worker is gone", self._stack, ref)
                    early.delete(ref)
            except Exception as exc:  # noqa: BLE001 - early apply never fails the up; the up does it anyway
                logger.warning("[%s] %s: will retry after the next up: %s", self._stack, ref, exc)
                continue
            with self._early_lock:
                if self._early_pending is not None:
                    self._early_pending.discard(ref)
            result = "released" if ref in release else "deleted"
            self._metrics.early_applies.labels(self._stack, result).inc()


def _fewer(urns: Sequence[str], objects: Iterable[str]) -> bool:
    """Whether a worker's Kubernetes resources in the state (its ``urns``) outnumber
    ``objects`` (``Kind namespace/name``) in some kind."""
    types = (u.split("::")[2].rsplit("$", 1)[-1] for u in urns if "$kubernetes:" in u)
    had = collections.Counter(t.rsplit(":", 1)[-1] for t in types)
    has = collections.Counter(o.partition(" ")[0] for o in objects)
    return any(n > has[kind] for kind, n in had.items())
