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
from twc.controller.desired import (
    DesiredState,
    ReconcileAction,
    ReconcileDecision,
    canonical_json,
    changed_workers,
    decide_reconcile,
    desired_state,
    state_hash,
)
from twc.controller.interruptible import LoopState, sleep
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
    "DesiredState",
    "FailureReason",
    "LeaderElectionSettings",
    "LoopState",
    "Outcome",
    "OutcomeKind",
    "PermanentError",
    "PolicyType",
    "RateLimiter",
    "Recommendation",
    "ReconcileAction",
    "ReconcileDecision",
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
    "canonical_json",
    "changed_workers",
    "classify",
    "decide_reconcile",
    "desired_replicas",
    "desired_state",
    "metric_recommendation",
    "outcome_of",
    "sample_backlogs",
    "scale_fleet",
    "sleep",
    "state_hash",
]
