"""The versions a worker's program declares: per build ID, the replicas and the version
spec to rebuild it from (planned by the daemon or ``twc up``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from twc.rollout._planner import RolloutPlan


class VersionInput(BaseModel):
    """One version the program declares a Deployment for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int | None = None
    """``None``: the worker's own count; a number: exactly that."""
    spec: dict[str, JsonValue] | None = None
    """The version spec it is rebuilt from; ``None`` for the target (the spec as it is)."""


class WorkerVersions(BaseModel):
    """One versioned worker's part of the inputs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    versions: dict[str, VersionInput] = Field(default_factory=dict)
    """Per build ID, the versions declared (the target always, listed or not)."""
    status: dict[str, JsonValue] | None = None
    """:func:`~twc.rollout.rollout_status` as observed; ``None`` when Temporal was not asked."""


def version_inputs(
    plan: RolloutPlan,
    specs: Mapping[str, Mapping[str, Any] | None],
    replicas: Mapping[str, int] | None = None,
) -> dict[str, VersionInput]:
    """Per build ID, what the program declares of the plan's versions (``replicas``: the
    autoscaler's, where the plan leaves the count to the worker)."""
    out: dict[str, VersionInput] = {}
    for build, version in plan.versions.items():
        count = version.replicas
        if count is None and replicas is not None:
            count = replicas.get(build)
        spec = None if build == plan.target else specs.get(build)
        out[build] = VersionInput(replicas=count, spec=dict(spec) if spec is not None else None)
    return out
