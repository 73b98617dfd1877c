"""Plan: what the iteration will do, decided from what it observed. Pure.

From the observation and the loop's state this computes the desired fleet (through the
one desired-state function), the autoscaler's decisions, the hashes of the desired
state and whether (and how widely) to run ``up``. Replicas of autoscaled workers are not
part of the hashes: the daemon writes them through each Deployment's ``scale``
subresource (:attr:`Plan.scale`), so a scaling decision never starts the engine. The
result is one plain value,
:class:`Plan`, that the act and report steps carry out and that a test can assert on.
Time is an argument.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from twc.connections import Registry, WatchedKind
from twc.desired import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredFleet,
    DesiredInputs,
    KindMerge,
    ObjectList,
    Rejection,
    connection_native,
    desired_fleet,
    kind_key,
    worker_native,
)
from twc.errors import TemporaryError
from twc.loop.autoscale import ScaleDecision, ScalingState, WorkerScaleInput, scale_fleet
from twc.loop.decide import DesiredState, ReconcileDecision, decide_reconcile, desired_state
from twc.loop.guard import GuardVerdict
from twc.loop.observe import Observation, WorkerFacts
from twc.loop.settings import DaemonSettings
from twc.loop.state import LoopState
from twc.loop.versions import (
    RolloutFacts,
    VersionsPlan,
    plan_rollouts,
    plan_versions,
    version_scale_inputs,
)
from twc.native.objects import IdentityKey, NativeObject
from twc.native.views import ViewPlan, desired_views, plan_views
from twc.rollout import RolloutPlan
from twc.spec import Fleet, ResolvedWorker

__all__ = ["NativePlan", "Plan", "desired_from", "make_plan", "scale_writes", "with_conflicts"]

_POSITIONAL = {"source", "connection_source"}
"""ResolvedWorker fields that say where in the file a worker is, not what it is."""


@dataclass(frozen=True, slots=True)
class NativePlan:
    """TemporalWorker and connection objects: what is in the desired state, who uses what."""

    workers: KindMerge
    """TemporalWorker objects merged into the fleet."""
    objects: tuple[NativeObject, ...]
    """Every connection object in the cluster (finalizer candidates)."""
    worker_objects: tuple[NativeObject, ...]
    """Every TemporalWorker object in the cluster."""
    references: Mapping[str, IdentityKey]
    """Per worker key (file, Queue and native workers), the connection it uses."""
    rejected: tuple[Rejection, ...] = ()
    """TemporalWorker and connection objects whose current spec is not in use."""
    views: ViewPlan | None = None
    """The generated TemporalWorker objects of Queue and fleet-file workers (what to
    write, which exist); ``None`` when this daemon keeps none."""


@dataclass(frozen=True, slots=True)
class Plan:
    """Everything one iteration decided before touching the engine."""

    desired: DesiredFleet
    """The desired fleet, with what each kind of cluster object contributed."""
    hashes: DesiredState
    """The hashes of the desired state (per worker, shared, whole)."""
    inputs: DesiredInputs
    """The program's input for this desired state."""
    decision: ReconcileDecision
    """Skip, targeted or full ``up``, and why."""
    replicas: Mapping[str, int]
    """Desired replicas of every worker."""
    current: Mapping[str, int]
    """Replicas of the workers' Deployments in the cluster, where known."""
    decisions: Mapping[str, ScaleDecision] = field(default_factory=dict)
    """The autoscaler's decisions, for autoscaled workers."""
    scaling: Mapping[str, ScalingState] = field(default_factory=dict)
    """The autoscaler's state to keep."""
    native: NativePlan | None = None
    """The Kubernetes-native objects of this iteration."""
    versions: VersionsPlan = field(default_factory=VersionsPlan)
    """The versioned workers' rollouts: routing to carry out, versions to declare."""
    deletions: GuardVerdict | None = None
    """The deletion guard's verdict: which deletions are held, if any."""
    scale: Mapping[str, int] = field(default_factory=dict)
    """Autoscaled workers whose Deployment to scale now (its ``scale`` subresource, no
    engine): the live count differs from the decision, or the autoscaler's field
    manager does not own the count yet. Workers without a Deployment yet are absent."""

    @property
    def workers(self) -> Mapping[str, ResolvedWorker]:
        """Every worker, keyed ``<namespace>/<name>``."""
        return self.desired.workers


