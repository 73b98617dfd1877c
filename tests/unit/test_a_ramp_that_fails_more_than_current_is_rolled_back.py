"""Failure-rate rollback (``rollout.failureRate``): while a version ramps, each workflow
type's failure rate on it (failed, timed out or terminated, of those closed in the
window) is compared with the Current version's. Over the margin, with at least the
minimum sample, the ramp is removed in the same step that records why on the version in
Temporal; from then on the recorded reason keeps the rollout stopped (no ramp again, no
"rollback to a recent version" promotion), whatever a restarted daemon observes.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.unit.test_rollout_planner_routes_by_strategy import (
    DEP,
    NOW,
    TOKEN,
    TQ,
    S,
    deps,
    routing,
)
from twc.rollout import (
    FailureRatePolicy,
    Phase,
    RolloutPlan,
    RolloutPolicy,
    RoutingKind,
    StepPolicy,
    Strategy,
    plan_rollout,
    rollout_in_words,
)

RULE = FailureRatePolicy(margin_percent=20, min_sample=10, window_seconds=600)
POLICY = RolloutPolicy(Strategy.PROGRESSIVE, steps=(StepPolicy(50, 3600),), failure_rate=RULE)
RAMPING = routing(
    ramping="v2",
    pct=50,
    changed=NOW - 60,
    v1=(S.CURRENT, None),
    v2=(S.RAMPING, None),
)


def _plan(
    failures: Mapping[str, Mapping[str, tuple[int, int]]], rolled_back: str | None = None
) -> RolloutPlan:
    return plan_rollout(
        POLICY,
        target="v2",
        routing=RAMPING,
        deployments=deps("v1", "v2"),
        gates={},
        task_queues=[TQ],
        deployment_name=DEP,
        now=NOW,
        failures=failures,
        rolled_back=rolled_back,
    )


@pytest.mark.parametrize(
    ("target", "current", "rolled_back"),
    [
        ({"Order": (10, 5)}, {"Order": (40, 4)}, True),  # 50 % against 10 %: 40 points over
        ({"Order": (10, 3)}, {"Order": (40, 4)}, False),  # 30 % against 10 %: within 20
        ({"Order": (9, 9)}, {"Order": (40, 0)}, False),  # every one failed, but only 9
        ({"Order": (10, 3)}, {}, True),  # Current ran none: 30 % against 0 %
        ({"Ship": (10, 0), "Order": (12, 12)}, {"Ship": (5, 0)}, True),  # per workflow type
        ({}, {"Order": (40, 40)}, False),  # nothing closed on the new version yet
    ],
)
def test_a_ramp_is_rolled_back_only_over_the_margin_with_enough_runs(
    target: dict[str, tuple[int, int]],
    current: dict[str, tuple[int, int]],
    rolled_back: bool,
) -> None:
    plan = _plan({"v2": target, "v1": current})
    if not rolled_back:
        assert (plan.reason, plan.rolled_back) == ("Ramping", None), plan.message
        return
    assert (plan.reason, plan.phase) == ("RolledBack", Phase.BLOCKED)
    assert plan.routing is not None
    assert (plan.routing.kind, plan.routing.build_id) == (RoutingKind.CLEAR_RAMP, "v2")
    assert plan.routing.conflict_token == TOKEN
    assert plan.rolled_back is not None
    assert "new executions go back to v1" in plan.message


def test_the_verdict_names_the_type_and_the_figures() -> None:
    plan = _plan({"v2": {"Order": (10, 5)}, "v1": {"Order": (40, 4)}})
    assert plan.rolled_back == (
        "workflow type Order failed 5 of 10 times (50%) in 10 m, the Current version 4 of 40 "
        "(10%): over the margin of 20 points"
    )


def test_a_recorded_rollback_keeps_the_rollout_stopped_without_a_new_record() -> None:
    ramp_left = _plan({}, rolled_back="recorded")
    assert (ramp_left.reason, ramp_left.rolled_back) == ("RolledBack", None)
    assert ramp_left.routing is not None
    assert ramp_left.routing.kind is RoutingKind.CLEAR_RAMP
    # Its ramp gone (deactivated a minute ago), it is never promoted as a recent rollback.
    after = plan_rollout(
        POLICY,
        target="v2",
        routing=routing(v1=(S.CURRENT, None), v2=(S.DRAINING, None, NOW - 30)),
        deployments=deps("v1", "v2"),
        gates={},
        task_queues=[TQ],
        deployment_name=DEP,
        now=NOW,
        rolled_back="recorded",
    )
    assert (after.reason, after.phase, after.routing) == ("RolledBack", Phase.BLOCKED, None)


def test_the_preview_names_the_rule() -> None:
    assert rollout_in_words(DEP, POLICY, "v2", ["v1"]).startswith(
        "new version v2 of apps/orders; Progressive 50 % (1 h) → Current, rolled back once a "
        "workflow type fails 20 points more often than on Current (of 10 or more closed in "
        "10 m); "
    )


def test_with_no_current_version_new_executions_go_back_to_the_unversioned_workers() -> None:
    unversioned = routing(None, "v2", 50, NOW - 60, v2=(S.RAMPING, None))
    plan = plan_rollout(
        POLICY,
        target="v2",
        routing=unversioned,
        deployments=deps("v2"),
        gates={},
        task_queues=[TQ],
        deployment_name=DEP,
        now=NOW,
        failures={"v2": {"Order": (10, 10)}},
    )
    assert plan.reason == "RolledBack", plan.message
    assert "new executions go back to the unversioned workers" in plan.message
