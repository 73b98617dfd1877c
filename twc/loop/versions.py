"""The versioned workers' part of an iteration's plan. Pure.

For each worker with ``rollout``, from what was observed (:class:`RolloutFacts`): its
rollout plan (:func:`~twc.rollout.plan_observed`), the autoscaler's inputs for each of
its versions (each version scales on its own backlog, as KEDA's deployment mode does),
and then the ``versions`` the program is handed — which versions' Deployments stay,
with what replicas, rebuilt from which version spec.

The plan's hashes see the versions too: a version's replicas are part of its worker's
hash (scaling a drained version to 0 is a targeted ``up``), and the set of versions is
shared (a new version's Deployment has no URN yet, so only a full ``up`` creates it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from twc.loop.autoscale import ScaleDecision, WorkerScaleInput
from twc.loop.settings import DaemonSettings
from twc.rollout import (
    RolloutObservation,
    RolloutPlan,
    RolloutSettings,
    WorkerVersions,
    plan_observed,
    rollout_status,
    version_inputs,
)
from twc.spec import ResolvedWorker

__all__ = [
    "RolloutFacts",
    "VersionsPlan",
    "plan_rollouts",
    "plan_versions",
    "rollout_fields",
    "target_deployment",
    "version_key",
    "version_scale_inputs",
]


def version_key(worker: str, build: str) -> str:
    """The autoscaler's name for one version of a worker: ``<ns>/<worker>@<buildID>``."""
    return f"{worker}@{build}"


@dataclass(frozen=True, slots=True)
class RolloutFacts:
    """What the observe step read about the versioned workers."""

    observed: Mapping[str, RolloutObservation] = field(default_factory=lambda: MappingProxyType({}))
    """Per versioned worker, its versions and routing."""
    specs: Mapping[str, Mapping[str, Mapping[str, Any] | None]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Per worker, per build ID, the version spec on its Deployment."""
    error: str | None = None
    """Why the versions' Deployments could not be listed (then nothing is planned)."""


@dataclass(frozen=True, slots=True)
class VersionsPlan:
    """The versioned workers' part of the iteration's plan."""

    plans: Mapping[str, RolloutPlan] = field(default_factory=lambda: MappingProxyType({}))
    """Per worker, the rollout plan (routing, gates, versions)."""
    observed: Mapping[str, RolloutObservation] = field(default_factory=lambda: MappingProxyType({}))
    """What the plans were made from."""
    versions: Mapping[str, WorkerVersions] = field(default_factory=lambda: MappingProxyType({}))
    """The program's ``versions`` input."""
    decisions: Mapping[str, ScaleDecision] = field(default_factory=lambda: MappingProxyType({}))
    """The autoscaler's decisions per version (``<ns>/<worker>@<buildID>``)."""

    def hash_parts(self) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """``(per worker, shared)``: each worker's versions with their replicas, and
        the set of versions of every worker."""
        per_worker = {
            key: {b: v.replicas for b, v in sorted(w.versions.items())}
            for key, w in self.versions.items()
        }
        shared = {key: sorted(w.versions) for key, w in sorted(self.versions.items())}
        return per_worker, shared


def rollout_settings(settings: DaemonSettings) -> RolloutSettings:
    """The planner's settings from the daemon's."""
    return RolloutSettings(time_scale=settings.rollout.time_scale)


def plan_rollouts(
    facts: RolloutFacts, *, wall: float, settings: DaemonSettings
) -> dict[str, RolloutPlan]:
    """Each versioned worker's rollout plan."""
    return {
        key: plan_observed(seen, now=wall, settings=rollout_settings(settings))
        for key, seen in facts.observed.items()
    }


def version_scale_inputs(
    plans: Mapping[str, RolloutPlan],
    facts: RolloutFacts,
    workers: Mapping[str, ResolvedWorker],
    settings: DaemonSettings,
) -> dict[str, WorkerScaleInput]:
    """The autoscaler's inputs for every version an autoscaled versioned worker keeps
    at its own count: its backlog (that version's alone) and its replicas now."""
    out: dict[str, WorkerScaleInput] = {}
    for key, plan in plans.items():
        worker = workers.get(key)
        if worker is None or worker.autoscaling is None:
            continue
        bounds = worker.autoscaling
        seen = facts.observed[key]
        behavior = settings.autoscale.with_scale_down_window(
            bounds.scale_down_stabilization_seconds
        )
        for build, version in plan.versions.items():
            if version.replicas is not None:
                continue
            dep = seen.deployments.get(build)
            out[version_key(key, build)] = WorkerScaleInput(
                backlog=seen.backlogs.get(build),
                # A version not created yet starts at the bottom of the bounds.
                current=dep.replicas if dep is not None else bounds.min_replicas,
                bounds=bounds,
                behavior=behavior,
            )
    return out


def plan_versions(
    plans: Mapping[str, RolloutPlan],
    facts: RolloutFacts,
    decisions: Mapping[str, ScaleDecision],
) -> VersionsPlan:
    """The program's ``versions`` input from the rollout plans and the per-version
    autoscaler decisions."""
    versions: dict[str, WorkerVersions] = {}
    mine: dict[str, ScaleDecision] = {}
    for key, plan in sorted(plans.items()):
        seen = facts.observed[key]
        replicas = {}
        for build in plan.versions:
            decision = decisions.get(version_key(key, build))
            if decision is not None:
                mine[version_key(key, build)] = decision
                replicas[build] = decision.replicas
        versions[key] = WorkerVersions(
            versions=version_inputs(plan, facts.specs.get(key, {}), replicas),
            status=rollout_status(
                target=seen.target,
                deployment_name=seen.deployment_name,
                routing=seen.routing,
                deployments=seen.deployments,
                plan=plan,
                gates=seen.gates,
                task_queues=seen.gate_queues,
            ),
        )
    return VersionsPlan(
        plans=MappingProxyType(dict(plans)),
        observed=facts.observed,
        versions=MappingProxyType(versions),
        decisions=MappingProxyType(mine),
    )


def target_deployment(plan: VersionsPlan, key: str) -> tuple[int, int] | None:
    """``(replicas, readyReplicas)`` of a versioned worker's target version's Deployment
    (what its object's status counts); ``None`` for other workers, or before it exists."""
    seen = plan.observed.get(key)
    if seen is None:
        return None
    dep = seen.deployments.get(seen.target)
    return (dep.replicas, dep.ready) if dep is not None else None


def rollout_fields(plan: VersionsPlan, key: str) -> dict[str, Any]:
    """The status fields a versioned worker's TemporalWorker object adds (the official
    controller's ``targetVersion``, ``currentVersion``, ``deprecatedVersions``... and
    the rollout's phase and reason); empty for other workers."""
    worker = plan.versions.get(key)
    if worker is None or worker.status is None:
        return {}
    # Every key, null where absent: the merge patch then removes what no longer holds
    # (a ramp that ended, deprecated versions that were deleted).
    return {k: worker.status.get(k) for k in _STATUS_KEYS}


_STATUS_KEYS = (
    "deploymentName",
    "targetVersion",
    "currentVersion",
    "rampingVersion",
    "deprecatedVersions",
    "rollout",
)
