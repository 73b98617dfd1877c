"""A versioned worker's preview says the rollout plan in words and time.

From a real engine's preview of an image change (recorded by
``tests.e2e.record_preview_events``): a new version next to the running one, its steps
and pauses, and the old version's sunset; no pod restarts, since running pods stay. And
from the old/new state of version Deployments: a rollback and a sunset.
"""

from __future__ import annotations

from tests.unit._preview import report
from twc.preview import GroupKind, ReasonCode
from twc.preview._build import VersionState, rollout_reasons
from twc.rollout import RolloutPolicy, StepPolicy, Strategy, SunsetPolicy


def test_an_image_change_of_a_versioned_worker_reads_as_its_rollout_plan() -> None:
    found = report("real_versioned_image_change")
    (worker,) = [g for g in found.groups if g.kind is GroupKind.WORKER]
    assert worker.name == "apps/orders"
    first = worker.reasons[0]
    assert first.code is ReasonCode.NEW_VERSION
    assert first.message.startswith("new version 1.5.0-")
    assert first.message.endswith(
        "of apps/orders; Progressive 1 % (10 m) → 5 % (15 m) → Current; "
        "1.4.2-cdd84580 drains, scales to 0 after 1 h, is deleted after 24 h"
    )
    codes = [r.code for r in worker.reasons]
    assert ReasonCode.IMAGE_CHANGED in codes
    # A new version is new pods next to the old ones: nothing restarts.
    assert not worker.restarts
    assert found.summary.restarting_workers == []


POLICY = RolloutPolicy(
    Strategy.ALL_AT_ONCE, steps=(StepPolicy(5, 60),), sunset=SunsetPolicy(600, 3600)
)


def state(
    build: str, op: str, was: bool, now: bool, old: int | None = 1, new: int | None = 1
) -> VersionState:
    return VersionState(build, op, was, now, old, new, POLICY)


def test_going_back_to_a_running_version_reads_as_a_rollback() -> None:
    reasons = rollout_reasons(
        "apps/orders", [state("v1", "update", False, True), state("v2", "update", True, False)]
    )
    assert reasons == [
        (
            "VersionRollback",
            "apps/orders rolls back to version v1 (its Deployment still exists): Current again "
            "as soon as it polls; v2 drains, scales to 0 after 10 m, is deleted after 1 h",
        )
    ]


def test_a_drained_version_scaled_down_and_one_deleted_read_as_sunset() -> None:
    reasons = rollout_reasons(
        "apps/orders",
        [
            state("v3", "same", True, True),
            state("v2", "update", False, False, old=2, new=0),
            state("v1", "delete", False, False, old=0, new=None),
        ],
    )
    assert reasons == [
        ("VersionSunset", "version v2 is scaled to 0 (drained, replicas 2 → 0)"),
        ("VersionSunset", "version v1 is deleted (drained, sunset)"),
    ]
