"""The plan: what one iteration will do, decided from what it observed. Pure.

:func:`make_plan` gives one plain :class:`Plan`: the autoscaler's replicas (never hashed),
the versions to declare and route, the desired state's hashes and skip / targeted / full.
Per worker with ``rollout``: its rollout plan, the autoscaler's inputs per version (each
scales on its own backlog) and the program's ``versions`` input. A new version's
Deployment has no URN yet, so only a full ``up`` creates it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from twc.connections import Registry, WatchedKind
from twc.desired import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredFleet,
    DesiredInputs,
    KindMerge,
    Rejection,
    connection_native,
    desired_fleet,
    kind_key,
    queue_key,
    worker_native,
)
from twc.errors import TemporaryError
from twc.native.objects import IdentityKey, NativeObject, template_native
from twc.native.views import ViewPlan, desired_views, plan_views
from twc.reconcile.autoscale import ScaleDecision, ScalingState, WorkerScaleInput, scale_fleet
from twc.reconcile.observe import Observation, RolloutFacts, WorkerFacts
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import (
    DesiredState,
    LoopState,
    ReconcileDecision,
    decide_reconcile,
    desired_state,
)
from twc.rollout import (
    RolloutObservation,
    RolloutPlan,
    RolloutPolicy,
    RolloutSettings,
    VersionStatus,
    WorkerVersions,
    observed_status,
    plan_observed,
    version_inputs,
)
from twc.spec import API_GROUP, Autoscaling, ResolvedWorker
from twc.spec.crds import RESOURCE_TEMPLATE_KIND
from twc.spec.resources import scales

T = TypeVar("T")

_STATUS_KEYS = (
    "deploymentName",
    "targetVersion",
    "currentVersion",
    "rampingVersion",
    "deprecatedVersions",
    "rollout",
)


def version_key(worker: str, build: str) -> str:
    """The autoscaler's name for one version of a worker: ``<ns>/<worker>@<buildID>``."""
    return f"{worker}@{build}"


@dataclass(frozen=True, slots=True)
class VersionsPlan:
    """The versioned workers' part of the iteration's plan."""

    plans: Mapping[str, RolloutPlan] = field(default_factory=dict)
    observed: Mapping[str, RolloutObservation] = field(default_factory=dict)
    versions: Mapping[str, WorkerVersions] = field(default_factory=dict)
    decisions: Mapping[str, ScaleDecision] = field(default_factory=dict)


def version_scale_inputs(
    plans: Mapping[str, RolloutPlan],
    facts: RolloutFacts,
    workers: Mapping[str, ResolvedWorker],
    settings: DaemonSettings,
) -> dict[str, WorkerScaleInput]:
    """The autoscaler's inputs (backlog, replicas now) per version kept at its own count."""
    out: dict[str, WorkerScaleInput] = {}
    for key, plan in plans.items():
        worker = workers.get(key)
        if worker is None or worker.autoscaling is None:
            continue
        seen = facts.observed[key]
        for build, version in plan.versions.items():
            if version.replicas is not None:
                continue
            bounds = version_bounds(worker.autoscaling, seen, build)
            dep = seen.deployments.get(build)
            # A version not created yet starts at the bottom of the bounds.
            current = dep.replicas if dep is not None else bounds.min_replicas
            out[version_key(key, build)] = _scale_input(
                seen.backlogs.get(build), current, bounds, settings
            )
    return out


def _scale_input(
    backlog: int | None, current: int, bounds: Autoscaling, settings: DaemonSettings
) -> WorkerScaleInput:
    """The autoscaler's input for ``bounds``, scaling down after their stabilization window."""
    behavior = settings.autoscale.with_scale_down_window(bounds.scale_down_stabilization_seconds)
    return WorkerScaleInput(backlog=backlog, current=current, bounds=bounds, behavior=behavior)


def version_bounds(autoscaling: Autoscaling, seen: RolloutObservation, build: str) -> Autoscaling:
    """A version's bounds for the status Temporal reports (``byStatus``); the target keeps at
    least one replica until it is routed to, since it only takes traffic once it polls."""
    status = seen.routing.status(build) if seen.routing else VersionStatus.NOT_REGISTERED
    bounds = autoscaling.for_status(status.value)
    waiting = status in (VersionStatus.NOT_REGISTERED, VersionStatus.INACTIVE)
    if build == seen.target and waiting and bounds.min_replicas == 0:
        return bounds.model_copy(update={"min_replicas": 1})
    return bounds


