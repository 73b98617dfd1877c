"""Report: tell people and tools what the iteration saw and did.

Metrics, faults (raised and cleared once each), objects *kept* or *left out* (logged once
per change), the stack's record, and on TemporalWorker, connection and view objects:
status, the delete-protection finalizer and Events. Nothing here fails the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec

from twc.desired import QUEUE_KIND_KEY, DesiredFleet, GuardVerdict, Rejection
from twc.engine.errors import engine_failure
from twc.kube.record import HeldRecord
from twc.kube.writer import ObjectWriter
from twc.native.objects import FINALIZER, IdentityKey, NativeObject, finalizer_updates
from twc.native.status import (
    accepted_status,
    official_status,
    rejected_status,
    status_patch,
    template_status,
    worker_failure,
)
from twc.reconcile.health import DaemonMetrics
from twc.reconcile.observe import Observer
from twc.reconcile.outcome import (
    FailureReason,
    Fault,
    FaultBook,
    Outcome,
    OutcomeKind,
    engine_fault,
)
from twc.reconcile.plan import NativePlan, Plan, rollout_fields, target_deployment
from twc.reconcile.state import DesiredState, LoopState, ReconcileAction
from twc.spec.crds import OFFICIAL_WORKER_KIND, WORKER_KIND
from twc.spec.resources import resource_name, scales
from twc.timestamps import rfc3339

logger = logging.getLogger(__name__)
_P = ParamSpec("_P")


def shorten(text: str, limit: int = 2000) -> str:
    """``text`` cut in the middle to at most about ``limit`` characters."""
    return text if len(text) <= limit else f"{text[: limit // 2]} [...] {text[-limit // 2 :]}"


class FaultReporter:
    """Faults raised and cleared once each (log, ``twc_fault_active``); active ones on probes."""

    def __init__(self, *, stack: str, metrics: DaemonMetrics, book: FaultBook) -> None:
        self.stack = stack
        self.metrics = metrics
        self.book = book

    def fault(self, fault: Fault, source: str, message: str | None) -> None:
        """``source`` sees ``fault`` now (``message``), or no longer (``None``)."""
        book = self.book
        change = (
            book.clear(fault, source) if message is None else book.report(fault, source, message)
        )
        if change is None:
            return
        name = change.fault.value
        self.metrics.fault_active.labels(self.stack, name).set(1 if change.raised else 0)
        if change.raised:
            self.metrics.faults.labels(self.stack, name).inc()
            logger.warning("[%s] fault %s: %s", self.stack, name, shorten(change.message, 500))
        else:
            logger.info("[%s] fault %s cleared after %.1f s", self.stack, name, change.duration)

    def engine_faults(self, outcome: Outcome) -> None:
        """Raise the backend or cluster fault a failed engine run names; a success clears both."""
        fault = None if outcome.ok else engine_fault(outcome.reason, outcome.message)
        for each in (Fault.STATE_BACKEND_UNWRITABLE, Fault.KUBERNETES_UNAVAILABLE):
            if each is fault:
                self.fault(each, "engine", engine_failure(outcome.message).reason)
            elif outcome.ok:
                self.fault(each, "engine", None)


class Reporter:
    """The loop's report step, and the record of what it reported."""

    def __init__(
        self,
        *,
        faults: FaultReporter,
        writer: ObjectWriter | None,
        wall: Callable[[], float],
        observer: Observer,
    ) -> None:
        self.stack, self.metrics, self.faults = faults.stack, faults.metrics, faults
        self._writer = writer
        self._wall = wall
        self._observer = observer
        self._record = observer.sources.record
        self.reported_invalid: dict[str, str] = {}
        self.reported_native: dict[str, tuple[str, str]] = {}
        self.reported_conflicts: dict[str, str] = {}
        self.also_in_use: Callable[[], frozenset[IdentityKey]] = frozenset
        # Connections as last applied; None until an up succeeded (no finalizer released).
        self._applied_refs: frozenset[IdentityKey] | None = None
        self._planned_refs: frozenset[IdentityKey] = frozenset()
        self._written: dict[str, dict[str, Any]] = {}
        self._apply_failed: dict[str, str] = {}
        self._metric_kinds: set[str] = set()
        self._hold_published: str | None = None
        self._remembered: tuple[object, ...] | None = None
        self._status_memo: tuple[object, ...] | None = None

    def _tried(self, what: str, write: Callable[_P, object], *a: _P.args, **k: _P.kwargs) -> bool:
        """Whether ``write(*a, **k)`` went through; a failure is logged, never raised."""
        try:
            write(*a, **k)
        except Exception as exc:  # noqa: BLE001 - write-back never fails the loop: tried next time
            logger.warning("[%s] %s (retrying): %s", self.stack, what, exc)
            return False
        return True

    def _write_status(self, obj: NativeObject, desired: Mapping[str, Any]) -> dict[str, Any] | None:
        """Patch what of ``desired`` differs from what ``obj`` shows or was last written."""
        assert self._writer is not None
        patch = status_patch({**obj.status, **self._written.get(obj.uid, {})}, desired)
        if patch is None:
            return None
        if not self._tried(f"status of {obj} not written", self._writer.patch_status, obj, patch):
            self._status_memo = None  # tried again next time, whatever changed
            return None
        self._written[obj.uid] = {**self._written.get(obj.uid, {}), **patch["status"]}
        return dict(patch["status"])

    def planned(self, plan: Plan) -> None:
        """Report what planning found: replica decisions, objects left out or kept."""
        for key, decision in plan.decisions.items():
            if decision.changed:
                to, why, advised = decision.replicas, decision.reason, decision.recommendation
                said = "[%s/%s] replicas %d -> %d (%s; recommendation %d)"
                logger.info(said, self.stack, key, decision.current, to, why, advised)
        current = {k: plan.current.get(k) for k in plan.workers}
        self.metrics.publish(worker_desired_replicas=plan.replicas, worker_current_replicas=current)
        self._report_queues(plan.desired)
        self._remember(plan)
        conflicts = dict(plan.desired.conflicts)
        gone = "[%s/%s] no longer in conflict (or gone)"
        for key in self._changed(self.reported_conflicts, conflicts, gone):
            logger.warning("[%s/%s] ObjectExists, left out: %s", self.stack, key, conflicts[key])
        self.reported_conflicts = conflicts
        self.metrics.object_conflicts.labels(self.stack).set(len(conflicts))
        if plan.native is None or not plan.native.rejected:
            return
        # Rejections need no engine: say so now, not after a long up.
        native = plan.native
        self._report_native(native)
        if self._writer is not None:
            self._tried("status write-back failed", self._update_status, native, None, None)

    def _report_queues(self, desired: DesiredFleet) -> None:
        merge = desired.kinds.get(QUEUE_KIND_KEY)
        rejected = {r.key: r for r in merge.rejected} if merge is not None else {}
        now = {key: r.message for key, r in rejected.items()}
        gone = "[%s/queue %s] Queue object no longer invalid (or gone)"
        for key in self._changed(self.reported_invalid, now, gone):
            r = rejected[key]
            logger.warning(
                "[%s/queue %s] invalid Queue object: %s; %s", self.stack, key, r.message, _fate(r)
            )
        self.reported_invalid = now
        self.metrics.invalid_queues.labels(self.stack).set(len(rejected))
        accepted = len(merge.accepted) if merge is not None else 0
        self.metrics.cluster_queues.labels(self.stack).set(accepted)
        kept = sum(1 for r in rejected.values() if r.kept)
        self.metrics.kept_objects.labels(self.stack, "Queue").set(kept)

    def _changed(
        self, before: Mapping[str, object], now: Mapping[str, object], gone: str
    ) -> list[str]:
        for key in sorted(set(before) - set(now)):
            logger.info(gone, self.stack, key)
        return [key for key in sorted(now) if before.get(key) != now[key]]

    def _remember(self, plan: Plan) -> None:
        if (record := self._record) is None or not plan.desired.cluster_managed:
            return
        accepted = plan.desired.accepted
        marker = (
            plan.hashes.fleet,
            tuple((k, tuple(sorted(v))) for k, v in sorted(accepted.items())),
        )
        if marker == self._remembered:
            return
        if self._tried(f"could not write {record}", record.save, accepted, plan.inputs.fleet):
            self._remembered = marker

    def report_held(self, verdict: GuardVerdict) -> None:
        """``DeletionsHeld`` while the guard holds deletions: log, metric, Event, record."""
        hold = verdict.hold
        self.metrics.deletions_held.labels(self.stack).set(len(hold.workers) if hold else 0)
        digest = hold.digest if hold is not None else None
        if digest != self._hold_published and hold is not None:
            names = ", ".join(sorted(hold.workers))
            logger.warning("[%s] DeletionsHeld: %s: %s", self.stack, hold.reason, names)
            if (r := self._record) is not None:
                obj = NativeObject("", "v1", "configmaps", "ConfigMap", r.name, r.namespace)
                self._event(obj, "DeletionsHeld", f"{hold.reason}: {names}")
        elif digest != self._hold_published:
            why = verdict.released or "no longer wanted"
            logger.info("[%s] held deletions released (%s)", self.stack, why)
        if (record := self._record) is not None:
            held = None
            if hold is not None:
                held = HeldRecord(hold.digest, tuple(sorted(hold.workers)), hold.reason)
            if not self._tried("could not publish held deletions", record.publish_held, held):
                return
        self._hold_published = digest

    def finished(
        self, plan: Plan | None, outcome: Outcome, state: LoopState, *, started: float, now: float
    ) -> None:
        """Report how an iteration ended (metrics, faults, log, write-back)."""
        self.faults.engine_faults(outcome)
        self.metrics.reconciles.labels(self.stack, outcome.kind.value).inc()
        self.metrics.reconcile_duration.labels(self.stack).observe(now - started)
        if outcome.ok:
            self.metrics.last_success.labels(self.stack).set(self._wall())
        else:
            self._log_failure(outcome)
        if plan is None or (native := plan.native) is None:
            return
        applied = state.applied
        if outcome.ok and applied is not None and applied.fleet == plan.hashes.fleet:
            self._applied_refs = frozenset(native.references.values())
        self._report_native(native)
        if outcome.ok:
            self._apply_failed.clear()
        elif (decision := plan.decision).action is not ReconcileAction.SKIP:
            changed = decision.workers if decision.action is ReconcileAction.TARGETED else None
            # Tenants read the first error on their own resources, not the stack's output.
            refused = outcome.kind is OutcomeKind.PERMANENT
            for key, obj in {**native.workers.accepted, **_views_shown(native)}.items():
                if changed is None or key in changed:
                    reason = worker_failure(outcome.message, key, refused=refused)
                    self._event_once(obj, "ApplyFailed", reason)
        for key, obj in native.workers.accepted.items():
            stopped = plan.versions.plans.get(key)
            if stopped is not None and stopped.reason in ("GateFailed", "RolledBack"):
                self._event_once(obj, stopped.reason, stopped.message)
        if self._writer is None:
            return
        self._tried("finalizer update failed", self._update_finalizers, native)
        if not self._tried("status write-back failed", self._update_status, native, plan, applied):
            self._status_memo = None

    def _log_failure(self, outcome: Outcome) -> None:
        reason = outcome.reason.value if outcome.reason is not None else "Unknown"
        self.metrics.reconcile_errors.labels(self.stack, reason).inc()
        message = shorten(engine_failure(outcome.message).reason)  # not its whole output
        if outcome.kind is not OutcomeKind.TEMPORARY:
            said = "[%s] reconcile failed permanently (%s); waiting for the input to change: %s"
            logger.error(said, self.stack, reason, message)
            return
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

    def refreshed(self, drifted: Sequence[str] | None, error: BaseException | None) -> None:
        """Report a ``refresh``: the drift it found, or why it failed."""
        if error is not None:
            logger.warning("[%s] refresh failed (retrying next interval): %s", self.stack, error)
            self.metrics.reconcile_errors.labels(self.stack, "RefreshFailed").inc()
            return
        found = sorted(drifted or ())
        self.metrics.drifted.labels(self.stack).set(len(found))
        if not found:
            logger.info("[%s] refresh: no drift", self.stack)
            return
        said = "[%s] drift found in %d resource(s): %s; a full up follows"
        logger.warning(said, self.stack, len(found), ", ".join(found))
        self.metrics.drift_detected.labels(self.stack).inc()

    def _report_native(self, native: NativePlan) -> None:
        found = {f"{r.obj.kind} {r.obj.key}": r for r in native.rejected}
        now = {key: (r.reason, r.message) for key, r in found.items()}
        for key in self._changed(self.reported_native, now, "[%s] %s no longer rejected (or gone)"):
            r = found[key]
            logger.warning("[%s] %s: %s: %s; %s", self.stack, key, r.reason, r.message, _fate(r))
            self._event(r.obj, r.reason, f"{r.message}; {_fate(r)}")
        self.reported_native = now
        # Kinds seen before stay labelled, so a gauge falls back to 0 when they go.
        self._metric_kinds |= {WORKER_KIND, *(o.kind for o in native.objects)}
        for kind in self._metric_kinds:
            count = sum(1 for r in native.rejected if r.obj.kind == kind)
            self.metrics.invalid_objects.labels(self.stack, kind).set(count)
            kept = sum(1 for r in native.rejected if r.obj.kind == kind and r.kept)
            self.metrics.kept_objects.labels(self.stack, kind).set(kept)

    def _event_once(self, obj: NativeObject, reason: str, message: str) -> None:
        key = f"{obj.kind} {obj.key}"
        if self._apply_failed.get(key) == message:
            return
        self._apply_failed[key] = message
        self._event(obj, reason, message)

    def _event(self, obj: NativeObject, reason: str, message: str) -> None:
        # Written as reported (without a writer, none is).
        if self._writer is not None:
            what = f"could not record an Event on {obj}"
            self._tried(what, self._writer.event, obj, reason, message)

    @property
    def in_use(self) -> frozenset[IdentityKey]:
        """Connections this stack uses, as last planned and as last applied."""
        return self._planned_refs | (self._applied_refs or frozenset())

    def _update_finalizers(self, native: NativePlan) -> None:
        assert self._writer is not None
        self._planned_refs = frozenset(native.references.values())
        updates = finalizer_updates(native.objects, self.in_use | self.also_in_use())
        if self._applied_refs is None:
            # What the stack holds is not known yet: protect, never release.
            updates = [(obj, fins) for obj, fins in updates if FINALIZER in fins]
        for obj, finalizers in updates:
            added = FINALIZER in finalizers
            what = f"finalizers of {obj} not updated"
            if not self._tried(what, self._writer.set_finalizers, obj, finalizers):
                continue
            what = "protecting" if added else "releasing"
            why = "referenced by a worker" if added else "no worker uses it now"
            logger.info("[%s] %s %s: %s", self.stack, what, obj, why)

    def _update_status(
        self, native: NativePlan, plan: Plan | None, applied: DesiredState | None
    ) -> None:
        """The TemporalWorkers' (and WorkerResourceTemplates') status as planned; only the
        rejected ones' without a ``plan``."""
        assert self._writer is not None
        now = rfc3339(self._wall())
        accepted = {} if plan is None else {**native.workers.accepted, **_views_shown(native)}
        rejected = {r.obj.key: r for r in native.workers.rejected}
        deployments = (self._observer.deployments() if accepted else None) or {}
        pollers = self._observer.pollers(plan.desired, sorted(accepted)) if plan else {}
        hashes = plan.hashes.workers if plan is not None else {}
        memo: tuple[object, ...] | None = None
        if plan is not None:
            memo = (native, applied, deployments, pollers, dict(self._written), plan.desired)
            reasons = {k: d.reason for k, d in plan.decisions.items()}  # not their histories
            memo += (plan.replicas, plan.versions.versions, plan.versions.observed, reasons, hashes)
            if memo == self._status_memo:
                return  # all it reads is as when every write it asked for went through
        self._status_memo = memo
        seen: set[str] = set()
        for obj in native.worker_objects:
            if obj.deleting or (plan is None and obj.key not in rejected):
                continue
            seen.add(obj.uid)
            written = self._written.get(obj.uid)
            if written is not None and all(obj.status.get(k) == v for k, v in written.items()):
                # The watch caught up with our writes: read the object itself again.
                del self._written[obj.uid]
            previous = {**obj.status, **self._written.get(obj.uid, {})}
            key = obj.key
            rejection = rejected.get(key)
            why = shorten(f"{rejection.message}; {_fate(rejection)}", 900) if rejection else ""
            if rejection is not None and not rejection.kept:
                desired = rejected_status(
                    previous,
                    generation=obj.generation,
                    reason=rejection.reason,
                    message=why,
                    now=now,
                )
            elif plan is not None and key in accepted:
                desired = accepted_status(
                    previous,
                    generation=obj.generation if rejection is None else rejection.kept_generation,
                    applied=applied is not None and applied.workers.get(key) == hashes.get(key),
                    desired_replicas=plan.replicas.get(key, 0),
                    deployment=target_deployment(plan.versions, key) or deployments.get(key),
                    pollers=pollers.get(key),
                    connection_ref=_ref_dict(native.references.get(key)),
                    now=now,
                    task_queue=plan.workers[key].task_queue_name if key in plan.workers else None,
                    kept=(rejection.reason, why) if rejection is not None else None,
                )
            else:
                continue
            desired.update(rollout_fields(plan.versions, key) if plan is not None else {})
            if plan is not None and (decision := plan.decisions.get(key)) is not None:
                desired["scalingReason"] = decision.reason.value
            if obj.kind == OFFICIAL_WORKER_KIND:
                desired = official_status(desired, previous, namespace=obj.namespace or "", now=now)
            patch = self._write_status(obj, desired)
            if patch is not None and "phase" in patch:
                logger.info("[%s] TemporalWorker %s: %s", self.stack, key, desired["phase"])
        if plan is None:
            return
        for obj, key in native.templates:  # WorkerResourceTemplates: the official shape
            in_stack = applied is not None and applied.workers.get(key) == hashes.get(key)
            names = _template_copies(plan, key, obj.name)
            previous = {**obj.status, **self._written.get(obj.uid, {})}
            status = template_status(
                previous, names=names, generation=obj.generation, applied=in_stack, now=now
            )
            self._write_status(obj, status)
            seen.add(obj.uid)
        for uid in set(self._written) - seen:
            del self._written[uid]