def desired_from(
    seen: Observation,
    *,
    accepted: Mapping[str, Any],
    registry: Registry,
    file: str,
) -> DesiredFleet:
    """The desired fleet of this iteration (replicas are decided later, by the plan).

    Raises:
        SpecError: The fleet file's own connections do not resolve.
        ObjectsUnknown: A kind's objects are unknown and none was ever accepted.
    """
    document = seen.fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
    inputs = DesiredInputs(
        fleet=document,
        cluster=dict(seen.cluster) if seen.cluster is not None else None,
        accepted=dict(accepted),
    )
    return desired_fleet(seen.fleet, inputs, registry=registry, file=file)


def with_conflicts(
    fleet: Fleet,
    desired: DesiredFleet,
    conflicts: Mapping[str, str],
    *,
    registry: Registry,
    file: str,
) -> DesiredFleet:
    """``desired`` without the new workers whose names someone else's objects have
    (``ObjectExists``): the rest is applied, they wait until the names are free."""
    if not conflicts:
        return desired
    inputs = desired.inputs.model_copy(update={"conflicts": dict(conflicts)})
    return desired_fleet(fleet, inputs, registry=registry, file=file)


def make_plan(
    seen: Observation,
    desired: DesiredFleet,
    facts: WorkerFacts,
    state: LoopState,
    *,
    settings: DaemonSettings,
    now: float,
    last_replicas: Mapping[str, int],
    watched: Mapping[str, WatchedKind],
    program: Mapping[str, Any],
    native: bool,
    wall: float | None = None,
    views_of: str | None = None,
    deletions: GuardVerdict | None = None,
) -> Plan:
    """Decide the replicas, hash the desired state and decide the ``up``.

    Args:
        seen: What step one observed.
        desired: The desired fleet.
        facts: Backlogs, credential digests and placement of its workers.
        state: The loop's state (applied hashes, autoscaler state, blocks).
        settings: Thresholds, autoscaling behaviour.
        now: The loop's monotonic time.
        last_replicas: The replicas of the last successful ``up`` (autoscaled workers
            whose live count is unknown start from these).
        watched: Per kind key, the connection kinds the registry knows.
        program: Inputs of the program outside the fleet (config); a change forces a
            full ``up``.
        native: Whether TemporalWorker and connection objects are written back.
        wall: Unix time: versioned rollouts compare it with Temporal's timestamps.
        views_of: The stack whose generated TemporalWorker objects (views of its
            Queue and fleet-file workers) to plan; ``None`` plans none.
        deletions: The deletion guard's verdict on this desired state.

    Raises:
        TemporaryError: An autoscaled worker's replicas are unknown (the cluster could
            not be read) and it was never scaled: scaling it blind could shrink it.
    """
    workers = desired.workers
    live = seen.live
    inputs = _scale_inputs(seen, workers, facts, settings, last_replicas)
    # --- versioned rollouts: plans, then each version's autoscaling --------------------
    rollout_plans = _rollout_plans(facts, workers, settings=settings, wall=wall)
    inputs.update(
        version_scale_inputs(rollout_plans, facts.rollouts or RolloutFacts(), workers, settings)
    )
    decisions, scaling = scale_fleet(inputs, state.scaling, now=now)
    version_decisions = {k: d for k, d in decisions.items() if k not in workers}
    decisions = MappingProxyType({k: d for k, d in decisions.items() if k in workers})
    versions = plan_versions(rollout_plans, facts.rollouts or RolloutFacts(), version_decisions)
    version_replicas, version_sets = versions.hash_parts()
    # ----------------------------------------------------------------------------------
    scaled = {k: d.replicas for k, d in decisions.items()}
    hashes = _hashes(desired, facts, program, version_replicas, version_sets)
    decision = decide_reconcile(
        state.applied,
        hashes,
        blocked=state.blocked_hash(now=now, settings=settings),
    )
    replicas = {k: scaled.get(k, w.replicas) for k, w in workers.items()}
    observed = dict(live or {})
    return Plan(
        desired=desired,
        hashes=hashes,
        inputs=desired.inputs.model_copy(
            update={"replicas": scaled, "versions": dict(versions.versions)}
        ),
        decision=decision,
        replicas=replicas,
        current={k: v for k, v in observed.items() if k in workers},
        decisions=decisions,
        scaling=scaling,
        native=_native_plan(seen, desired, watched, views_of) if native else None,
        versions=versions,
        deletions=deletions,
        scale=scale_writes(scaled, live, seen.scaled),
    )


