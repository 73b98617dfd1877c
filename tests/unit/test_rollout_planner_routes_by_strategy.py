"""The rollout planner: observed routing, Deployments, gates and time → the next step.

Table-driven like the official controller's planner tests: each case is what Temporal
and the cluster report at one moment, and what twc must do next (one routing change at
most, with the conflict token it was planned from; gates to start; the rollout's reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from twc.rollout import (
    GatePolicy,
    GateRun,
    GateStatus,
    Phase,
    RolloutPolicy,
    RolloutSettings,
    Routing,
    RoutingKind,
    StepPolicy,
    Strategy,
    SunsetPolicy,
    TemporalVersion,
    VersionDeployment,
    VersionStatus,
    gate_workflow_id,
    hold_versions,
    plan_rollout,
)

DEP = "apps/orders"
TQ = "orders"
TOKEN = b"token-1"
NOW = 10_000.0
S = VersionStatus


def routing(
    current: str | None = "v1",
    ramping: str | None = None,
    pct: float = 0.0,
    changed: float | None = None,
    **versions: tuple[VersionStatus, float | None] | tuple[VersionStatus, float | None, float],
) -> Routing:
    """``versions``: build → (status, drained since[, deactivated at])."""
    return Routing(
        conflict_token=TOKEN,
        current=current,
        ramping=ramping,
        ramp_percentage=pct,
        ramp_changed_at=changed,
        versions={
            b: TemporalVersion(b, v[0], drained_since=v[1], deactivated_at=off)
            for b, v in versions.items()
            for off in [v[2] if len(v) > 2 else None]
        },
    )


def deps(*builds: str, replicas: int = 1, ready: int = 1) -> dict[str, VersionDeployment]:
    return {b: VersionDeployment(b, f"orders-{b}", replicas, ready) for b in builds}


def gate_runs(*runs: tuple[str, int, GateStatus]) -> dict[str, GateRun]:
    out = {}
    for build, stage, status in runs:
        wid = gate_workflow_id(DEP, build, TQ, stage)
        out[wid] = GateRun(wid, TQ, status, "boom" if status.failed else "")
    return out


PROGRESSIVE = RolloutPolicy(
    Strategy.PROGRESSIVE,
    steps=(StepPolicy(1, 600), StepPolicy(25, 900)),
)
GATED = RolloutPolicy(
    Strategy.PROGRESSIVE,
    steps=(StepPolicy(10, 60, gate=GatePolicy("StepCheck")), StepPolicy(50, 60)),
    gate=GatePolicy("Smoke", input={"probe": True}),
)
ALL = RolloutPolicy(Strategy.ALL_AT_ONCE)
ALL_GATED = RolloutPolicy(Strategy.ALL_AT_ONCE, gate=GatePolicy("Smoke"))
MANUAL = RolloutPolicy(Strategy.MANUAL)


@dataclass(frozen=True)
class Case:
    name: str
    policy: RolloutPolicy
    routing: Routing | None
    deployments: Mapping[str, VersionDeployment]
    reason: str
    phase: Phase = Phase.PROGRESSING
    change: tuple[RoutingKind, str, float] | None = None
    gates: tuple[tuple[str, int], ...] = ()
    runs: Mapping[str, GateRun] = field(default_factory=dict)
    target: str = "v2"
    now: float = NOW
    next_at: float | None = None


CASES = [
    Case(
        "a version that has not polled waits for pollers",
        ALL,
        routing(v1=(S.CURRENT, None)),
        deps("v1", "v2"),
        "WaitingForPollers",
    ),
    Case(
        "a registered version whose Deployment is not ready waits",
        ALL,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        {**deps("v1"), **deps("v2", ready=0)},
        "WaitingForPollers",
    ),
    Case(
        "nothing registered yet: Temporal does not know the deployment",
        ALL,
        None,
        deps("v2"),
        "WaitingForPollers",
    ),
    Case(
        "the first version becomes Current at once, whatever the strategy",
        PROGRESSIVE,
        routing(current=None, v2=(S.INACTIVE, None)),
        deps("v2"),
        "Promoting",
        change=(RoutingKind.SET_CURRENT, "v2", 0),
    ),
    Case(
        "AllAtOnce: Current once it polls",
        ALL,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "Promoting",
        change=(RoutingKind.SET_CURRENT, "v2", 0),
    ),
    Case(
        "AllAtOnce with a gate: the gate is started first",
        ALL_GATED,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "WaitingForGate",
        gates=(("v2", 0),),
    ),
    Case(
        "AllAtOnce with a running gate waits for it",
        ALL_GATED,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "WaitingForGate",
        runs=gate_runs(("v2", 0, GateStatus.RUNNING)),
    ),
    Case(
        "AllAtOnce with a completed gate promotes",
        ALL_GATED,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "Promoting",
        change=(RoutingKind.SET_CURRENT, "v2", 0),
        runs=gate_runs(("v2", 0, GateStatus.COMPLETED)),
    ),
    Case(
        "a failed gate stops the rollout, with no traffic to undo",
        ALL_GATED,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "GateFailed",
        phase=Phase.BLOCKED,
        runs=gate_runs(("v2", 0, GateStatus.FAILED)),
    ),
    Case(
        "Progressive: the first step's ramp",
        PROGRESSIVE,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "Ramping",
        change=(RoutingKind.SET_RAMPING, "v2", 1),
    ),
    Case(
        "Progressive: within the pause nothing moves; due when it ends",
        PROGRESSIVE,
        routing(
            ramping="v2",
            pct=1,
            changed=NOW - 100,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "Ramping",
        next_at=NOW - 100 + 600,
    ),
    Case(
        "Progressive: the pause passed, the next step",
        PROGRESSIVE,
        routing(
            ramping="v2",
            pct=1,
            changed=NOW - 601,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "Ramping",
        change=(RoutingKind.SET_RAMPING, "v2", 25),
    ),
    Case(
        "Progressive: the last pause passed, Current",
        PROGRESSIVE,
        routing(
            ramping="v2",
            pct=25,
            changed=NOW - 901,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "Promoting",
        change=(RoutingKind.SET_CURRENT, "v2", 0),
    ),
    Case(
        "Progressive: a ramp between steps (set by hand) resumes from the step below",
        PROGRESSIVE,
        routing(
            ramping="v2",
            pct=12,
            changed=NOW - 5000,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "Ramping",
        change=(RoutingKind.SET_RAMPING, "v2", 1),
    ),
    Case(
        "Progressive: another version's ramp is replaced by the target's first step",
        PROGRESSIVE,
        routing(
            ramping="v3",
            pct=25,
            changed=NOW - 5000,
            v1=(S.CURRENT, None),
            v2=(S.INACTIVE, None),
            v3=(S.RAMPING, None),
        ),
        deps("v1", "v2", "v3"),
        "Ramping",
        change=(RoutingKind.SET_RAMPING, "v2", 1),
    ),
    Case(
        "a gate per step: the step's gate starts once its ramp is set",
        GATED,
        routing(
            ramping="v2",
            pct=10,
            changed=NOW - 120,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "WaitingForGate",
        gates=(("v2", 1),),
        runs=gate_runs(("v2", 0, GateStatus.COMPLETED)),
    ),
    Case(
        "a gate per step: the pause passed but the step's gate runs: the step holds",
        GATED,
        routing(
            ramping="v2",
            pct=10,
            changed=NOW - 120,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "WaitingForGate",
        runs=gate_runs(("v2", 0, GateStatus.COMPLETED), ("v2", 1, GateStatus.RUNNING)),
    ),
    Case(
        "a gate per step: completed and the pause passed, the next step",
        GATED,
        routing(
            ramping="v2",
            pct=10,
            changed=NOW - 120,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "Ramping",
        change=(RoutingKind.SET_RAMPING, "v2", 50),
        runs=gate_runs(("v2", 0, GateStatus.COMPLETED), ("v2", 1, GateStatus.COMPLETED)),
    ),
    Case(
        "a failed step gate stops the rollout and sends new executions back to Current",
        GATED,
        routing(
            ramping="v2",
            pct=10,
            changed=NOW - 120,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "GateFailed",
        phase=Phase.BLOCKED,
        change=(RoutingKind.CLEAR_RAMP, "v2", 0),
        runs=gate_runs(("v2", 0, GateStatus.COMPLETED), ("v2", 1, GateStatus.TIMED_OUT)),
    ),
    Case(
        "after a failed gate the rollout stays stopped (the version drains, no re-route)",
        GATED,
        routing(
            v1=(S.CURRENT, None),
            v2=(S.DRAINING, None),
        ),
        deps("v1", "v2"),
        "GateFailed",
        phase=Phase.BLOCKED,
        runs=gate_runs(("v2", 0, GateStatus.COMPLETED), ("v2", 1, GateStatus.FAILED)),
    ),
    Case(
        "rollback to a version Current within the hour: Current at once, no steps or gates",
        GATED,
        routing(
            current="v2",
            v1=(S.DRAINED, NOW - 50, NOW - 3600),
            v2=(S.CURRENT, None),
        ),
        deps("v1", "v2"),
        "RollingBack",
        change=(RoutingKind.SET_CURRENT, "v1", 0),
        target="v1",
    ),
    Case(
        "a version Current more than an hour ago rolls out again by the strategy",
        ALL,
        routing(
            current="v2",
            v1=(S.DRAINED, NOW - 50, NOW - 3601),
            v2=(S.CURRENT, None),
        ),
        deps("v1", "v2"),
        "Promoting",
        change=(RoutingKind.SET_CURRENT, "v1", 0),
        target="v1",
    ),
    Case(
        "... and with a gate, it runs on it first",
        GATED,
        routing(
            current="v2",
            v1=(S.DRAINED, NOW - 50, NOW - 3601),
            v2=(S.CURRENT, None),
        ),
        deps("v1", "v2"),
        "WaitingForGate",
        gates=(("v1", 0),),
        target="v1",
    ),
    Case(
        "rollback to a version scaled to 0 waits for its pollers first",
        ALL,
        routing(current="v2", v1=(S.DRAINED, NOW - 9000), v2=(S.CURRENT, None)),
        {**deps("v2"), **deps("v1", replicas=0, ready=0)},
        "WaitingForPollers",
        target="v1",
    ),
    Case(
        "the target is Current: done",
        ALL,
        routing(current="v2", v2=(S.CURRENT, None)),
        deps("v2"),
        "RolloutComplete",
        phase=Phase.COMPLETE,
    ),
    Case(
        "the target is Current and a ramp is left over: remove it",
        PROGRESSIVE,
        routing(
            current="v2",
            ramping="v3",
            pct=5,
            v2=(S.CURRENT, None),
            v3=(S.RAMPING, None),
        ),
        deps("v2", "v3"),
        "RolloutComplete",
        change=(RoutingKind.CLEAR_RAMP, "v3", 0),
    ),
    Case(
        "Manual never routes, even when it could",
        MANUAL,
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "WaitingForPromotion",
        phase=Phase.MANUAL,
    ),
    Case(
        "Manual reports an operator's ramp",
        MANUAL,
        routing(
            ramping="v2",
            pct=30,
            changed=NOW - 1,
            v1=(S.CURRENT, None),
            v2=(S.RAMPING, None),
        ),
        deps("v1", "v2"),
        "Ramping",
        phase=Phase.MANUAL,
    ),
    Case(
        "Manual with a gate starts no gate either",
        RolloutPolicy(Strategy.MANUAL, gate=GatePolicy("Smoke")),
        routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deps("v1", "v2"),
        "WaitingForPromotion",
        phase=Phase.MANUAL,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_planner_takes_the_next_step(case: Case) -> None:
    plan = plan_rollout(
        case.policy,
        target=case.target,
        routing=case.routing,
        deployments=case.deployments,
        gates=case.runs,
        task_queues=[TQ],
        deployment_name=DEP,
        now=case.now,
    )
    assert (plan.reason, plan.phase) == (case.reason, case.phase), plan.message
    if case.change is None:
        assert plan.routing is None, plan.routing
    else:
        assert plan.routing is not None, plan.message
        kind, build, pct = case.change
        assert (plan.routing.kind, plan.routing.build_id, plan.routing.percentage) == (
            kind,
            build,
            pct,
        )
        assert plan.routing.conflict_token == TOKEN
    assert [(g.build_id, g.stage) for g in plan.gates] == list(case.gates)
    for start in plan.gates:
        assert start.workflow_id == gate_workflow_id(DEP, start.build_id, TQ, start.stage)
        assert start.task_queue == TQ
    if case.next_at is not None:
        assert plan.next_at == pytest.approx(case.next_at)
    assert case.target in plan.versions


def test_the_time_scale_shortens_every_pause() -> None:
    route = routing(
        ramping="v2",
        pct=1,
        changed=NOW - 61,
        v1=(S.CURRENT, None),
        v2=(S.RAMPING, None),
    )
    real = plan_rollout(
        PROGRESSIVE,
        target="v2",
        routing=route,
        deployments=deps("v1", "v2"),
        gates={},
        task_queues=[TQ],
        deployment_name=DEP,
        now=NOW,
    )
    fast = plan_rollout(
        PROGRESSIVE,
        target="v2",
        routing=route,
        deployments=deps("v1", "v2"),
        gates={},
        task_queues=[TQ],
        deployment_name=DEP,
        now=NOW,
        settings=RolloutSettings(time_scale=0.1),
    )
    assert real.routing is None
    assert fast.routing is not None
    assert fast.routing.percentage == 25


def test_a_gate_starts_on_every_task_queue_of_the_version_with_its_input() -> None:
    plan = plan_rollout(
        GATED,
        target="v2",
        routing=routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deployments=deps("v1", "v2"),
        gates={},
        task_queues=["orders", "orders-priority"],
        deployment_name=DEP,
        now=NOW,
    )
    assert sorted(g.task_queue for g in plan.gates) == ["orders", "orders-priority"]
    assert all(g.gate.input == {"probe": True} and g.stage == 0 for g in plan.gates)


def test_without_temporal_every_version_is_held_as_it_runs() -> None:
    plan = hold_versions(
        "v3", deps("v1", "v2", replicas=2), "TemporalUnavailable", "Temporal is down"
    )
    assert plan.phase is Phase.UNKNOWN
    assert plan.routing is None
    assert not plan.deleted
    assert {b: v.replicas for b, v in plan.versions.items()} == {"v1": 2, "v2": 2, "v3": None}


def test_a_progressive_spec_without_steps_never_promotes() -> None:
    plan = plan_rollout(
        RolloutPolicy(Strategy.PROGRESSIVE, sunset=SunsetPolicy()),
        target="v2",
        routing=routing(v1=(S.CURRENT, None), v2=(S.INACTIVE, None)),
        deployments=deps("v1", "v2"),
        gates={},
        task_queues=[TQ],
        deployment_name=DEP,
        now=NOW,
    )
    assert plan.routing is None
    assert plan.phase is Phase.BLOCKED
