"""The settings a user of ``twc run`` sets, as frozen pydantic models.

Every field has a docstring; nothing here reads the environment or the clock (the CLI
builds :class:`DaemonSettings` from a file and flags). Autoscaling defaults are HPA's
(``autoscaling/v2`` ``behavior``). Tuning no user sets is a constant next to its use.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KILL_MARGIN = 1.0
"""Seconds the engine guard needs, past its grace period, to kill and reap a run."""


class _Settings(BaseModel):
    # Field docstrings become descriptions: --help and docs use the code's words.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class BackoffSettings(_Settings):
    """Failure ``n`` waits ``min(max_delay, base * 2 ** (n - 1))`` s, jittered by 10 %."""

    base: float = Field(default=1.0, gt=0)
    """Delay in seconds after the first failure."""
    max_delay: float = Field(default=300.0, gt=0)
    """Upper bound in seconds of any backoff delay, jitter included."""
    concurrent_update_delay: float = Field(default=15.0, ge=0)
    """Seconds before a retry when another update holds the stack's lock."""

    @model_validator(mode="after")
    def _base_within_max(self) -> BackoffSettings:
        if self.base > self.max_delay:
            raise ValueError(f"base ({self.base}) must not exceed max_delay ({self.max_delay})")
        return self


class PolicyType(StrEnum):
    """How a :class:`ScalingPolicy` measures change (HPA's ``HPAScalingPolicyType``)."""

    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(StrEnum):
    """Which policy wins when several apply (HPA's ``selectPolicy``)."""

    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


class ScalingPolicy(_Settings):
    """The most replicas may change by within a sliding period."""

    type: PolicyType
    """Whether ``value`` counts replicas or percent."""
    value: int = Field(gt=0)
    """The allowed change per period (replicas or percent)."""
    period_seconds: float = Field(gt=0, le=1800)
    """Length in seconds of the sliding window the change is counted over."""


class ScalingRules(_Settings):
    """Rules for one direction of scaling (HPA's ``HPAScalingRules``)."""

    stabilization_window_seconds: float = Field(default=0.0, ge=0, le=3600)
    """Recommendations this recent count: scale-up takes the lowest, scale-down the
    highest, so short spikes and dips do not flap replicas."""
    select_policy: SelectPolicy = SelectPolicy.MAX
    """Which of ``policies`` wins."""
    policies: tuple[ScalingPolicy, ...] = ()
    """Rate limits; empty means unlimited."""


_ALL_PER_15S = ScalingPolicy(type=PolicyType.PERCENT, value=100, period_seconds=15)


class AutoscaleBehavior(_Settings):
    """How backlog-driven recommendations become replica changes (HPA defaults)."""

    tolerance: float = Field(default=0.1, ge=0, lt=1)
    """No change while ``|backlog / (target * current) - 1|`` is at most this."""
    scale_up: ScalingRules = ScalingRules(
        policies=(_ALL_PER_15S, ScalingPolicy(type=PolicyType.PODS, value=4, period_seconds=15))
    )
    """Rules when the recommendation is above the current replicas."""
    scale_down: ScalingRules = ScalingRules(
        stabilization_window_seconds=300, policies=(_ALL_PER_15S,)
    )
    """Rules when the recommendation is below the current replicas."""

    def with_scale_down_window(self, seconds: float) -> AutoscaleBehavior:
        """These rules with a scale-down stabilization window of ``seconds`` (a copy if new)."""
        if seconds == self.scale_down.stabilization_window_seconds:
            return self
        down = self.scale_down.model_copy(update={"stabilization_window_seconds": seconds})
        return self.model_copy(update={"scale_down": down})


class SamplingSettings(_Settings):
    """How often the daemon asks Temporal for task-queue backlogs."""

    interval: float = Field(default=10.0, gt=0)
    """Seconds between two samples of one task queue's backlog (KEDA's
    ``pollingInterval``); an iteration woken sooner uses the last sample."""


