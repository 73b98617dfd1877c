"""Sunset: which versions' Deployments stay, with how many replicas, and which go.

A version Temporal reports Drained is scaled to 0 after ``scaledownDelay`` and deleted
after ``deleteDelay`` (both counted from when it drained); a Draining version (pinned
workflows still run) keeps its workers; the target, Current and Ramping versions always
stay; versions superseded before they had any traffic go; Manual keeps them for the
operator. Table-driven, with the time as an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from twc.rollout import (
    RolloutPolicy,
    RolloutSettings,
    Routing,
    Strategy,
    SunsetPolicy,
    TemporalVersion,
    VersionDeployment,
    VersionStatus,
    plan_rollout,
)

NOW = 100_000.0
S = VersionStatus
SUNSET = SunsetPolicy(scaledown_seconds=3600, delete_seconds=86400)
ALL = RolloutPolicy(Strategy.ALL_AT_ONCE, sunset=SUNSET)
MANUAL = RolloutPolicy(Strategy.MANUAL, sunset=SUNSET)


def routing(current: str, **versions: tuple[VersionStatus, float | None]) -> Routing:
    return Routing(
        conflict_token=b"t",
        current=current,
        versions={b: TemporalVersion(b, st, drained_since=d) for b, (st, d) in versions.items()},
    )


def dep(build: str, replicas: int = 2) -> VersionDeployment:
    return VersionDeployment(build, f"orders-{build}", replicas, replicas)


@dataclass(frozen=True)
class Case:
    name: str
    policy: RolloutPolicy
    routing: Routing | None
    deployments: tuple[VersionDeployment, ...]
    versions: Mapping[str, int | None]
    deleted: tuple[str, ...] = ()
    forget: tuple[str, ...] = ()
    next_at: float | None = None


CASES = [
    Case(
        "a draining version keeps its workers: pinned workflows still run",
        ALL,
        routing("v2", v1=(S.DRAINING, None), v2=(S.CURRENT, None)),
        (dep("v1"), dep("v2")),
        {"v1": None, "v2": None},
    ),
    Case(
        "drained, within scaledownDelay: it keeps its workers until then",
        ALL,
        routing("v2", v1=(S.DRAINED, NOW - 60), v2=(S.CURRENT, None)),
        (dep("v1"), dep("v2")),
        {"v1": None, "v2": None},
        next_at=NOW - 60 + 3600,
    ),
    Case(
        "drained for scaledownDelay: scaled to 0, deletion due at deleteDelay",
        ALL,
        routing("v2", v1=(S.DRAINED, NOW - 3601), v2=(S.CURRENT, None)),
        (dep("v1"), dep("v2")),
        {"v1": 0, "v2": None},
        next_at=NOW - 3601 + 86400,
    ),
    Case(
        "drained for deleteDelay and at 0 replicas: the Deployment goes",
        ALL,
        routing("v2", v1=(S.DRAINED, NOW - 86401), v2=(S.CURRENT, None)),
        (dep("v1", replicas=0), dep("v2")),
        {"v2": None},
        deleted=("v1",),
    ),
    Case(
        "drained for deleteDelay but still running pods: scaled to 0 first",
        ALL,
        routing("v2", v1=(S.DRAINED, NOW - 86401), v2=(S.CURRENT, None)),
        (dep("v1"), dep("v2")),
        {"v1": 0, "v2": None},
    ),
    Case(
        "the Current version stays even when it is not the target",
        ALL,
        routing("v1", v1=(S.CURRENT, None)),
        (dep("v1"),),
        {"v1": None, "v2": None},
    ),
    Case(
        "a version superseded before it had traffic goes (after scaling to 0)",
        ALL,
        routing("v1", v1=(S.CURRENT, None), v2=(S.INACTIVE, None), v3=(S.INACTIVE, None)),
        (dep("v1"), dep("v2"), dep("v3", replicas=0)),
        {"v1": None, "v2": None},
        deleted=("v3",),
        # the target is v2 here; v3 was an earlier target
    ),
    Case(
        "a version that never polled and is superseded goes",
        ALL,
        routing("v1", v1=(S.CURRENT, None)),
        (dep("v1"), dep("v9", replicas=0)),
        {"v1": None, "v2": None},
        deleted=("v9",),
    ),
    Case(
        "Manual keeps superseded versions for the operator, and still sunsets drained ones",
        MANUAL,
        routing("v1", v1=(S.CURRENT, None), v3=(S.INACTIVE, None), v0=(S.DRAINED, NOW - 3601)),
        (dep("v0"), dep("v1"), dep("v3")),
        {"v0": 0, "v1": None, "v2": None, "v3": None},
        next_at=NOW - 3601 + 86400,
    ),
    Case(
        "Temporal knows no version of the worker: nothing is deleted",
        ALL,
        None,
        (dep("v1", replicas=3),),
        {"v1": 3, "v2": None},
    ),
    Case(
        "a drained version whose Deployment is gone is forgotten in Temporal",
        ALL,
        routing("v2", v1=(S.DRAINED, NOW - 90000), v2=(S.CURRENT, None)),
        (dep("v2"),),
        {"v2": None},
        forget=("v1",),
    ),
    Case(
        "Manual forgets nothing in Temporal",
        MANUAL,
        routing("v2", v1=(S.DRAINED, NOW - 90000), v2=(S.CURRENT, None)),
        (dep("v2"),),
        {"v2": None},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_sunset_keeps_scales_and_deletes_versions(case: Case) -> None:
    plan = plan_rollout(
        case.policy,
        target="v2",
        routing=case.routing,
        deployments={d.build_id: d for d in case.deployments},
        gates={},
        task_queues=["orders"],
        deployment_name="apps/orders",
        now=NOW,
    )
    assert {b: v.replicas for b, v in plan.versions.items()} == dict(case.versions)
    assert plan.deleted == case.deleted
    assert plan.forget == case.forget
    if case.next_at is not None:
        assert plan.next_at == pytest.approx(case.next_at)


def test_a_delete_delay_shorter_than_the_scaledown_delay_waits_for_the_scaledown() -> None:
    policy = RolloutPolicy(
        Strategy.ALL_AT_ONCE, sunset=SunsetPolicy(scaledown_seconds=600, delete_seconds=60)
    )
    plan = plan_rollout(
        policy,
        target="v2",
        routing=routing("v2", v1=(S.DRAINED, NOW - 120), v2=(S.CURRENT, None)),
        deployments={"v1": dep("v1"), "v2": dep("v2")},
        gates={},
        task_queues=["orders"],
        deployment_name="apps/orders",
        now=NOW,
    )
    assert plan.versions["v1"].replicas is None
    assert not plan.deleted


def test_the_time_scale_shortens_the_sunset() -> None:
    plan = plan_rollout(
        ALL,
        target="v2",
        routing=routing("v2", v1=(S.DRAINED, NOW - 400), v2=(S.CURRENT, None)),
        deployments={"v1": dep("v1"), "v2": dep("v2")},
        gates={},
        task_queues=["orders"],
        deployment_name="apps/orders",
        now=NOW,
        settings=RolloutSettings(time_scale=0.1),
    )
    assert plan.versions["v1"].replicas == 0
