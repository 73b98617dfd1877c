"""A Draining version found at 0 replicas is scaled back (the official controller's #587).

Its pinned workflows need pollers to drain: twc writes the worker's count, or 1 where a
resource template's autoscaler owns the count (an HPA does not scale from 0). A version
the plan scales to 0 (sunset), one not Draining, one still running, a worker scaled to 0
as a whole and an autoscaled worker's versions are left alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_versioned_worker_declares_a_deployment_per_version import NEW, _worker
from twc.reconcile.observe import RolloutFacts
from twc.reconcile.plan import revived_versions
from twc.rollout import (
    Phase,
    RolloutObservation,
    RolloutPlan,
    RolloutPolicy,
    Routing,
    Strategy,
    TemporalVersion,
    VersionDeployment,
    VersionPlan,
    VersionStatus,
)

HPA = {
    "name": "hpa",
    "template": {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "spec": {"scaleTargetRef": {}, "minReplicas": 2, "maxReplicas": 3},
    },
}
D, C = VersionStatus.DRAINING, VersionStatus.CURRENT


def _worker_with(**fields: Any) -> Any:
    doc = {**NEW, "workers": [{**NEW["workers"][0], **fields}]}
    return _worker(doc)


def _seen(key: str, live: int, routing: Routing | None) -> RolloutObservation:
    """Worker ``key`` running version ``old`` at ``live`` replicas, Current ``new``."""
    return RolloutObservation(
        worker=key,
        target="new",
        policy=RolloutPolicy(strategy=Strategy.ALL_AT_ONCE),
        deployment_name=key,
        task_queue="orders",
        deployments={"old": VersionDeployment("old", "orders-old", replicas=live)},
        routing=routing,
    )


CASES = [
    # (what, worker fields, status, live replicas, planned replicas, expected write)
    ("draining at 0: the worker's count", {}, D, 0, None, 2),
    ("draining at 0 under an autoscaler template: 1", {"resourceTemplates": [HPA]}, D, 0, None, 1),
    ("draining and running: left", {}, D, 2, None, None),
    ("current at 0: not draining, left", {}, C, 0, None, None),
    ("sunset scales it to 0: left", {}, D, 0, 0, None),
    ("a worker of 0 replicas: left", {"replicas": 0}, D, 0, None, None),
    (
        "a worker of 0 replicas under an autoscaler template: left",
        {"replicas": 0, "resourceTemplates": [HPA]},
        D,
        0,
        None,
        None,
    ),
    (
        "autoscaled: the autoscaler's",
        {"autoscaling": {"minReplicas": 1, "maxReplicas": 3, "targetBacklogPerReplica": 5}},
        D,
        0,
        None,
        None,
    ),
]


@pytest.mark.parametrize(
    ("fields", "status", "live", "planned", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_draining_version_at_zero_is_scaled_back(
    fields: dict[str, Any],
    status: VersionStatus,
    live: int,
    planned: int | None,
    expected: int | None,
) -> None:
    worker = _worker_with(**fields)
    key = worker.stack_key
    routing = Routing(b"", current="new", versions={"old": TemporalVersion("old", status)})
    seen = _seen(key, live, routing)
    plan = RolloutPlan(
        target="new",
        phase=Phase.COMPLETE,
        reason="RolloutComplete",
        message="",
        versions={"new": VersionPlan("new", None), "old": VersionPlan("old", planned)},
    )

    writes = revived_versions({key: plan}, RolloutFacts(observed={key: seen}), {key: worker})

    assert writes == ({} if expected is None else {"apps/orders-old": expected})


def test_without_routing_nothing_is_revived() -> None:
    worker = _worker_with()
    key = worker.stack_key
    seen = _seen(key, 0, None)
    plan = RolloutPlan("new", Phase.COMPLETE, "x", "", versions={"old": VersionPlan("old", None)})
    assert revived_versions({key: plan}, RolloutFacts(observed={key: seen}), {key: worker}) == {}
