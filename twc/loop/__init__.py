"""The daemon: ``twc run``'s reconcile loop, one iteration at a time.

An iteration is observe → plan → act → report (:mod:`twc.loop.daemon` reads as that
sequence; each step is a module of its own). The decisions are pure and time is an
argument: replica math (:mod:`~twc.loop.autoscale`), sampling limits
(:mod:`~twc.loop.sampling`), outcomes and backoff (:mod:`~twc.loop.outcome`), hashes
and the ``up`` decision (:mod:`~twc.loop.decide`), the loop's state
(:mod:`~twc.loop.state`) and the plan (:mod:`~twc.loop.plan`). The I/O is injected:
what the loop reads (:class:`~twc.loop.observe.Sources`), what it changes
(:class:`~twc.loop.act.Effects`), its clocks and threads
(:class:`~twc.loop.daemon.Clocks`).
``twc.commands.run`` wires the real ones. This package re-exports the pure core.
"""

from twc.loop.autoscale import (
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
from twc.loop.decide import (
    DesiredState,
    ReconcileAction,
    ReconcileDecision,
    canonical_json,
    changed_workers,
    decide_reconcile,
    desired_state,
    state_hash,
)
from twc.loop.outcome import (
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
from twc.loop.sampling import (
    Backlog,
    RateLimiter,
    SampleResult,
    TaskQueueRef,
    TokenBucket,
    sample_backlogs,
)
from twc.loop.settings import (
    AutoscaleBehavior,
    BackoffSettings,
    DaemonSettings,
    EngineSettings,
    LeaderElectionSettings,
    PolicyType,
    SamplingSettings,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)
from twc.loop.state import LoopState, sleep

__all__ = [
    "AutoscaleBehavior",
    "Backlog",
    "BackoffSettings",
    "Classification",
    "DaemonSettings",
    "DesiredState",
    "EngineSettings",
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
