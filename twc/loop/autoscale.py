"""Replica math: a task-queue backlog becomes a replica count, the way HPA would do it.

The daemon calls :func:`desired_replicas` once per autoscaled worker and iteration. The
function is pure: the time is an argument, and the memory it needs (past recommendations
for stabilization, past scale events for rate limits) comes in as an immutable
:class:`ScalingState` and goes out as a new one inside the :class:`ScaleDecision`, the way
kopf handlers return new state instead of mutating it. The loop keeps one state per
worker name (:func:`scale_fleet` does that bookkeeping for a whole fleet).

The algorithm is Kubernetes' HorizontalPodAutoscaler (``autoscaling/v2`` with
``behavior``), with ``backlog / targetBacklogPerReplica`` as the metric:

1. A current count outside ``[min, max]`` is brought inside at once.
2. The metric's recommendation is ``ceil(backlog / target)`` unless the usage ratio is
   within the tolerance of 1, in which case it is the current count; then it is clamped.
3. Stabilization: scale up to at most the *lowest* recommendation of the scale-up window,
   scale down to at least the *highest* recommendation of the scale-down window.
4. Rate limits: the change within each policy's sliding period is capped.

Scale to zero follows KEDA: with ``minReplicas: 0`` a worker is *active* while its
backlog exceeds ``activationBacklog``. An inactive worker at zero stays there; an
active one wakes to at least one replica; a worker that turned inactive is recommended
zero, which the scale-down stabilization window delays (KEDA's cooldown period).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from fractions import Fraction
from types import MappingProxyType
from typing import Protocol

from twc.loop.settings import AutoscaleBehavior, PolicyType, ScalingRules, SelectPolicy

__all__ = [
    "Recommendation",
    "ReplicaBounds",
    "ScaleDecision",
    "ScaleEvent",
    "ScaleReason",
    "ScalingState",
    "ScalingTarget",
    "WorkerScaleInput",
    "desired_replicas",
    "metric_recommendation",
    "scale_fleet",
]


class ScalingTarget(Protocol):
    """What the math needs from a worker's ``autoscaling`` block.

    ``twc.spec``'s ``Autoscaling`` model satisfies it as is.
    """

    @property
    def min_replicas(self) -> int:
        """Fewest replicas."""
        ...

    @property
    def max_replicas(self) -> int:
        """Most replicas."""
        ...

    @property
    def target_backlog_per_replica(self) -> float:
        """Backlog one replica is expected to keep up with; must be positive."""
        ...

    @property
    def activation_backlog(self) -> int:
        """With ``min_replicas == 0``: the backlog at or below which the worker sleeps."""
        ...


@dataclass(frozen=True, slots=True)
class ReplicaBounds:
    """A plain :class:`ScalingTarget`, for callers without a spec model (and tests)."""

    min_replicas: int
    """Fewest replicas."""
    max_replicas: int
    """Most replicas."""
    target_backlog_per_replica: float
    """Backlog one replica is expected to keep up with; must be positive."""
    activation_backlog: int = 0
    """With ``min_replicas == 0``: the backlog at or below which the worker sleeps."""


class ScaleReason(StrEnum):
    """Why a decision came out the way it did; stable values for logs and metrics."""

    NO_METRIC = "NoMetric"
    """The backlog is unknown (sampling failed), so replicas are held."""
    BELOW_MIN = "BelowMinReplicas"
    """The current count was below ``minReplicas``."""
    ABOVE_MAX = "AboveMaxReplicas"
    """The current count was above ``maxReplicas``."""
    WITHIN_TOLERANCE = "WithinTolerance"
    """The backlog is close enough to the target that nothing changes."""
    STABILIZED = "Stabilized"
    """A stabilization window held the count away from the recommendation."""
    SCALE_UP_LIMITED = "ScaleUpLimit"
    """A scale-up policy capped the increase."""
    SCALE_DOWN_LIMITED = "ScaleDownLimit"
    """A scale-down policy capped the decrease."""
    DESIRED = "DesiredWithinRange"
    """The recommendation was taken as is."""
    INACTIVE = "BelowActivation"
    """At zero replicas with the backlog at or below ``activationBacklog``: asleep."""


@dataclass(frozen=True, slots=True)
class Recommendation:
    """A replica count recommended by the metric at some time."""

    at: float
    """When, on the caller's clock (seconds)."""
    replicas: int
    """The recommended count, already within the bounds."""


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """A change of replicas decided at some time."""

    at: float
    """When, on the caller's clock (seconds)."""
    change: int
    """How many replicas were added or removed (always positive)."""


