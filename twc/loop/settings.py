"""The settings a user of ``twc run`` sets: intervals, backoff bounds, autoscaling
behaviour, lease durations, the deletion guard's share, engine bounds, shard concurrency.

Frozen pydantic models with a docstring on every field; nothing here reads the
environment or the clock (the CLI builds a :class:`DaemonSettings` from a file and
flags). The autoscaling defaults are Kubernetes' HorizontalPodAutoscaler defaults
(``autoscaling/v2`` ``behavior``). Tuning no user sets is a constant next to its use.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AutoscaleBehavior",
    "BackoffSettings",
    "DaemonSettings",
    "EngineSettings",
    "LeaderElectionSettings",
    "PolicyType",
    "SamplingSettings",
    "ScalingPolicy",
    "ScalingRules",
    "SelectPolicy",
    "ShardSettings",
    "StateSettings",
    "VersionedRolloutSettings",
]


class _Settings(BaseModel):
    """Base of every settings model: immutable, strict about unknown keys."""

    # use_attribute_docstrings turns the docstring under each field into its description,
    # so `--help` texts and generated docs come from the same words as the code.
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class BackoffSettings(_Settings):
    """Exponential backoff after failed reconcile steps.

    The n-th consecutive failure waits ``min(max_delay, base * 2 ** (n - 1))`` seconds,
    spread by 10 % either way so daemons that failed together do not retry in lockstep.
    """

    base: float = Field(default=1.0, gt=0)
    """Delay in seconds after the first failure."""
    max_delay: float = Field(default=300.0, gt=0)
    """Upper bound in seconds of any backoff delay, jitter included."""
    concurrent_update_delay: float = Field(default=15.0, ge=0)
    """Seconds to wait before retrying when another update holds the stack's lock
    (Pulumi's ``ConcurrentUpdateError``)."""

    @model_validator(mode="after")
    def _base_within_max(self) -> BackoffSettings:
        if self.base > self.max_delay:
            raise ValueError(f"base ({self.base}) must not exceed max_delay ({self.max_delay})")
        return self


class PolicyType(StrEnum):
    """How a :class:`ScalingPolicy` measures change, as in HPA's ``HPAScalingPolicyType``."""

    PODS = "Pods"
    """An absolute number of replicas."""
    PERCENT = "Percent"
    """A percentage of the replicas at the start of the period."""


class SelectPolicy(StrEnum):
    """Which policy wins when several apply, as in HPA's ``selectPolicy``."""

    MAX = "Max"
    """The policy allowing the largest change."""
    MIN = "Min"
    """The policy allowing the smallest change."""
    DISABLED = "Disabled"
    """No change in this direction at all."""


class ScalingPolicy(_Settings):
    """The most replicas may change by within a sliding period."""

    type: PolicyType
    """Whether ``value`` counts replicas or percent."""
    value: int = Field(gt=0)
    """The allowed change per period (replicas or percent)."""
    period_seconds: float = Field(gt=0, le=1800)
    """Length in seconds of the sliding window the change is counted over."""


class ScalingRules(_Settings):
    """Rules for one direction of scaling, as in HPA's ``HPAScalingRules``."""

    stabilization_window_seconds: float = Field(default=0.0, ge=0, le=3600)
    """Past recommendations within this many seconds are considered: scale-up takes the
    lowest, scale-down the highest, so short spikes and dips do not flap replicas."""
    select_policy: SelectPolicy = SelectPolicy.MAX
    """Which of ``policies`` wins."""
    policies: tuple[ScalingPolicy, ...] = ()
    """Rate limits; empty means unlimited."""


def _default_scale_up() -> ScalingRules:
    # HPA: double, or add 4 pods, whichever is more, every 15 s; no stabilization.
    return ScalingRules(
        stabilization_window_seconds=0,
        select_policy=SelectPolicy.MAX,
        policies=(
            ScalingPolicy(type=PolicyType.PERCENT, value=100, period_seconds=15),
            ScalingPolicy(type=PolicyType.PODS, value=4, period_seconds=15),
        ),
    )


def _default_scale_down() -> ScalingRules:
    # HPA: wait 5 minutes of lower recommendations, then drop to the target at once.
    return ScalingRules(
        stabilization_window_seconds=300,
        select_policy=SelectPolicy.MAX,
        policies=(ScalingPolicy(type=PolicyType.PERCENT, value=100, period_seconds=15),),
    )


class AutoscaleBehavior(_Settings):
    """How backlog-driven replica recommendations become replica changes (HPA defaults)."""

    tolerance: float = Field(default=0.1, ge=0, lt=1)
    """No change while ``|backlog / (targetBacklogPerReplica * current) - 1|`` is at most
    this, so a backlog hovering near the target does not flap replicas."""
    scale_up: ScalingRules = Field(default_factory=_default_scale_up)
    """Rules when the recommendation is above the current replicas."""
    scale_down: ScalingRules = Field(default_factory=_default_scale_down)
    """Rules when the recommendation is below the current replicas."""

    def with_scale_down_window(self, seconds: float) -> AutoscaleBehavior:
        """Return a copy whose scale-down stabilization window is ``seconds``.

        A worker's ``autoscaling.scaleDownStabilizationSeconds`` overrides the default.

        Args:
            seconds: The new window, in seconds.

        Returns:
            The adjusted behaviour; ``self`` is unchanged.
        """
        down = self.scale_down.model_copy(update={"stabilization_window_seconds": seconds})
        return self.model_copy(update={"scale_down": down})

    def longest_window(self) -> float:
        """Seconds of recommendation history the stabilization needs to keep."""
        return max(
            self.scale_up.stabilization_window_seconds,
            self.scale_down.stabilization_window_seconds,
        )

    def longest_period(self) -> float:
        """Seconds of scale-event history the rate limits need to keep."""
        periods = [p.period_seconds for p in self.scale_up.policies + self.scale_down.policies]
        return max(periods, default=0.0)


class SamplingSettings(_Settings):
    """How often the daemon asks Temporal for task-queue backlogs."""

    interval: float = Field(default=10.0, gt=0)
    """Seconds between two samples of one task queue's backlog (KEDA's
    ``pollingInterval``). The loop wakes when a sample is due; an iteration woken sooner
    uses the last sample, so Temporal's load depends on the autoscaled queues, not on
    how often the cluster changes."""


class LeaderElectionSettings(_Settings):
    """A Kubernetes ``Lease`` so only one daemon applies a stack (``--leader-elect``).

    The timings are client-go's leader-election defaults, with client-go's invariant
    ``lease_duration > renew_deadline > retry_period``: a leader stops leading (and its
    engine is interrupted) once it could not renew for ``renew_deadline``, which is
    before any other candidate may take the Lease (``lease_duration`` after it last saw
    the Lease change).
    """

    enabled: bool = False
    """Whether to take part in leader election at all (the backend's lock always holds)."""
    lease_name: str | None = None
    """Name of the Lease object; ``None`` derives one from the project and stack."""
    lease_namespace: str = "default"
    """Namespace of the Lease object."""
    lease_duration: float = Field(default=15.0, gt=0)
    """Seconds a non-leader waits after the last renewal before taking the lease (written
    into the Lease as ``leaseDurationSeconds``, which is what other candidates honour)."""
    renew_deadline: float = Field(default=10.0, gt=0)
    """Seconds the leader keeps retrying a renewal before it stops leading."""
    retry_period: float = Field(default=2.0, gt=0)
    """Seconds between attempts to acquire or renew."""

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionSettings:
        # The same invariant client-go enforces: otherwise two leaders can overlap.
        if not self.lease_duration > self.renew_deadline > self.retry_period:
            raise ValueError("need lease_duration > renew_deadline > retry_period")
        return self


class VersionedRolloutSettings(_Settings):
    """Versioned rollouts: how the daemon drives routing and sunset."""

    time_scale: float = Field(default=1.0, gt=0, le=1)
    """Multiplies every rollout duration (step pauses, sunset delays): below 1 only on
    test beds and in demos, so a rollout written for production runs in seconds."""


KILL_MARGIN = 1.0
"""Seconds the engine guard needs, past its grace period, to notice a deadline (it
checks ten times a second), kill every process of the run and reap them."""


class EngineSettings(_Settings):
    """Bounds on every engine run (``up``, ``refresh``, the repair of a killed run).

    Each engine command runs under twc's engine guard, which interrupts it (SIGINT to its
    process group, then SIGKILL of every process the run started after
    ``interrupt_grace``) when the run's deadline passes, when the daemon's Lease term
    ends, or when the daemon itself dies.
    """

    deadline: float = Field(default=1800.0, gt=0)
    """Seconds one engine operation may take before it is interrupted and reported as
    ``EngineDeadlineExceeded`` (a hung provider or an API server that never answers
    must not hold the stack, and its lock, for good)."""
    interrupt_grace: float = Field(default=3.0, gt=0)
    """Seconds between the SIGINT that asks the engine to stop (it then cancels, waits
    for in-flight steps and releases its lock) and the SIGKILL of every process the run
    started."""


class StateSettings(_Settings):
    """How the engine writes the stack's state."""

    checkpoints: Literal["every-step", "final"] = "every-step"
    """``every-step``: the engine records the state after each resource it changes (a
    crash loses only what was in flight). ``final``: once, when the ``up`` ends
    (``PULUMI_SKIP_CHECKPOINTS``; a crash loses the record of the whole ``up``, which
    the next one re-applies). See docs/daemon.md for what each costs."""


class ShardSettings(_Settings):
    """How one daemon process runs the shards of a sharded stack."""

    engine_concurrency: int = Field(default=2, ge=1, le=64)
    """Most engine runs (``up``, ``refresh``) in progress at once across this process's
    shards. Each run is a CLI, a language host and a provider process, so memory and CPU
    bound it: about 2 per core."""


class DaemonSettings(_Settings):
    """Everything the reconcile loop of ``twc run`` is tuned by."""

    reconcile_interval: float = Field(default=30.0, gt=0)
    """Seconds between reconcile iterations (sample backlogs, hash, maybe ``up``)."""
    resync_interval: float = Field(default=300.0, gt=0)
    """Seconds between full re-lists of Queue objects, a safety net under the watch."""
    refresh_interval: float = Field(default=600.0, gt=0)
    """Seconds between ``refresh`` runs that detect drift in the cluster."""
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    """TCP port of ``/healthz``, ``/readyz`` and ``/metrics``; 0 picks a free port."""
    backoff: BackoffSettings = Field(default_factory=BackoffSettings)
    """Retry timing after failed steps."""
    autoscale: AutoscaleBehavior = Field(default_factory=AutoscaleBehavior)
    """Defaults for turning backlogs into replica counts."""
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    """How often backlogs are sampled."""
    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)
    """Single-writer protection beyond the backend's lock."""
    rollout: VersionedRolloutSettings = Field(default_factory=VersionedRolloutSettings)
    """Versioned rollouts' time scale."""
    engine: EngineSettings = Field(default_factory=EngineSettings)
    """Deadline and interruption of engine runs."""
    liveness_timeout: float | None = Field(default=None, gt=0)
    """``/healthz`` fails when the loop has not completed an iteration (as a standby, an
    election round) for this many seconds past the moment the next was due (after its
    sleep), whether or not an engine run is in progress. ``None``: four reconcile
    intervals, at least 60 s (one Kubernetes call may take its 30 s read timeout)."""
    state: StateSettings = Field(default_factory=StateSettings)
    """How the engine writes the state."""
    shards: ShardSettings = Field(default_factory=ShardSettings)
    """For a sharded stack: engine concurrency."""

    @property
    def liveness_allowance(self) -> float:
        """The effective :attr:`liveness_timeout`."""
        if self.liveness_timeout is not None:
            return self.liveness_timeout
        return max(4 * self.reconcile_interval, 60.0)

    @model_validator(mode="after")
    def _engine_dead_before_takeover(self) -> DaemonSettings:
        # A leader that cannot renew stops at renew_deadline; its engine gets
        # interrupt_grace to stop, then is killed. All of that must be over before any
        # other candidate may take the Lease (lease_duration), or two engines overlap.
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

    status_host: str = "127.0.0.1"
    """Address ``/status`` listens on: loopback unless configured, because it names
    every worker and object of the stack (every tenant's); reach it with
    ``kubectl port-forward``. The probes and ``/metrics`` keep ``metrics_port``."""
    status_port: int = Field(default=8081, ge=0, le=65535)
    """TCP port of ``/status``; 0 picks a free port."""
