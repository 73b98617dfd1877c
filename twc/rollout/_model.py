"""The values a versioned rollout is planned from: what Temporal reports, what the cluster runs, the
gate runs and the worker's rollout settings. Frozen dataclasses; times are Unix seconds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel


class VersionStatus(StrEnum):
    """A version's status, with the official worker controller's names."""

    NOT_REGISTERED = "NotRegistered"
    INACTIVE = "Inactive"
    RAMPING = "Ramping"
    CURRENT = "Current"
    DRAINING = "Draining"
    """No new executions any more; workflows pinned to it still run."""
    DRAINED = "Drained"
    """No new executions and no open workflows pinned to it: ready for sunset."""


class Strategy(StrEnum):
    """How a new version takes over new workflow executions."""

    MANUAL = "Manual"
    """twc deploys and scales the version, operators route (the Temporal CLI)."""
    ALL_AT_ONCE = "AllAtOnce"
    PROGRESSIVE = "Progressive"


class GateStatus(StrEnum):
    """A gate workflow run's state, as the official controller names it."""

    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"
    TERMINATED = "Terminated"
    TIMED_OUT = "TimedOut"

    @property
    def failed(self) -> bool:
        """Whether the run ended without completing."""
        return self not in (GateStatus.RUNNING, GateStatus.COMPLETED)


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """A gate workflow: must complete on the new version before it moves on."""

    workflow_type: str
    input: Any = None
    """Inline JSON passed as the first argument (``None``: no argument)."""
    input_from: Mapping[str, Any] | None = None
    """``{"configMapKeyRef": ...}`` or ``{"secretKeyRef": ...}``: read when the gate starts."""


@dataclass(frozen=True, slots=True)
class StepPolicy:
    """One step of a Progressive rollout."""

    ramp_percentage: int
    pause_seconds: float
    gate: GatePolicy | None = None
    """The step advances only once this gate completed on the version."""


@dataclass(frozen=True, slots=True)
class SunsetPolicy:
    """When a drained version is scaled down and deleted."""

    scaledown_seconds: float = 3600.0
    delete_seconds: float = 86400.0


@dataclass(frozen=True, slots=True)
class FailureRatePolicy:
    """Roll a ramp back on failures: ``margin_percent`` points over the Current's rate."""

    margin_percent: float
    min_sample: int
    window_seconds: float


@dataclass(frozen=True, slots=True)
class RolloutPolicy:
    """A worker's versioned-rollout settings, durations in seconds."""

    # How from_json reads the policy's keys; its nested dataclasses take this config too.
    __pydantic_config__ = ConfigDict(alias_generator=to_camel)
    strategy: Strategy
    steps: tuple[StepPolicy, ...] = ()
    """Progressive steps (ramp percentages increase)."""
    gate: GatePolicy | None = None
    """The gate before any traffic reaches the new version."""
    sunset: SunsetPolicy = field(default_factory=SunsetPolicy)
    build_id: str | None = None
    """A build ID given in the spec, instead of the derived one."""
    failure_rate: FailureRatePolicy | None = None
    draining_replicas: tuple[int, int] | None = None
    """Autoscaled: the replica bounds of a Draining version, when ``byStatus`` sets them."""

    def to_json(self) -> dict[str, Any]:
        """The policy as plain data (the version Deployment's annotation, for previews):
        gates by workflow type only, no build ID."""
        inputs = {"input", "input_from"}
        exclude: dict[str, Any] = {"build_id": True, "gate": inputs}
        exclude["steps"] = {"__all__": {"gate": inputs}} if self.steps else True
        return dict(
            _POLICY.dump_python(
                self, mode="json", by_alias=True, exclude_none=True, exclude=exclude
            )
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RolloutPolicy:
        """Read :meth:`to_json` back (without gate inputs); ValueError if it is not one."""
        try:
            return _POLICY.validate_python(data)
        except ValidationError as exc:
            raise ValueError(f"not a rollout policy record: {exc}") from exc

    @classmethod
    def recorded(cls, text: object) -> RolloutPolicy | None:
        """The policy a version Deployment's annotation records; ``None`` if none is readable."""
        try:
            return cls.from_json(json.loads(text)) if isinstance(text, str) else None
        except ValueError:
            return None


_POLICY = TypeAdapter(RolloutPolicy)


@dataclass(frozen=True, slots=True)
class RolloutSettings:
    """Knobs of the rollout driver that do not come from the fleet file."""

    time_scale: float = 1.0
    """Multiplies every rollout duration (below 1 only on test beds and in demos)."""
    identity: str = "twc"
    """Identity recorded by Temporal on each routing change twc makes."""


@dataclass(frozen=True, slots=True)
class TemporalVersion:
    """One version of a worker deployment, as DescribeWorkerDeployment reports it."""

    build_id: str
    status: VersionStatus
    drained_since: float | None = None
    """When it became Drained (Temporal's drainage ``lastChangedTime``)."""
    deactivated_at: float | None = None
    """When it last stopped being Current or Ramping."""


@dataclass(frozen=True, slots=True)
class Routing:
    """A worker deployment's routing, as DescribeWorkerDeployment reports it."""

    conflict_token: bytes
    """Pass it to each change: Temporal refuses it if someone changed routing since."""
    current: str | None = None
    ramping: str | None = None
    ramp_percentage: float = 0.0
    ramp_changed_at: float | None = None
    """When the ramp last changed: a step's pause counts from here, across restarts."""
    versions: Mapping[str, TemporalVersion] = field(default_factory=lambda: MappingProxyType({}))

    def status(self, build_id: str) -> VersionStatus:
        """The version's status; NotRegistered when Temporal does not know it."""
        found = self.versions.get(build_id)
        return found.status if found is not None else VersionStatus.NOT_REGISTERED


@dataclass(frozen=True, slots=True)
class VersionDeployment:
    """A version's Deployment as the cluster runs it."""

    build_id: str
    name: str
    replicas: int
    ready: int = 0


@dataclass(frozen=True, slots=True)
class GateRun:
    """One gate workflow run on one task queue."""

    workflow_id: str
    task_queue: str
    status: GateStatus
    message: str = ""
    """Why it failed, when it did."""
