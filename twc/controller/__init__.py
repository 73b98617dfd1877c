"""The daemon's pure core: replica math, sampling limits, outcomes, hashes, loop state.

Nothing in this package talks to Pulumi, Kubernetes or Temporal: calls out are injected
(``describe`` for backlogs), and the time is an argument. The reconcile loop built on
top wires in the Automation API and the clients.
"""

from twc.controller.autoscale import (
    Recommendation,
    ReplicaBounds,
    ScaleDecision,
    ScaleEvent,
    ScaleReason,
    ScalingState,
    ScalingTarget,
    WorkerScaleInput,
    desired_replicas,
    metric_recommendation,
    scale_fleet,
)
from twc.controller.outcome import (
    Classification,
    FailureReason,
    Outcome,
    OutcomeKind,
    PermanentError,
    TemporaryError,
    backoff_delay,
    classify,
    outcome_of,
)
from twc.controller.sampling import (
    Backlog,
    RateLimiter,
    SampleResult,
    TaskQueueRef,
    TokenBucket,
    sample_backlogs,
)
from twc.controller.settings import (
    AutoscaleBehavior,
    BackoffSettings,
    DaemonSettings,
    LeaderElectionSettings,
    PolicyType,
    SamplingSettings,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)

__all__ = [
    "AutoscaleBehavior",
    "Backlog",
    "BackoffSettings",
    "Classification",
    "DaemonSettings",
    "FailureReason",
    "LeaderElectionSettings",
    "Outcome",
    "OutcomeKind",
    "PermanentError",
    "PolicyType",
    "RateLimiter",
    "Recommendation",
    "ReplicaBounds",
    "SampleResult",
    "SamplingSettings",
    "ScaleDecision",
    "ScaleEvent",
    "ScaleReason",
    "ScalingPolicy",
    "ScalingRules",
    "ScalingState",
    "ScalingTarget",
    "SelectPolicy",
    "TaskQueueRef",
    "TemporaryError",
    "TokenBucket",
    "WorkerScaleInput",
    "backoff_delay",
    "classify",
    "desired_replicas",
    "metric_recommendation",
    "outcome_of",
    "sample_backlogs",
    "scale_fleet",
]