def plan_versions(
    plans: Mapping[str, RolloutPlan], facts: RolloutFacts, decisions: Mapping[str, ScaleDecision]
) -> VersionsPlan:
    """The program's ``versions`` input from the rollout plans and autoscaler decisions."""
    versions: dict[str, WorkerVersions] = {}
    mine: dict[str, ScaleDecision] = {}
    for key, plan in sorted(plans.items()):
        seen = facts.observed[key]
        found = {b: d for b in plan.versions if (d := decisions.get(version_key(key, b)))}
        mine.update({version_key(key, b): d for b, d in found.items()})
        replicas = {b: d.replicas for b, d in found.items()}
        versions[key] = WorkerVersions(
            versions=version_inputs(plan, facts.specs.get(key, {}), replicas),
            status=_scaling_reasons(observed_status(seen, plan), found, seen.policy),
        )
    return VersionsPlan(
        plans=MappingProxyType(dict(plans)),
        observed=facts.observed,
        versions=MappingProxyType(versions),
        decisions=MappingProxyType(mine),
    )


def _scaling_reasons(
    status: dict[str, Any], found: Mapping[str, ScaleDecision], policy: RolloutPolicy
) -> dict[str, Any]:
    """``status`` with each autoscaled version's ``scalingReason``: the autoscaler's, or
    ``DrainingFloor`` for a Draining version kept at its ``byStatus`` floor."""
    floor = policy.draining_replicas[0] if policy.draining_replicas else 0
    named = [status.get(k) for k in ("targetVersion", "currentVersion", "rampingVersion")]
    for entry in [*named, *(status.get("deprecatedVersions") or ())]:
        if entry and (decision := found.get(entry["buildID"])) is not None:
            held = entry["status"] == "Draining" and decision.replicas == floor > 0
            entry["scalingReason"] = "DrainingFloor" if held else decision.reason.value
    return status


def target_deployment(plan: VersionsPlan, key: str) -> tuple[int, int] | None:
    """``(replicas, readyReplicas)`` of a versioned worker's target Deployment, or ``None``."""
    seen = plan.observed.get(key)
    dep = seen.deployments.get(seen.target) if seen is not None else None
    return (dep.replicas, dep.ready) if dep is not None else None


def rollout_fields(plan: VersionsPlan, key: str) -> dict[str, Any]:
    """A versioned worker's status fields, null where absent (the merge patch drops them)."""
    worker = plan.versions.get(key)
    if worker is None or worker.status is None:
        return {}
    return {k: worker.status.get(k) for k in _STATUS_KEYS}


_POSITIONAL = {"source", "connection_source"}  # where in the file a worker is, not what


