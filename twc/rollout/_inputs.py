"""The versions a worker's program declares: the part of the desired state's inputs
that versioned rollouts add.

The caller (the daemon, ``twc up``) plans which versions exist
(:func:`~twc.rollout.plan_rollout`) and hands over, per worker and build ID, the replicas
and the version spec to rebuild it from. Under plain ``pulumi up`` the program reads the
cluster itself: every version that has a Deployment stays as it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from twc.rollout._planner import RolloutPlan

__all__ = ["VersionInput", "WorkerVersions", "version_inputs"]


class VersionInput(BaseModel):
    """One version the program declares a Deployment for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int | None = None
    """``None``: the worker's own count (fixed, or its autoscaling minimum); a number:
    exactly that (the autoscaler's decision for this version, or 0 in sunset)."""
    spec: dict[str, JsonValue] | None = None
    """The version spec it is rebuilt from (its Deployment's annotation); ``None`` for
    the target version, which is built from the worker's spec as it is now."""


class WorkerVersions(BaseModel):
    """One versioned worker's part of the inputs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    versions: dict[str, VersionInput] = Field(default_factory=dict)
    """Per build ID, the versions whose Deployments the program declares (the target is
    always declared, listed or not)."""
    status: dict[str, JsonValue] | None = None
    """The rollout as the caller observed it (:func:`~twc.rollout.rollout_status`),
    exported with the worker's status; ``None`` when Temporal was not asked."""


def version_inputs(
    plan: RolloutPlan,
    specs: Mapping[str, Mapping[str, Any] | None],
    replicas: Mapping[str, int] | None = None,
) -> dict[str, VersionInput]:
    """The inputs of one worker's versions from its plan.

    Args:
        plan: The worker's rollout plan (which versions stay, with what replicas).
        specs: Per build ID, the version spec read from its Deployment.
        replicas: Per build ID, the autoscaler's decision (autoscaled workers), used
            where the plan leaves the count to the worker.

    Returns:
        Per build ID, what the program declares.
    """
    out: dict[str, VersionInput] = {}
    for build, version in plan.versions.items():
        count = version.replicas
        if count is None and replicas is not None:
            count = replicas.get(build)
        spec = None if build == plan.target else specs.get(build)
        out[build] = VersionInput(replicas=count, spec=dict(spec) if spec is not None else None)
    return out
