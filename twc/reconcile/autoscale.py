"""Replica math: a task-queue backlog becomes a replica count, as HPA would do it. Pure.

HPA's algorithm (``autoscaling/v2`` with ``behavior``) on ``backlog / targetBacklogPerReplica``:
bounds, tolerance, stabilization windows, per-period policies. Scale to zero is KEDA's: with
``minReplicas: 0`` a worker is active while its backlog exceeds ``activationBacklog``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol

from twc.reconcile.settings import AutoscaleBehavior, PolicyType, ScalingRules, SelectPolicy


class ScalingTarget(Protocol):
    """What the math needs from a worker's ``autoscaling`` block."""

    @property
    def min_replicas(self) -> int: ...
    @property
    def max_replicas(self) -> int: ...
    @property
    def target_backlog_per_replica(self) -> int: ...
    @property
    def activation_backlog(self) -> int: ...


class ScaleReason(StrEnum):
    """Why a decision came out the way it did; stable values for logs and metrics."""

    NO_METRIC = "NoMetric"
    BELOW_MIN = "BelowMinReplicas"
    ABOVE_MAX = "AboveMaxReplicas"
    WITHIN_TOLERANCE = "WithinTolerance"
    STABILIZED = "Stabilized"
    SCALE_UP_LIMITED = "ScaleUpLimit"
    SCALE_DOWN_LIMITED = "ScaleDownLimit"
    DESIRED = "DesiredWithinRange"
    INACTIVE = "BelowActivation"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """A replica count (within bounds) the metric recommended at time ``at``."""

    at: float
    replicas: int


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """A change of ``change`` replicas (negative: a scale-down) decided at time ``at``."""

    at: float
    change: int