def _scale_inputs(
    seen: Observation,
    workers: Mapping[str, ResolvedWorker],
    facts: WorkerFacts,
    settings: DaemonSettings,
    last_replicas: Mapping[str, int],
) -> dict[str, WorkerScaleInput]:
    """The autoscaler's input for each autoscaled (unversioned) worker.

    Raises:
        TemporaryError: An autoscaled worker's replicas are unknown and it was never
            scaled.
    """
    live = seen.live
    autoscaled = {
        k: w for k, w in workers.items() if w.autoscaling is not None and w.rollout is None
    }
    inputs: dict[str, WorkerScaleInput] = {}
    for key, worker in autoscaled.items():
        bounds = worker.autoscaling
        assert bounds is not None  # filtered above
        current = live.get(key) if live is not None else None
        if current is None:
            if not seen.live_known and key not in last_replicas:
                # Unknown is not zero: from 0 the autoscaler would go to minReplicas
                # and an up would shrink a running fleet blind.
                raise TemporaryError(
                    f"the replicas of {key} are unknown (the cluster could not be "
                    "read); not scaling it blind"
                )
            current = last_replicas.get(key, 0)
        inputs[key] = WorkerScaleInput(
            backlog=facts.backlogs.get(key),
            current=current,
            bounds=bounds,
            behavior=settings.autoscale.with_scale_down_window(
                bounds.scale_down_stabilization_seconds
            ),
        )
    return inputs


def _hashes(
    desired: DesiredFleet,
    facts: WorkerFacts,
    program: Mapping[str, Any],
    version_replicas: Mapping[str, Any],
    version_sets: Mapping[str, list[str]],
) -> DesiredState:
    """The desired state's hashes: each worker's, and the parts every worker shares."""
    workers = desired.workers
    shared_fleet = desired.fleet.model_dump(
        mode="json", include={"cluster_connections", "connections", "custom_connections"}
    )
    # A queue its derived worker hangs on is that worker's (its spec is in the worker's
    # digest, and the program builds it with the worker): a new Queue object is one new
    # worker, a targeted up, not a full up of the stack.
    owned = {
        (w.queue.namespace, w.queue.name)
        for w in workers.values()
        if w.derived and w.queue is not None
    }
    shared_fleet["queues"] = [
        q.model_dump(mode="json")
        for q in desired.fleet.queues
        if (q.namespace, q.name) not in owned
    ]
    return desired_state(
        # Where a worker sits in the file (`source`, `connection_source`) is for
        # messages only: removing one worker must not change the hash of the rest.
        # The autoscaler's counts are not hashed: the program never sets them (a
        # versioned worker's version counts are, under `versions`: the engine sets those).
        {k: _worker_hash_part(k, w, version_replicas) for k, w in workers.items()},
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
    wall: float | None,
) -> dict[str, RolloutPlan]:
    if not any(w.rollout is not None for w in workers.values()):
        return {}
    found = facts.rollouts
    if found is None or found.error is not None:
        # Planning without them would delete every version but the target's.
        why = found.error if found is not None else "no cluster to read them from"
        raise TemporaryError(f"the versions of versioned workers are unknown: {why}")
    if wall is None:
        raise ValueError("versioned rollouts need the wall time")
    return plan_rollouts(found, wall=wall, settings=settings)


