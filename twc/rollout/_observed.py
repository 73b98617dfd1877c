"""One versioned worker as observed in one iteration, and its plan. Pure.

:class:`RolloutObservation` is everything the planner needs about one worker, gathered
by :mod:`twc.versioning` (Temporal) and the caller (the cluster): the daemon and
``twc up`` build the same value and plan it the same way, with :func:`plan_observed`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from twc.rollout._model import (
    GateRun,
    RolloutPolicy,
    RolloutSettings,
    Routing,
    VersionDeployment,
)
from twc.rollout._planner import RolloutPlan, hold_versions, plan_rollout

__all__ = ["RolloutObservation", "plan_observed"]


@dataclass(frozen=True, slots=True)
class RolloutObservation:
    """A versioned worker's rollout as observed now."""

    worker: str
    """The worker, ``<namespace>/<name>``."""
    target: str
    """The build ID its spec asks for."""
    policy: RolloutPolicy
    """Its rollout settings."""
    deployment_name: str
    """Its Temporal worker deployment."""
    task_queue: str
    """The task queue its spec names (gates run there until the version reports its own)."""
    deployments: Mapping[str, VersionDeployment] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Its versions' Deployments in the cluster, by build ID."""
    routing: Routing | None = None
    """What Temporal reports; ``None``: no version registered yet (or not asked)."""
    error: str | None = None
    """Why Temporal could not be asked; then every version is held as it runs."""
    task_queues: tuple[str, ...] = ()
    """The target version's workflow task queues, as Temporal reports them."""
    gates: Mapping[str, GateRun] = field(default_factory=lambda: MappingProxyType({}))
    """Gate runs of the target found in Temporal, by workflow ID."""
    backlogs: Mapping[str, int | None] = field(default_factory=lambda: MappingProxyType({}))
    """Per build ID, the version's backlog on its task queue (autoscaled workers)."""

    @property
    def gate_queues(self) -> tuple[str, ...]:
        """Where the target's gates run: its registered workflow task queues, else the
        worker's own."""
        return self.task_queues or (self.task_queue,)


def plan_observed(
    seen: RolloutObservation, *, now: float, settings: RolloutSettings | None = None
) -> RolloutPlan:
    """Plan one worker's next step from what was observed (hold everything when
    Temporal could not be asked)."""
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