def _template_copies(plan: Plan, key: str, template: str) -> dict[str, str] | None:
    """Per build ID of worker ``key``'s versions, the name of ``template``'s copy (none
    for an autoscaler's at a version scaled to 0); ``None``: no such worker uses it."""
    worker, versions = plan.workers.get(key), plan.versions.versions.get(key)
    entries = {t.name: t.template for t in worker.resource_templates} if worker else {}
    if worker is None or versions is None or template not in entries:
        return None
    return {
        build: resource_name(worker.name, template, build)
        for build, version in versions.versions.items()
        if not (version.replicas == 0 and scales(entries[template]))
    }


def _views_shown(native: NativePlan) -> Mapping[str, NativeObject]:
    return native.views.shown if native.views is not None else {}


def _fate(rejection: Rejection) -> str:
    if rejection.kept:
        generation = rejection.kept_generation
        which = f" (generation {generation})" if generation is not None else ""
        return f"its last accepted spec{which} keeps running"
    return "left out: nothing runs for it"


def _ref_dict(ident: IdentityKey | None) -> dict[str, str] | None:
    if ident is None:
        return None
    group, kind, name, namespace = ident
    return {"apiGroup": group, "kind": kind, "name": name} | (
        {"namespace": namespace} if namespace else {}
    )