@dataclass(frozen=True, slots=True)
class NativePlan:
    """TemporalWorker and connection objects: what is in the desired state, who uses what."""

    workers: KindMerge
    objects: tuple[NativeObject, ...]  # every connection object (finalizer candidates)
    worker_objects: tuple[NativeObject, ...]
    references: Mapping[str, IdentityKey]  # per worker, the connection it uses
    templates: tuple[tuple[NativeObject, str], ...] = ()  # WorkerResourceTemplates, worker key
    rejected: tuple[Rejection, ...] = ()  # objects whose current spec is not in use
    views: ViewPlan | None = None  # generated TemporalWorkers; None when none are kept


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything one iteration decided before touching the cluster or the engine."""

    desired: DesiredFleet
    hashes: DesiredState
    inputs: DesiredInputs  # the program's input for this desired state
    decision: ReconcileDecision  # skip, targeted or full up, and why
    replicas: Mapping[str, int]  # desired replicas of every worker
    current: Mapping[str, int]  # the Deployments' replicas, where known
    decisions: Mapping[str, ScaleDecision] = field(default_factory=dict)
    scaling: Mapping[str, ScalingState] = field(default_factory=dict)
    native: NativePlan | None = None
    versions: VersionsPlan = field(default_factory=VersionsPlan)
    scale: Mapping[str, int] = field(default_factory=dict)  # see scale_writes

    @property
    def workers(self) -> Mapping[str, ResolvedWorker]:
        """Every worker, keyed ``<namespace>/<name>``."""
        return self.desired.workers


class Memo(Generic[T]):
    """One computation's last answer, made again only when its key (the computation's every
    input) changes: an equal key is the same answer. Unchanged objects compare at once."""

    def __init__(self) -> None:
        self._last: tuple[tuple[object, ...], T] | None = None

    def get(self, key: tuple[object, ...], make: Callable[[], T]) -> T:
        """``make()``, or its answer for the same key last time."""
        if (last := self._last) is None or last[0] != key:
            last = self._last = (key, make())
        return last[1]


def desired_from(
    seen: Observation, *, accepted: Mapping[str, Any], registry: Registry, file: str
) -> DesiredFleet:
    """The desired fleet of this iteration (the plan decides replicas)."""
    document = seen.fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
    inputs = DesiredInputs(
        fleet=document,
        cluster=dict(seen.cluster) if seen.cluster is not None else None,
        accepted=dict(accepted),
    )
    return desired_fleet(seen.fleet, inputs, registry=registry, file=file)


def make_plan(
    seen: Observation,
    desired: DesiredFleet,
    facts: WorkerFacts,
    state: LoopState,
    *,
    settings: DaemonSettings,
    now: float,
    last_replicas: Mapping[str, int],
    program: Mapping[str, Any],
    native: NativePlan | None,
    wall: float,
    memo: Memo[DesiredState] | None = None,
) -> Plan:
    """Decide the replicas and versions, hash the desired state, decide the ``up``."""
    workers, live, found = desired.workers, seen.live, facts.rollouts or RolloutFacts()
    inputs = _scale_inputs(seen, workers, facts, settings, last_replicas)
    rollout_plans = _rollout_plans(facts, workers, settings=settings, wall=wall)
    inputs.update(version_scale_inputs(rollout_plans, found, workers, settings))
    decisions, scaling = scale_fleet(inputs, state.scaling, now=now)
    versions = plan_versions(rollout_plans, found, decisions)  # reads its versions' alone
    decisions = MappingProxyType({k: d for k, d in decisions.items() if k in workers})
    scaled = {k: d.replicas for k, d in decisions.items()}
    key = (desired, facts.credentials, facts.placement, program, versions.versions)
    # The same fleet hashes the same: a quarter of a no-op iteration (docs/architecture.md).
    hashes = (memo or Memo()).get(key, lambda: _hashes(desired, facts, program, key[4]))
    blocked = state.blocked_hash(now=now, settings=settings)
    update = {"replicas": scaled, "versions": dict(versions.versions)}
    return Plan(
        desired=desired,
        hashes=hashes,
        inputs=desired.inputs.model_copy(update=update),
        decision=decide_reconcile(state.applied, hashes, blocked=blocked),
        replicas={k: scaled.get(k, w.replicas) for k, w in workers.items()},
        current={k: v for k, v in (live or {}).items() if k in workers},
        decisions=decisions,
        scaling=scaling,
        native=native,
        versions=versions,
        scale=scale_writes(scaled, live, seen.scaled)
        | revived_versions(rollout_plans, found, workers),
    )


def _scale_inputs(
    seen: Observation,
    workers: Mapping[str, ResolvedWorker],
    facts: WorkerFacts,
    settings: DaemonSettings,
    last_replicas: Mapping[str, int],
) -> dict[str, WorkerScaleInput]:
    inputs: dict[str, WorkerScaleInput] = {}
    for key, worker in workers.items():
        bounds = worker.autoscaling
        if bounds is None or worker.rollout is not None:
            continue
        current = (seen.live or {}).get(key)
        if current is None:
            if not seen.live_known and key not in last_replicas:
                # Unknown is not zero: an up must not shrink a running fleet blind.
                raise TemporaryError(
                    f"the replicas of {key} are unknown (the cluster could not be "
                    "read); not scaling it blind"
                )
            current = last_replicas.get(key, 0)
        inputs[key] = _scale_input(facts.backlogs.get(key), current, bounds, settings)
    return inputs


def _hashes(
    desired: DesiredFleet,
    facts: WorkerFacts,
    program: Mapping[str, Any],
    versions: Mapping[str, WorkerVersions],
) -> DesiredState:
    workers = desired.workers
    # Neither the file position nor the autoscaler's counts are hashed; pydantic's serializer
    # has a fixed field order: equal workers, equal digests.
    specs: dict[str, object] = {
        k: hashlib.sha256(w.model_dump_json(exclude=_POSITIONAL).encode()).hexdigest()
        for k, w in workers.items()
    }
    # Per versioned worker also its versions' replicas; shared, the set of versions.
    for key, found in versions.items():
        if key in specs:
            replicas = {b: v.replicas for b, v in sorted(found.versions.items())}
            specs[key] = {"spec": specs[key], "versions": replicas}
    version_sets = {key: sorted(w.versions) for key, w in sorted(versions.items())}
    shared_fleet = desired.fleet.model_dump(
        mode="json", include={"cluster_connections", "connections", "custom_connections"}
    )
    # A queue its derived worker hangs on is in that worker's digest: a targeted up.
    owned = {queue_key(w) for w in workers.values()}
    shared_fleet["queues"] = [
        q.model_dump(mode="json")
        for q in desired.fleet.queues
        if f"{q.namespace}/{q.name}" not in owned
    ]
    return desired_state(
        specs,
        shared={
            "fleet": shared_fleet,
            "program": dict(program),
            "credentials": dict(facts.credentials),
            "placement": {k: list(v) for k, v in facts.placement.items()},
            **({"versions": version_sets} if version_sets else {}),
        },
    )


def _rollout_plans(
    facts: WorkerFacts,
    workers: Mapping[str, ResolvedWorker],
    *,
    settings: DaemonSettings,
    wall: float,
) -> dict[str, RolloutPlan]:
    if not any(w.rollout is not None for w in workers.values()):
        return {}
    found = facts.rollouts
    if found is None or found.error is not None:
        # Planning without them would delete every version but the target's.
        why = found.error if found is not None else "no cluster to read them from"
        raise TemporaryError(f"the versions of versioned workers are unknown: {why}")
    planner = RolloutSettings(time_scale=settings.rollout.time_scale)
    return {
        key: plan_observed(seen, now=wall, settings=planner) for key, seen in found.observed.items()
    }


def scale_writes(
    decided: Mapping[str, int], live: Mapping[str, int] | None, owned: frozenset[str] | None
) -> dict[str, int]:
    """Autoscaled workers to scale: live count differs, or is not yet owned by the autoscaler."""
    if live is None:
        return {}
    out: dict[str, int] = {}
    for key, replicas in sorted(decided.items()):
        current = live.get(key)
        if current is None:
            continue  # no Deployment yet: its creation sets the count
        if current != replicas or (owned is not None and key not in owned):
            out[key] = replicas
    return out


def revived_versions(
    plans: Mapping[str, RolloutPlan],
    facts: RolloutFacts,
    workers: Mapping[str, ResolvedWorker],
) -> dict[str, int]:
    """Draining versions found at 0 replicas (scaled by hand, or by a scaler) scaled back, as
    the official controller does: their pinned workflows need pollers to drain. To the
    worker's count, or 1 where a resource template's autoscaler owns the count; a worker
    scaled to 0 as a whole, and an autoscaled worker's versions, are left as they are."""
    out: dict[str, int] = {}
    for key, plan in sorted(plans.items()):
        worker, seen = workers.get(key), facts.observed.get(key)
        if worker is None or seen is None or seen.routing is None or worker.autoscaling:
            continue
        owned = any(scales(t.template) for t in worker.resource_templates)
        for build, version in plan.versions.items():
            dep = seen.deployments.get(build)
            if dep is None or dep.replicas or version.replicas == 0:
                continue
            count = min(worker.replicas, 1) if owned else worker.replicas  # 0: all scaled down
            if count and seen.routing.status(build) is VersionStatus.DRAINING:
                out[f"{worker.namespace}/{dep.name}"] = count
    return out