@dataclass(frozen=True, slots=True)
class ScalingState:
    """Per-worker memory of the autoscaler; never mutated, replaced on every decision.

    A fresh ``ScalingState()`` means the worker was never seen: the first decision seeds
    the scale-down window with the current count, as HPA does, so a restarted daemon does
    not shrink a fleet the moment it starts.
    """

    started_at: float | None = None
    """When this worker was first seen; ``None`` for a fresh state."""
    recommendations: tuple[Recommendation, ...] = ()
    """Recommendations still inside the longest stabilization window, oldest first."""
    scale_up_events: tuple[ScaleEvent, ...] = ()
    """Increases still inside the longest policy period, oldest first."""
    scale_down_events: tuple[ScaleEvent, ...] = ()
    """Decreases still inside the longest policy period, oldest first."""


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """The outcome of one :func:`desired_replicas` call."""

    replicas: int
    """The replica count to apply."""
    current: int
    """The count the decision started from."""
    recommendation: int
    """What the metric alone asked for (tolerance and bounds applied), before
    stabilization and rate limits; equals ``current`` when there was no metric."""
    reason: ScaleReason
    """Why ``replicas`` is what it is."""
    state: ScalingState
    """The state to pass to the next call for this worker. It assumes ``replicas`` gets
    applied; if the apply fails, keeping it anyway only makes the next scale-up slower."""

    @property
    def changed(self) -> bool:
        """Whether the decision differs from the current count."""
        return self.replicas != self.current


@dataclass(frozen=True, slots=True)
class WorkerScaleInput:
    """One worker's inputs to :func:`scale_fleet`."""

    backlog: int | None
    """Sampled backlog over all task-queue types; ``None`` when sampling failed."""
    current: int
    """Replicas currently applied."""
    bounds: ScalingTarget
    """The worker's autoscaling bounds."""
    behavior: AutoscaleBehavior
    """The behaviour for this worker (defaults with any per-worker overrides)."""


