"""An autoscaled versioned worker scales each version within the bounds of the status
Temporal reports for it (``autoscaling.byStatus``): a Draining version keeps its floor
while its backlog is empty and is capped by its ceiling, a Drained one falls back to the
worker's own bounds (here 0), and a target not yet routed to keeps one replica to poll
even where the bounds allow 0. The version's status record names why
(``scalingReason``, ``DrainingFloor`` for a held floor).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_versioned_worker_declares_a_deployment_per_version import NEW, _worker
from twc.reconcile.autoscale import scale_fleet
from twc.reconcile.observe import RolloutFacts
from twc.reconcile.plan import plan_versions, version_key, version_scale_inputs
from twc.reconcile.settings import DaemonSettings
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
    policy_of,
)

AUTOSCALING = {
    "minReplicas": 0,
    "maxReplicas": 4,
    "targetBacklogPerReplica": 5,
    "scaleDownStabilizationSeconds": 0,
    "byStatus": {"current": {"minReplicas": 1}, "draining": {"minReplicas": 1, "maxReplicas": 2}},
}
S = VersionStatus


def _decide(status: VersionStatus | None, backlog: int, *, target: bool = False) -> Any:
    worker = _worker({**NEW, "workers": [{**NEW["workers"][0], "autoscaling": AUTOSCALING}]})
    key = worker.stack_key
    build = "new" if target else "old"
    routing = Routing(b"", versions={build: TemporalVersion(build, status)}) if status else None
    seen = RolloutObservation(
        worker=key,
        target="new",
        policy=policy_of(worker) or RolloutPolicy(Strategy.ALL_AT_ONCE),
        deployment_name=key,
        task_queue="orders",
        deployments={build: VersionDeployment(build, f"orders-{build}", replicas=1)},
        routing=routing,
        backlogs={build: backlog},
    )
    plan = RolloutPlan("new", Phase.COMPLETE, "x", "", versions={build: VersionPlan(build, None)})
    facts = RolloutFacts(observed={key: seen})
    inputs = version_scale_inputs({key: plan}, facts, {key: worker}, DaemonSettings())
    decisions, _ = scale_fleet(inputs, {}, now=1000.0)
    planned = plan_versions({key: plan}, facts, decisions)
    status_record: Any = planned.versions[key].status
    entries = [status_record.get("targetVersion"), *status_record.get("deprecatedVersions", ())]
    (entry,) = [e for e in entries if e and e["buildID"] == build]
    return decisions[version_key(key, build)].replicas, entry["scalingReason"]


@pytest.mark.parametrize(
    ("status", "backlog", "replicas", "reason"),
    [
        (S.DRAINING, 0, 1, "DrainingFloor"),
        (S.DRAINING, 100, 2, "DesiredWithinRange"),
        (S.DRAINED, 0, 0, "DesiredWithinRange"),
        (S.CURRENT, 0, 1, "DesiredWithinRange"),
        (S.CURRENT, 100, 4, "DesiredWithinRange"),
    ],
)
def test_each_version_scales_within_its_status_bounds(
    status: VersionStatus, backlog: int, replicas: int, reason: str
) -> None:
    assert _decide(status, backlog) == (replicas, reason)


@pytest.mark.parametrize("status", [None, S.INACTIVE])
def test_a_target_not_yet_routed_keeps_one_replica_to_poll(status: VersionStatus | None) -> None:
    assert _decide(status, 0, target=True)[0] == 1
