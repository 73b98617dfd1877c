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
    "BackoffSettings",
    "Classification",
    "DaemonSettings",
    "FailureReason",
    "LeaderElectionSettings",
    "Outcome",
    "OutcomeKind",
    "PermanentError",
    "PolicyType",
    "Recommendation",
    "ReplicaBounds",
    "SamplingSettings",
    "ScaleDecision",
    "ScaleEvent",
    "ScaleReason",
    "ScalingPolicy",
    "ScalingRules",
    "ScalingState",
    "ScalingTarget",
    "SelectPolicy",
    "TemporaryError",
    "WorkerScaleInput",
    "backoff_delay",
    "classify",
    "desired_replicas",
    "metric_recommendation",
    "outcome_of",
    "scale_fleet",
]