def metric_recommendation(
    backlog: int, current: int, bounds: ScalingTarget, tolerance: float
) -> tuple[int, bool]:
    """Return the replica count the backlog alone asks for.

    Args:
        backlog: Sampled backlog, at least 0.
        current: Replicas currently applied, at least 0.
        bounds: The worker's autoscaling bounds.
        tolerance: Relative dead band around the target (HPA's 0.1).

    Returns:
        ``(replicas, within_tolerance)``: ``ceil(backlog / target)`` clamped to the bounds,
        or ``current`` (clamped) when the usage ratio is within the tolerance of 1.
    """
    target = Fraction(bounds.target_backlog_per_replica)
    # Compare in exact rationals: in floats 55 / 5 / 10 - 1 is a hair above 0.1, so a
    # ratio of exactly 1 + tolerance would scale or not depending on rounding.
    within = current > 0 and abs(backlog - target * current) <= Fraction(tolerance) * (
        target * current
    )
    wanted = current if within else math.ceil(Fraction(backlog) / target)
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
    """Decide one worker's replicas from its backlog, HPA style.

    Args:
        backlog: Sampled backlog over all task-queue types, or ``None`` when it is
            unknown (then replicas are only brought within bounds, never moved by a guess).
        current: Replicas currently applied (0 for a worker not yet deployed).
        bounds: The worker's autoscaling bounds.
        behavior: Tolerance, stabilization windows and rate-limit policies.
        state: This worker's state from the previous call, or ``ScalingState()``.
        now: The current time in seconds on a monotonic clock; the only clock read.

    Returns:
        The decision, carrying the state for the next call.

    Raises:
        ValueError: On negative counts, ``min > max`` or a non-positive target.
    """
    lo, hi = _checked(backlog, current, bounds)
    if state.started_at is None:
        seed = (Recommendation(now, _clamp(current, lo, hi)),)
        state = ScalingState(
            started_at=now,
            recommendations=seed if behavior.scale_down.stabilization_window_seconds else (),
        )

    if current < lo or current > hi:
        # Out of bounds (bounds edited, or a fresh worker): fix at once, like HPA, without
        # stabilization or rate limits; the user asked for these bounds explicitly.
        target = _clamp(current, lo, hi)
        reason = ScaleReason.BELOW_MIN if current < lo else ScaleReason.ABOVE_MAX
        return ScaleDecision(
            replicas=target,
            current=current,
            recommendation=target,
            reason=reason,
            state=_pruned(_with_event(state, current, target, now), behavior, now),
        )

    if backlog is None:
        return ScaleDecision(
            current, current, current, ScaleReason.NO_METRIC, _pruned(state, behavior, now)
        )

    activation = bounds.activation_backlog if lo == 0 else 0
    if lo == 0 and current == 0 and backlog <= activation:
        # Asleep and nothing worth waking for (KEDA's inactive scaler).
        asleep = _recommended(state, 0, now)
        return ScaleDecision(0, 0, 0, ScaleReason.INACTIVE, _pruned(asleep, behavior, now))
    recommended, within = metric_recommendation(backlog, current, bounds, behavior.tolerance)
    if lo == 0:
        # Active: at least one replica; inactive: zero, once the scale-down
        # stabilization window (the cooldown) agrees.
        recommended = min(max(recommended, 1), hi) if backlog > activation else 0
        within = within and recommended == current
    stabilized = _stabilize(recommended, current, state, behavior, now)
    state = _recommended(state, recommended, now)

    final = stabilized
    if stabilized > current:
        limit = max(_limit(current, state, behavior.scale_up, now, up=True), current)
        final = min(stabilized, limit, hi)
    elif stabilized < current:
        limit = min(_limit(current, state, behavior.scale_down, now, up=False), current)
        final = max(stabilized, limit, lo)
    return ScaleDecision(
        replicas=final,
        current=current,
        recommendation=recommended,
        reason=_reason(current, recommended, stabilized, final, within=within),
        state=_pruned(_with_event(state, current, final, now), behavior, now),
    )


def _recommended(state: ScalingState, replicas: int, now: float) -> ScalingState:
    return replace(state, recommendations=(*state.recommendations, Recommendation(now, replicas)))


def _checked(backlog: int | None, current: int, bounds: ScalingTarget) -> tuple[int, int]:
    """``(min, max)`` replicas of valid inputs; see :func:`desired_replicas`."""
    lo, hi = bounds.min_replicas, bounds.max_replicas
    if current < 0 or (backlog is not None and backlog < 0):
        raise ValueError(f"counts must not be negative (current={current}, backlog={backlog})")
    if not 0 <= lo <= hi:
        raise ValueError(f"need 0 <= minReplicas ({lo}) <= maxReplicas ({hi})")
    if bounds.target_backlog_per_replica <= 0:
        raise ValueError("targetBacklogPerReplica must be positive")
    return lo, hi


def _reason(
    current: int, recommended: int, stabilized: int, final: int, *, within: bool
) -> ScaleReason:
    """Why a worker that had a backlog got ``final`` replicas."""
    if within and final == current:
        return ScaleReason.WITHIN_TOLERANCE
    if final != stabilized:
        if stabilized > current:
            return ScaleReason.SCALE_UP_LIMITED
        return ScaleReason.SCALE_DOWN_LIMITED
    if stabilized != recommended:
        return ScaleReason.STABILIZED
    return ScaleReason.DESIRED