class LeaderElectionSettings(_Settings):
    """A ``Lease`` so one daemon applies a stack; client-go's defaults and invariant
    ``lease_duration > renew_deadline > retry_period``."""

    enabled: bool = False
    """Whether to take part in leader election at all (the backend's lock always holds)."""
    lease_name: str | None = None
    """Name of the Lease object; ``None`` derives one from the project and stack."""
    lease_namespace: str = "default"
    """Namespace of the Lease object."""
    lease_duration: float = Field(default=15.0, gt=0)
    """Seconds a non-leader waits after the last renewal before taking the Lease."""
    renew_deadline: float = Field(default=10.0, gt=0)
    """Seconds the leader keeps retrying a renewal before it stops leading."""
    retry_period: float = Field(default=2.0, gt=0)
    """Seconds between attempts to acquire or renew."""

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionSettings:
        if not self.lease_duration > self.renew_deadline > self.retry_period:
            raise ValueError("need lease_duration > renew_deadline > retry_period")
        return self


class VersionedRolloutSettings(_Settings):
    """Versioned rollouts: how the daemon drives routing and sunset."""

    time_scale: float = Field(default=1.0, gt=0, le=1)
    """Multiplies every rollout duration; below 1 only on test beds and in demos."""


class EngineSettings(_Settings):
    """Bounds on every engine run: past its deadline, its Lease term or the daemon's
    life it gets SIGINT, then SIGKILL of every process after ``interrupt_grace``."""

    deadline: float = Field(default=1800.0, gt=0)
    """Seconds one engine operation may take (then ``EngineDeadlineExceeded``)."""
    interrupt_grace: float = Field(default=3.0, gt=0)
    """Seconds between the SIGINT and the SIGKILL of every process the run started."""


class StateSettings(_Settings):
    """How the engine writes the stack's state."""

    checkpoints: Literal["every-step", "final"] = "every-step"
    """``every-step``: after each resource changed; ``final``: once per ``up`` (a crash
    loses the record of that ``up``). See docs/daemon.md."""


class ShardSettings(_Settings):
    """How one daemon process runs the shards of a sharded stack."""

    engine_concurrency: int = Field(default=2, ge=1, le=64)
    """Most engine runs at once across this process's shards (about 2 per core)."""


class DaemonSettings(_Settings):
    """Everything the reconcile loop of ``twc run`` is tuned by."""

    reconcile_interval: float = Field(default=30.0, gt=0)
    """Seconds between reconcile iterations."""
    resync_interval: float = Field(default=300.0, gt=0)
    """Seconds between full re-lists of Queue objects, a safety net under the watch."""
    refresh_interval: float = Field(default=600.0, gt=0)
    """Seconds between ``refresh`` runs that detect drift in the cluster."""
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    """TCP port of ``/healthz``, ``/readyz`` and ``/metrics``; 0 picks a free port."""
    status_host: str = "127.0.0.1"
    """Address ``/status`` listens on (it names every tenant's workers: loopback unless
    configured)."""
    status_port: int = Field(default=8081, ge=0, le=65535)
    """TCP port of ``/status``; 0 picks a free port."""
    backoff: BackoffSettings = BackoffSettings()
    """Retry timing after failed steps."""
    autoscale: AutoscaleBehavior = AutoscaleBehavior()
    """Defaults for turning backlogs into replica counts."""
    sampling: SamplingSettings = SamplingSettings()
    """How often backlogs are sampled."""
    leader_election: LeaderElectionSettings = LeaderElectionSettings()
    """Single-writer protection beyond the backend's lock."""
    rollout: VersionedRolloutSettings = VersionedRolloutSettings()
    """Versioned rollouts' time scale."""
    engine: EngineSettings = EngineSettings()
    """Deadline and interruption of engine runs."""
    liveness_timeout: float | None = Field(default=None, gt=0)
    """``/healthz`` fails when no iteration completed this many seconds past when the
    next was due; ``None``: four reconcile intervals, at least 60 s."""
    state: StateSettings = StateSettings()
    """How the engine writes the state."""
    shards: ShardSettings = ShardSettings()
    """For a sharded stack: engine concurrency."""

    @model_validator(mode="after")
    def _engine_dead_before_takeover(self) -> DaemonSettings:
        # A leader that cannot renew stops its engine (grace, then kill) before another takes over.
        election = self.leader_election
        needed = election.renew_deadline + self.engine.interrupt_grace + KILL_MARGIN
        if election.enabled and not election.lease_duration > needed:
            raise ValueError(
                f"need leader_election.lease_duration ({election.lease_duration}) > "
                f"renew_deadline ({election.renew_deadline}) + engine.interrupt_grace "
                f"({self.engine.interrupt_grace}) + {KILL_MARGIN}: the leader's engine "
                "must be dead before another daemon may take the Lease"
            )
        return self
