"""Backlog-driven replica math follows HPA: bounds, tolerance, stabilization, rate limits.

Scenarios are tables of (time, backlog, expected replicas) steps run on an injected
clock; each step applies the previous decision, as the daemon does after a successful up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twc.reconcile.autoscale import (
    ScaleDecision,
    ScaleReason,
    ScalingState,
    WorkerScaleInput,
    desired_replicas,
    metric_recommendation,
    scale_fleet,
)
from twc.reconcile.settings import (
    AutoscaleBehavior,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)


@dataclass(frozen=True, slots=True)
class ReplicaBounds:
    """A plain ``ScalingTarget`` (the spec's ``Autoscaling`` is the daemon's)."""

    min_replicas: int
    max_replicas: int
    target_backlog_per_replica: int
    activation_backlog: int = 0


HPA = AutoscaleBehavior()
NO_WINDOW = HPA.with_scale_down_window(0)


def rules(
    *policies: tuple[PolicyType, int, float],
    select: SelectPolicy = SelectPolicy.MAX,
    window: float = 0,
) -> ScalingRules:
    return ScalingRules(
        stabilization_window_seconds=window,
        select_policy=select,
        policies=tuple(ScalingPolicy(type=t, value=v, period_seconds=p) for t, v, p in policies),
    )


@dataclass(frozen=True)
class Step:
    at: float
    backlog: int | None
    expect: int
    reason: ScaleReason | None = None


@dataclass(frozen=True)
class Scenario:
    id: str
    bounds: ReplicaBounds
    start: int
    steps: Sequence[Step]
    behavior: AutoscaleBehavior = field(default=HPA)


def run(scenario: Scenario) -> list[ScaleDecision]:
    current, state = scenario.start, ScalingState()
    decisions = []
    for step in scenario.steps:
        decision = desired_replicas(
            backlog=step.backlog,
            current=current,
            bounds=scenario.bounds,
            behavior=scenario.behavior,
            state=state,
            now=step.at,
        )
        decisions.append(decision)
        current, state = decision.replicas, decision.state
    return decisions


B = ReplicaBounds
R = ScaleReason
SCENARIOS = [
    Scenario(
        "zero backlog goes to min once no higher recommendation is in the window",
        B(1, 20, 5),
        3,
        [Step(0, 0, 3, R.STABILIZED), Step(150, 0, 3, R.STABILIZED), Step(301, 0, 1, R.DESIRED)],
    ),
    Scenario(
        "zero backlog goes to min at once without a scale-down window",
        B(1, 20, 5),
        3,
        [Step(0, 0, 1, R.DESIRED)],
        NO_WINDOW,
    ),
    Scenario(
        "zero backlog with min 0 scales to zero",
        B(0, 20, 5),
        2,
        [Step(0, 0, 0, R.DESIRED)],
        NO_WINDOW,
    ),
    Scenario(
        "backlog 200 at target 5 is capped at max 20",
        B(1, 20, 5),
        10,
        [Step(0, 200, 20, R.DESIRED)],
    ),
    Scenario(
        "scale-up is limited to max(double, +4) per 15 s period",
        B(1, 20, 5),
        1,
        [
            Step(0, 200, 5, R.SCALE_UP_LIMITED),  # max(1*2, 1+4)
            Step(5, 200, 5, R.SCALE_UP_LIMITED),  # same period: started at 1, +4 used up
            Step(15, 200, 10, R.SCALE_UP_LIMITED),  # new period from 5: max(10, 9)
            Step(30, 200, 20, R.DESIRED),  # from 10: max(20, 14), and 20 is the max
        ],
    ),
    Scenario(
        "doubling wins over +4 for larger fleets",
        B(1, 100, 1),
        10,
        [Step(0, 100, 20, R.SCALE_UP_LIMITED)],
    ),
    Scenario(
        "tolerance: exactly 10 % over target holds",
        B(1, 20, 5),
        10,
        [Step(0, 55, 10, R.WITHIN_TOLERANCE)],
    ),
    Scenario(
        "tolerance: 8 % under target holds",
        B(1, 20, 5),
        10,
        [Step(0, 46, 10, R.WITHIN_TOLERANCE)],
    ),
    Scenario(
        "tolerance: 12 % over target scales to ceil(backlog / target)",
        B(1, 20, 5),
        10,
        [Step(0, 56, 12, R.DESIRED)],
    ),
    Scenario(
        "scale-down waits for the window and takes its highest recommendation",
        B(1, 20, 5),
        10,
        [
            Step(0, 50, 10, R.WITHIN_TOLERANCE),
            Step(100, 20, 10, R.STABILIZED),  # recommends 4
            Step(200, 30, 10, R.STABILIZED),  # recommends 6
            Step(301, 10, 6, R.STABILIZED),  # t=0 left the window; highest left is 6
            Step(401, 10, 6, R.STABILIZED),  # 6 (t=200) still inside
            Step(501, 10, 2, R.DESIRED),  # only 2s left
        ],
    ),
    Scenario(
        "a restarted daemon does not shrink at once: the window is seeded with current",
        B(1, 20, 5),
        8,
        [Step(1000, 0, 8, R.STABILIZED), Step(1301, 0, 1, R.DESIRED)],
    ),
    Scenario(
        "current below min is raised to min at once",
        B(2, 20, 5),
        0,
        [Step(0, None, 2, R.BELOW_MIN)],
    ),
    Scenario(
        "current above max is lowered to max at once, ignoring the window",
        B(1, 20, 5),
        30,
        [Step(0, 1000, 20, R.ABOVE_MAX)],
    ),
    Scenario(
        "min above the metric's wish wins",
        B(4, 20, 5),
        4,
        [Step(0, 0, 4, R.DESIRED)],
        NO_WINDOW,
    ),
    Scenario(
        "an unknown backlog holds replicas",
        B(1, 20, 5),
        7,
        [Step(0, None, 7, R.NO_METRIC)],
    ),
    Scenario(
        "asleep at zero: a backlog at the activation backlog does not wake it",
        B(0, 20, 5, activation_backlog=10),
        0,
        [Step(0, 3, 0, R.INACTIVE), Step(30, 10, 0, R.INACTIVE)],
    ),
    Scenario(
        "asleep at zero: a backlog above the activation backlog wakes it to at least one",
        B(0, 20, 100, activation_backlog=10),
        0,
        [Step(0, 11, 1, R.DESIRED)],
    ),
    Scenario(
        "awake: at or below the activation backlog it goes back to zero after the window",
        B(0, 20, 5, activation_backlog=10),
        3,
        [Step(0, 8, 3, R.STABILIZED), Step(301, 8, 0, R.DESIRED)],
    ),
    Scenario(
        "awake: above the activation backlog the backlog-per-replica math decides",
        B(0, 20, 5, activation_backlog=10),
        3,
        [Step(0, 30, 6, R.DESIRED)],
    ),
    Scenario(
        "the activation backlog is ignored with a minimum of one",
        B(1, 20, 5, activation_backlog=10),
        1,
        [Step(0, 8, 2, R.DESIRED)],
    ),
    Scenario(
        "scale from zero adds up to 4 (percent of zero is zero)",
        B(0, 20, 5),
        0,
        [Step(0, 100, 4, R.SCALE_UP_LIMITED), Step(15, 100, 8)],
    ),
    Scenario(
        "scale-down policy of 1 pod per 60 s",
        B(1, 20, 5),
        5,
        [Step(0, 0, 4, R.SCALE_DOWN_LIMITED), Step(30, 0, 4), Step(60, 0, 3)],
        AutoscaleBehavior(scale_down=rules((PolicyType.PODS, 1, 60))),
    ),
    Scenario(
        "select policy Min takes the smaller scale-up",
        B(1, 20, 5),
        1,
        [Step(0, 200, 2, R.SCALE_UP_LIMITED)],
        AutoscaleBehavior(
            scale_up=rules(
                (PolicyType.PERCENT, 100, 15), (PolicyType.PODS, 4, 15), select=SelectPolicy.MIN
            )
        ),
    ),
    Scenario(
        "disabled scale-down never shrinks",
        B(1, 20, 5),
        5,
        [Step(0, 0, 5, R.SCALE_DOWN_LIMITED)],
        AutoscaleBehavior(scale_down=rules(select=SelectPolicy.DISABLED)),
    ),
    Scenario(
        "no policies means no rate limit",
        B(1, 50, 1),
        1,
        [Step(0, 50, 50, R.DESIRED)],
        AutoscaleBehavior(scale_up=rules()),
    ),
    Scenario(
        "a scale-up window holds until the lowest recommendation in it is high enough",
        B(1, 20, 5),
        4,
        [
            Step(0, 20, 4, R.WITHIN_TOLERANCE),
            Step(10, 40, 4, R.STABILIZED),
            Step(61, 40, 8, R.DESIRED),
        ],
        AutoscaleBehavior(scale_up=rules(window=60)),
    ),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_replica_scenarios(scenario: Scenario) -> None:
    decisions = run(scenario)

    assert [d.replicas for d in decisions] == [s.expect for s in scenario.steps]
    for step, decision in zip(scenario.steps, decisions, strict=True):
        if step.reason is not None:
            assert decision.reason is step.reason, f"at t={step.at}: {decision}"


@pytest.mark.parametrize(
    ("backlog", "current", "expected"),
    [
        (0, 5, (1, False)),
        (200, 5, (20, False)),
        (7, 0, (2, False)),  # no ratio at zero replicas: straight to ceil(7 / 5)
        (50, 10, (10, True)),
        (1, 1, (1, False)),  # ratio 0.2: outside tolerance, ceil(0.2) = 1
    ],
)
def test_metric_recommendation(backlog: int, current: int, expected: tuple[int, bool]) -> None:
    assert metric_recommendation(backlog, current, B(1, 20, 5), 0.1) == expected


def test_decision_returns_new_state_and_leaves_the_old_one_alone() -> None:
    before = ScalingState()

    decision = desired_replicas(
        backlog=200, current=1, bounds=B(1, 20, 5), behavior=HPA, state=before, now=0
    )

    assert before == ScalingState()
    assert decision.state is not before
    assert decision.state.scale_events[0].change == 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.state.started_at = 1.0  # type: ignore[misc]


def test_state_stays_bounded_over_a_long_run() -> None:
    current, state = 5, ScalingState()
    for second in range(2000):
        decision = desired_replicas(
            backlog=(second * 7) % 120,
            current=current,
            bounds=B(1, 20, 5),
            behavior=HPA,
            state=state,
            now=float(second),
        )
        current, state = decision.replicas, decision.state

    assert len(state.recommendations) <= 300
    assert len(state.scale_events) <= 2 * 15


def test_per_worker_scale_down_window_override() -> None:
    behavior = HPA.with_scale_down_window(30)

    decisions = [
        desired_replicas(
            backlog=0, current=6, bounds=B(1, 20, 5), behavior=behavior, state=ScalingState(), now=0
        ),
    ]
    decisions.append(
        desired_replicas(
            backlog=0,
            current=6,
            bounds=B(1, 20, 5),
            behavior=behavior,
            state=decisions[0].state,
            now=31,
        )
    )

    assert [d.replicas for d in decisions] == [6, 1]
    assert HPA.scale_down.stabilization_window_seconds == 300  # the default is untouched


def test_fleet_states_are_kept_per_worker_and_dropped_for_removed_workers() -> None:
    bounds = B(1, 20, 5)
    first, states = scale_fleet(
        {
            "a": WorkerScaleInput(200, 1, bounds, HPA),
            "b": WorkerScaleInput(0, 1, bounds, HPA),
        },
        {},
        now=0,
    )
    second, states = scale_fleet(
        {"a": WorkerScaleInput(200, first["a"].replicas, bounds, HPA)}, states, now=5
    )

    assert (first["a"].replicas, first["b"].replicas) == (5, 1)
    assert second["a"].replicas == 5  # rate limit remembered across calls
    assert set(states) == {"a"}
    with pytest.raises(TypeError):
        states["c"] = ScalingState()  # type: ignore[index]


@pytest.mark.parametrize(
    ("bounds", "current", "backlog"),
    [(B(5, 2, 1), 3, 0), (B(1, 2, 0), 1, 0), (B(1, 2, 1), -1, 0), (B(1, 2, 1), 1, -3)],
    ids=["min above max", "zero target", "negative current", "negative backlog"],
)
def test_invalid_inputs_are_rejected(bounds: ReplicaBounds, current: int, backlog: int) -> None:
    with pytest.raises(ValueError, match=r"must not be negative|minReplicas|must be positive"):
        desired_replicas(
            backlog=backlog,
            current=current,
            bounds=bounds,
            behavior=HPA,
            state=ScalingState(),
            now=0,
        )


@st.composite
def histories(draw: st.DrawFn) -> tuple[ReplicaBounds, int, list[tuple[float, int]]]:
    lo = draw(st.integers(0, 10))
    hi = draw(st.integers(max(lo, 1), 50))
    target = draw(st.integers(1, 20))
    start = draw(st.integers(0, 60))
    gaps = draw(st.lists(st.floats(0.5, 400), min_size=1, max_size=25))
    backlogs = draw(st.lists(st.integers(0, 2000), min_size=len(gaps), max_size=len(gaps)))
    times, now = [], 0.0
    for gap in gaps:
        now += gap
        times.append(now)
    return B(lo, hi, target), start, list(zip(times, backlogs, strict=True))


@given(histories())
def test_replicas_stay_in_bounds_never_overshoot_and_respect_the_scale_up_policy(
    case: tuple[ReplicaBounds, int, list[tuple[float, int]]],
) -> None:
    bounds, current, steps = case
    state = ScalingState()
    for now, backlog in steps:
        decision = desired_replicas(
            backlog=backlog, current=current, bounds=bounds, behavior=HPA, state=state, now=now
        )
        assert bounds.min_replicas <= decision.replicas <= bounds.max_replicas
        # Moves toward the metric's recommendation, never past it.
        if decision.replicas > current:
            assert decision.replicas <= decision.recommendation
        if decision.replicas < current:
            assert decision.replicas >= decision.recommendation
        # With no change in the last period, one step is at most max(double, +4).
        recent = [e for e in state.scale_events if e.at > now - 15]
        if not recent and bounds.min_replicas <= current <= bounds.max_replicas:
            assert decision.replicas <= max(2 * current, current + 4)
        current, state = decision.replicas, decision.state
