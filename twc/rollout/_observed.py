"""One versioned worker as observed in one iteration (what the planner needs), and its plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from twc.rollout._model import GateRun, RolloutPolicy, RolloutSettings, Routing, VersionDeployment
from twc.rollout._planner import RolloutPlan, hold_versions, plan_rollout
from twc.rollout._status import rollout_status


@dataclass(frozen=True, slots=True)
class RolloutObservation:
    """A versioned worker's rollout as observed now."""

    worker: str
    target: str
    policy: RolloutPolicy
    deployment_name: str
    task_queue: str
    deployments: Mapping[str, VersionDeployment] = field(
        default_factory=lambda: MappingProxyType({})
    )
    routing: Routing | None = None
    """``None``: no version registered yet (or not asked)."""
    error: str | None = None
    """Why Temporal could not be asked; then every version is held as it runs."""
    task_queues: tuple[str, ...] = ()
    """The target version's workflow task queues, as Temporal reports them."""
    gates: Mapping[str, GateRun] = field(default_factory=lambda: MappingProxyType({}))
    backlogs: Mapping[str, int | None] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def gate_queues(self) -> tuple[str, ...]:
        """The target's registered workflow task queues, else the worker's own."""
        return self.task_queues or (self.task_queue,)


def plan_observed(
    seen: RolloutObservation, *, now: float, settings: RolloutSettings | None = None
) -> RolloutPlan:
    """Plan one worker's next step (hold everything when Temporal could not be asked)."""
    if seen.error is not None:
        return hold_versions(
            seen.target,
            seen.deployments,
            "TemporalUnavailable",
            f"routing unknown, every version held as it runs: {seen.error}",
        )
    return plan_rollout(
        seen.policy,
        target=seen.target,
        routing=seen.routing,
        deployments=seen.deployments,
        gates=seen.gates,
        task_queues=seen.gate_queues,
        deployment_name=seen.deployment_name,
        now=now,
        settings=settings,
    )


def observed_status(seen: RolloutObservation, plan: RolloutPlan) -> dict[str, Any]:
    """The official status record of one worker's rollout, from what was observed and planned."""
    return rollout_status(
        target=seen.target,
        deployment_name=seen.deployment_name,
        routing=seen.routing,
        deployments=seen.deployments,
        plan=plan,
        gates=seen.gates,
        task_queues=seen.gate_queues,
    )
