"""The rollout plan as the preview says it: versions, steps, pauses, sunset, in words."""

from __future__ import annotations

import pytest

from twc.rollout import (
    GatePolicy,
    RolloutPolicy,
    StepPolicy,
    Strategy,
    SunsetPolicy,
    duration_words,
    rollback_in_words,
    rollout_in_words,
)

PROGRESSIVE = RolloutPolicy(
    Strategy.PROGRESSIVE, steps=(StepPolicy(1, 600), StepPolicy(5, 900)), sunset=SunsetPolicy()
)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (30, "30 s"),
        (600, "10 m"),
        (3600, "1 h"),
        (5400, "1 h 30 m"),
        (86400, "24 h"),
        (7 * 86400, "7 d"),
        (0, "0 s"),
    ],
)
def test_durations_read_as_people_say_them(seconds: float, words: str) -> None:
    assert duration_words(seconds) == words


def test_a_progressive_rollout_in_words() -> None:
    assert rollout_in_words("apps/orders", PROGRESSIVE, "1.5.0-ab12", ["1.4.2-cd34"]) == (
        "new version 1.5.0-ab12 of apps/orders; Progressive 1 % (10 m) → 5 % (15 m) → "
        "Current; 1.4.2-cd34 drains, scales to 0 after 1 h, is deleted after 24 h"
    )


def test_an_autoscaled_draining_floor_is_named_in_words() -> None:
    policy = RolloutPolicy(Strategy.ALL_AT_ONCE, draining_replicas=(1, 2))
    assert rollout_in_words("apps/orders", policy, "2.0-ab12", ["1.0-cd34"]) == (
        "new version 2.0-ab12 of apps/orders; AllAtOnce: Current once it polls; 1.0-cd34 "
        "drains (keeping 1 to 2 replicas until Drained), scales to 0 after 1 h, "
        "is deleted after 24 h"
    )


def test_gates_are_named_where_they_run() -> None:
    policy = RolloutPolicy(
        Strategy.PROGRESSIVE,
        steps=(StepPolicy(25, 30, gate=GatePolicy("Check")),),
        gate=GatePolicy("Smoke"),
        sunset=SunsetPolicy(30, 60),
    )
    text = rollout_in_words("apps/orders", policy, "2", ["1", "0"])
    assert text == (
        "new version 2 of apps/orders; gate `Smoke` on it first, then Progressive "
        "25 % (30 s, gate `Check`) → Current; 1 and 0 drain, scale to 0 after 30 s, "
        "are deleted after 1 m"
    )


def test_all_at_once_manual_first_version_and_rollback() -> None:
    all_at_once = RolloutPolicy(Strategy.ALL_AT_ONCE)
    assert "AllAtOnce: Current once it polls" in rollout_in_words("a/w", all_at_once, "2", ["1"])
    manual = rollout_in_words("a/w", RolloutPolicy(Strategy.MANUAL), "2", ["1"])
    assert "Manual: twc does not route it" in manual
    assert "1 stays until then" in manual
    assert (
        rollout_in_words("a/w", all_at_once, "1") == "first version 1 of a/w; Current once it polls"
    )
    assert rollback_in_words("a/w", all_at_once, "1", ["2"]) == (
        "a/w rolls back to version 1 (its Deployment still exists): Current again as soon as "
        "it polls; 2 drains, scales to 0 after 1 h, is deleted after 24 h"
    )


def test_the_policy_record_round_trips() -> None:
    policy = RolloutPolicy(
        Strategy.PROGRESSIVE,
        steps=(StepPolicy(25, 30, gate=GatePolicy("Check")),),
        gate=GatePolicy("Smoke"),
        sunset=SunsetPolicy(30, 60),
    )
    assert RolloutPolicy.from_json(policy.to_json()) == policy
    with pytest.raises(ValueError, match="not a rollout policy"):
        RolloutPolicy.from_json({"steps": []})
