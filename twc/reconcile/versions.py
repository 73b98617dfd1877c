"""The versioned workers' part of an iteration's plan. Pure.

Per worker with ``rollout``: its rollout plan, the autoscaler's inputs per version (each
scales on its own backlog) and the program's ``versions`` input. A new version's
Deployment has no URN yet, so only a full ``up`` creates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from twc.reconcile.autoscale import ScaleDecision, WorkerScaleInput
from twc.reconcile.settings import DaemonSettings
from twc.rollout import (
    RolloutObservation,
    RolloutPlan,
    RolloutSettings,
    WorkerVersions,
    observed_status,
    plan_observed,
    version_inputs,
)
from twc.spec import ResolvedWorker

_STATUS_KEYS = (
    "deploymentName",
    "targetVersion",
    "currentVersion",
    "rampingVersion",
    "deprecatedVersions",
    "rollout",
)


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


def version_key(worker: str, build: str) -> str:
    """The autoscaler's name for one version of a worker: ``<ns>/<worker>@<buildID>``."""
    return f"{worker}@{build}"


@dataclass(frozen=True, slots=True)
class RolloutFacts:
    """What the observe step read about the versioned workers."""

    observed: Mapping[str, RolloutObservation] = field(default_factory=_empty)
    specs: Mapping[str, Mapping[str, Mapping[str, Any] | None]] = field(default_factory=_empty)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class VersionsPlan:
    """The versioned workers' part of the iteration's plan."""

    plans: Mapping[str, RolloutPlan] = field(default_factory=_empty)
    observed: Mapping[str, RolloutObservation] = field(default_factory=_empty)
    versions: Mapping[str, WorkerVersions] = field(default_factory=_empty)
    decisions: Mapping[str, ScaleDecision] = field(default_factory=_empty)

    def hash_parts(self) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """``(per worker, shared)``: each worker's versions' replicas, and the set of versions."""
        per_worker = {
            key: {b: v.replicas for b, v in sorted(w.versions.items())}
            for key, w in self.versions.items()
        }
        shared = {key: sorted(w.versions) for key, w in sorted(self.versions.items())}
        return per_worker, shared


def plan_rollouts(
    facts: RolloutFacts, *, wall: float, settings: DaemonSettings
) -> dict[str, RolloutPlan]:
    """Each versioned worker's rollout plan."""
    planner = RolloutSettings(time_scale=settings.rollout.time_scale)
    return {
        key: plan_observed(seen, now=wall, settings=planner) for key, seen in facts.observed.items()
    }


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
        bounds = worker.autoscaling
        seen = facts.observed[key]
        window = bounds.scale_down_stabilization_seconds
        behavior = settings.autoscale.with_scale_down_window(window)
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
    plans: Mapping[str, RolloutPlan], facts: RolloutFacts, decisions: Mapping[str, ScaleDecision]
) -> VersionsPlan:
    """The program's ``versions`` input from the rollout plans and autoscaler decisions."""
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
            status=observed_status(seen, plan),
        )
    return VersionsPlan(
        plans=MappingProxyType(dict(plans)),
        observed=facts.observed,
        versions=MappingProxyType(versions),
        decisions=MappingProxyType(mine),
    )


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