def _versions_of(key: str, replicas: Mapping[str, Any]) -> dict[str, Any]:
    return {"versions": replicas[key]} if key in replicas else {}


def _worker_digest(worker: ResolvedWorker) -> str:
    """A worker's spec as one digest: its JSON from pydantic's own serializer, hashed.

    A canonical form per worker (sorted keys, the daemon's other hashes) costs most of
    a no-op iteration at hundreds of workers; the serializer's field order is fixed and
    its maps keep the file's order, so equal workers give equal digests and a reordered
    map at worst one needless ``up``.
    """
    text = worker.model_dump_json(exclude=_POSITIONAL)
    return hashlib.sha256(text.encode()).hexdigest()


def _worker_hash_part(
    key: str, worker: ResolvedWorker, version_replicas: Mapping[str, Any]
) -> object:
    digest = _worker_digest(worker)
    return (
        {"spec": digest, **_versions_of(key, version_replicas)}
        if key in version_replicas
        else digest
    )


def scale_writes(
    decided: Mapping[str, int],
    live: Mapping[str, int] | None,
    owned: frozenset[str] | None,
) -> dict[str, int]:
    """The autoscaled workers whose Deployment to scale this iteration.

    Args:
        decided: The autoscaler's decision per worker.
        live: The Deployments' ``spec.replicas``; ``None`` when unknown (nothing is
            written blind).
        owned: Deployments whose count the autoscaler's field manager owns; ``None``
            when unknown.

    Returns:
        Per worker key, the count to write: where the live count differs, and where it
        is equal but not yet the autoscaler's (a Deployment created by an older
        program, or by the engine before the daemon scaled it): claiming it makes a
        later ``up`` leave the field alone.
    """
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


def _native_plan(
    seen: Observation,
    desired: DesiredFleet,
    watched: Mapping[str, WatchedKind],
    stack: str | None = None,
) -> NativePlan:
    cluster = seen.cluster or {}
    objects: list[NativeObject] = []
    for key, kind in sorted(watched.items()):
        found = cluster.get(key)
        for obj in (found.objects if found is not None else None) or ():
            objects.append(connection_native(kind, obj))
    workers_found = cluster.get(WORKER_KIND_KEY)
    worker_objects = tuple(
        worker_native(obj)
        for obj in (workers_found.objects if workers_found is not None else None) or ()
    )
    merge = desired.kinds.get(WORKER_KIND_KEY) or KindMerge(
        fleet=desired.fleet, entries={}, accepted={}, store={}
    )
    connection_keys = {kind_key(k.kind, k.api_group) for k in watched.values()}
    rejected = tuple(
        r
        for key, m in sorted(desired.kinds.items())
        if key in connection_keys or key == WORKER_KIND_KEY
        for r in m.rejected
    )
    return NativePlan(
        workers=merge,
        objects=tuple(objects),
        worker_objects=worker_objects,
        references=desired.references,
        rejected=rejected,
        views=_views(desired, workers_found, stack) if stack is not None else None,
    )


def _views(desired: DesiredFleet, found: ObjectList | None, stack: str) -> ViewPlan:
    # Unknown TemporalWorker objects (their list failed): nothing is written, since a
    # view could not be told from a person's object of the same name.
    views, held = desired_views(
        desired.workers,
        desired.origins,
        desired.accepted_objects(QUEUE_KIND_KEY),
        stack=stack,
    )
    return plan_views(views, held, found.objects if found is not None else None, stack=stack)