def scale_fleet(
    inputs: Mapping[str, WorkerScaleInput],
    states: Mapping[str, ScalingState],
    *,
    now: float,
) -> tuple[Mapping[str, ScaleDecision], Mapping[str, ScalingState]]:
    """Decide replicas for every autoscaled worker of a fleet.

    Args:
        inputs: Per worker name, its backlog, current replicas, bounds and behaviour.
        states: Per worker name, the state returned by the previous call; missing names
            start fresh.
        now: The current time in seconds on a monotonic clock.

    Returns:
        ``(decisions, states)``, both keyed by worker name and read-only. States of
        workers absent from ``inputs`` are dropped, so a removed and re-added worker
        starts fresh.
    """
    decisions: dict[str, ScaleDecision] = {}
    for name, item in inputs.items():
        decisions[name] = desired_replicas(
            backlog=item.backlog,
            current=item.current,
            bounds=item.bounds,
            behavior=item.behavior,
            state=states.get(name, ScalingState()),
            now=now,
        )
    new_states = {name: decision.state for name, decision in decisions.items()}
    return MappingProxyType(decisions), MappingProxyType(new_states)


# Stands for "no limit" where an int is needed; far above any sane maxReplicas.
_UNLIMITED = 2**31 - 1


def _clamp(value: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, value))


def _stabilize(
    recommended: int, current: int, state: ScalingState, behavior: AutoscaleBehavior, now: float
) -> int:
    # HPA's stabilizeRecommendationWithBehaviors: the scale-up window bounds the count from
    # above by its lowest recommendation, the scale-down window from below by its highest.
    up_cutoff = now - behavior.scale_up.stabilization_window_seconds
    down_cutoff = now - behavior.scale_down.stabilization_window_seconds
    up = min([r.replicas for r in state.recommendations if r.at > up_cutoff] + [recommended])
    down = max([r.replicas for r in state.recommendations if r.at > down_cutoff] + [recommended])
    return min(max(current, up), down)


def _changed_within(events: tuple[ScaleEvent, ...], period: float, now: float) -> int:
    cutoff = now - period
    return sum(e.change for e in events if e.at > cutoff)


def _period_start(current: int, state: ScalingState, period: float, now: float) -> int:
    # The count at the start of the sliding period: the limit applies to the change over
    # the period, not per call, so the loop's interval does not change the scaling speed.
    added = _changed_within(state.scale_up_events, period, now)
    removed = _changed_within(state.scale_down_events, period, now)
    return current - added + removed


def _limit(current: int, state: ScalingState, rules: ScalingRules, now: float, *, up: bool) -> int:
    """The ceiling (``up``) or floor the scale-up or scale-down policies set now."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    proposals: list[int] = []
    for policy in rules.policies:
        start = _period_start(current, state, policy.period_seconds, now)
        if policy.type is PolicyType.PODS:
            proposals.append(start + policy.value if up else start - policy.value)
        elif up:
            # Round up, or a small fleet at +N % could never grow by a whole replica.
            proposals.append(-(-start * (100 + policy.value) // 100))
        else:
            proposals.append(start * (100 - policy.value) // 100)
    if not proposals:
        return _UNLIMITED if up else 0
    # Max picks the policy allowing the largest change: the highest ceiling, the lowest floor.
    largest = (max(proposals), min(proposals)) if up else (min(proposals), max(proposals))
    return largest[0] if rules.select_policy is SelectPolicy.MAX else largest[1]


def _with_event(state: ScalingState, current: int, new: int, now: float) -> ScalingState:
    if new > current:
        return replace(
            state, scale_up_events=(*state.scale_up_events, ScaleEvent(now, new - current))
        )
    if new < current:
        return replace(
            state, scale_down_events=(*state.scale_down_events, ScaleEvent(now, current - new))
        )
    return state


def _pruned(state: ScalingState, behavior: AutoscaleBehavior, now: float) -> ScalingState:
    # Keep only what a later call can still look at, so the state stays small forever.
    rec_cutoff = now - behavior.longest_window()
    event_cutoff = now - behavior.longest_period()
    return replace(
        state,
        recommendations=tuple(r for r in state.recommendations if r.at > rec_cutoff),
        scale_up_events=tuple(e for e in state.scale_up_events if e.at > event_cutoff),
        scale_down_events=tuple(e for e in state.scale_down_events if e.at > event_cutoff),
    )