def native_plan(
    seen: Observation, desired: DesiredFleet, watched: Mapping[str, WatchedKind], stack: str | None
) -> NativePlan:
    """The native objects' part of the plan: a function of the desired fleet and the objects
    observed, status included (``stack``: whose TemporalWorker views are kept)."""
    cluster = seen.cluster or {}

    def listed(key: str) -> tuple[dict[str, Any], ...]:
        found = cluster.get(key)
        return (found.objects if found is not None else None) or ()

    views = None
    if stack is not None:
        # Unknown TemporalWorker objects: no view could be told from a person's object.
        found = cluster.get(WORKER_KIND_KEY)
        queues = desired.accepted_objects(QUEUE_KIND_KEY)
        wanted, held = desired_views(desired.workers, desired.origins, queues, stack=stack)
        views = plan_views(wanted, held, found.objects if found is not None else None, stack=stack)
    return NativePlan(
        workers=desired.kinds.get(WORKER_KIND_KEY)
        or KindMerge(fleet=desired.fleet, entries={}, accepted={}, store={}),
        objects=tuple(
            connection_native(kind, obj)
            for key, kind in sorted(watched.items())
            for obj in listed(key)
        ),
        worker_objects=tuple(worker_native(obj) for obj in listed(WORKER_KIND_KEY)),
        templates=tuple(map(template_native, listed(kind_key(RESOURCE_TEMPLATE_KIND, API_GROUP)))),
        references=desired.references,
        rejected=tuple(
            r
            for key, m in sorted(desired.kinds.items())
            if key in watched or key == WORKER_KIND_KEY
            for r in m.rejected
        ),
        views=views,
    )