@dataclass(frozen=True, slots=True)
class ScalingState:
    """The autoscaler's memory of a worker, oldest first, pruned to the longest window."""

    started_at: float | None = None
    recommendations: tuple[Recommendation, ...] = ()
    scale_events: tuple[ScaleEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """The outcome of one :func:`desired_replicas` call."""

    replicas: int
    current: int
    recommendation: int
    reason: ScaleReason
    state: ScalingState

    @property
    def changed(self) -> bool:
        """Whether the decision differs from the current count."""
        return self.replicas != self.current


@dataclass(frozen=True, slots=True)
class WorkerScaleInput:
    """One worker's inputs to :func:`scale_fleet` (``backlog`` ``None``: unknown)."""

    backlog: int | None
    current: int
    bounds: ScalingTarget
    behavior: AutoscaleBehavior


def metric_recommendation(
    backlog: int, current: int, bounds: ScalingTarget, tolerance: float
) -> tuple[int, bool]:
    """``(replicas, within_tolerance)``: ``ceil(backlog / target)`` within the bounds."""
    target, load = bounds.target_backlog_per_replica, bounds.target_backlog_per_replica * current
    # Exact integers: in floats a ratio of exactly 1 + tolerance depends on rounding.
    num, den = tolerance.as_integer_ratio()
    within = current > 0 and abs(backlog - load) * den <= num * load
    wanted = current if within else -(-backlog // target)
    return _clamp(wanted, bounds.min_replicas, bounds.max_replicas), within


def desired_replicas(
    *,
    backlog: int | None,
    current: int,
    bounds: ScalingTarget,
    behavior: AutoscaleBehavior,
    state: ScalingState,
    now: float,
) -> ScaleDecision:
    """One worker's replicas from its backlog (``None``: only brought within bounds), HPA style."""
    lo, hi = bounds.min_replicas, bounds.max_replicas
    if current < 0 or (backlog is not None and backlog < 0):
        raise ValueError(f"counts must not be negative (current={current}, backlog={backlog})")
    if not 0 <= lo <= hi:
        raise ValueError(f"need 0 <= minReplicas ({lo}) <= maxReplicas ({hi})")
    if bounds.target_backlog_per_replica <= 0:
        raise ValueError("targetBacklogPerReplica must be positive")
    if state.started_at is None:
        seed = (Recommendation(now, _clamp(current, lo, hi)),)
        window = behavior.scale_down.stabilization_window_seconds
        state = ScalingState(started_at=now, recommendations=seed if window else ())
    if current < lo or current > hi:
        # Bounds the user set apply at once, without stabilization or rate limits.
        target = _clamp(current, lo, hi)
        reason = ScaleReason.BELOW_MIN if current < lo else ScaleReason.ABOVE_MAX
        kept = _pruned(_with_event(state, current, target, now), behavior, now)
        return ScaleDecision(target, current, target, reason, kept)
    if backlog is None:
        kept = _pruned(state, behavior, now)
        return ScaleDecision(current, current, current, ScaleReason.NO_METRIC, kept)
    activation = bounds.activation_backlog if lo == 0 else 0
    if lo == 0 and current == 0 and backlog <= activation:
        asleep = _pruned(_recommended(state, 0, now), behavior, now)
        return ScaleDecision(0, 0, 0, ScaleReason.INACTIVE, asleep)
    recommended, within = metric_recommendation(backlog, current, bounds, behavior.tolerance)
    if lo == 0:
        # Active: at least one replica; inactive: zero once the scale-down window agrees.
        recommended = min(max(recommended, 1), hi) if backlog > activation else 0
        within = within and recommended == current
    stabilized = _stabilize(recommended, current, state, behavior, now)
    state = _recommended(state, recommended, now)
    final = stabilized
    if stabilized > current:
        final = min(
            stabilized, max(_limit(current, state, behavior.scale_up, now, True), current), hi
        )
    elif stabilized < current:
        limit = min(_limit(current, state, behavior.scale_down, now, False), current)
        final = max(stabilized, limit, lo)
    return ScaleDecision(
        replicas=final,
        current=current,
        recommendation=recommended,
        reason=_reason(current, recommended, stabilized, final, within=within),
        state=_pruned(_with_event(state, current, final, now), behavior, now),
    )


def scale_fleet(
    inputs: Mapping[str, WorkerScaleInput], states: Mapping[str, ScalingState], *, now: float
) -> tuple[Mapping[str, ScaleDecision], Mapping[str, ScalingState]]:
    """``(decisions, states)`` per worker name; absent workers' states are dropped."""
    decisions = {
        name: desired_replicas(
            backlog=item.backlog,
            current=item.current,
            bounds=item.bounds,
            behavior=item.behavior,
            state=states.get(name, ScalingState()),
            now=now,
        )
        for name, item in inputs.items()
    }
    new_states = {name: decision.state for name, decision in decisions.items()}
    return MappingProxyType(decisions), MappingProxyType(new_states)


def _recommended(state: ScalingState, replicas: int, now: float) -> ScalingState:
    # Of two equal neighbours the later outlives the earlier in every window: one is kept.
    kept = state.recommendations
    kept = kept[:-1] if kept and kept[-1].replicas == replicas else kept
    return replace(state, recommendations=(*kept, Recommendation(now, replicas)))


def _reason(
    current: int, recommended: int, stabilized: int, final: int, *, within: bool
) -> ScaleReason:
    if within and final == current:
        return ScaleReason.WITHIN_TOLERANCE
    if final != stabilized:
        up = stabilized > current
        return ScaleReason.SCALE_UP_LIMITED if up else ScaleReason.SCALE_DOWN_LIMITED
    return ScaleReason.STABILIZED if stabilized != recommended else ScaleReason.DESIRED


def _clamp(value: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, value))


def _stabilize(
    recommended: int, current: int, state: ScalingState, behavior: AutoscaleBehavior, now: float
) -> int:
    # Scale-up window: lowest recommendation caps from above; scale-down: highest from below.
    up_cutoff = now - behavior.scale_up.stabilization_window_seconds
    down_cutoff = now - behavior.scale_down.stabilization_window_seconds
    up = min([r.replicas for r in state.recommendations if r.at > up_cutoff] + [recommended])
    down = max([r.replicas for r in state.recommendations if r.at > down_cutoff] + [recommended])
    return min(max(current, up), down)


def _limit(current: int, state: ScalingState, rules: ScalingRules, now: float, up: bool) -> int:
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    proposals: list[int] = []
    for policy in rules.policies:
        # The count the period started from: the changes made within it undone.
        since = now - policy.period_seconds
        start = current - sum(e.change for e in state.scale_events if e.at > since)
        if policy.type is PolicyType.PODS:
            proposals.append(start + policy.value if up else start - policy.value)
        elif up:
            # Round up, or a small fleet at +N % could never grow by a whole replica.
            proposals.append(-(-start * (100 + policy.value) // 100))
        else:
            proposals.append(start * (100 - policy.value) // 100)
    if not proposals:
        return 2**31 - 1 if up else 0
    # Max picks the policy allowing the largest change: the highest ceiling, lowest floor.
    largest, smallest = (max(proposals), min(proposals)) if up else (min(proposals), max(proposals))
    return largest if rules.select_policy is SelectPolicy.MAX else smallest


def _with_event(state: ScalingState, current: int, new: int, now: float) -> ScalingState:
    if new == current:
        return state
    return replace(state, scale_events=(*state.scale_events, ScaleEvent(now, new - current)))


def _pruned(state: ScalingState, behavior: AutoscaleBehavior, now: float) -> ScalingState:
    rules = (behavior.scale_up, behavior.scale_down)
    window = max(r.stabilization_window_seconds for r in rules)
    period = max((p.period_seconds for r in rules for p in r.policies), default=0.0)
    return replace(
        state,
        recommendations=tuple(r for r in state.recommendations if r.at > now - window),
        scale_events=tuple(e for e in state.scale_events if e.at > now - period),
    )
