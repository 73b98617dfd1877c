"""The daemon's plan for versioned workers: versions in the program's inputs, each
version autoscaled on its own backlog, and ``up`` only when the versions change.

``make_plan`` is pure: the observation, the versioned workers' facts (what the cluster
and Temporal reported) and the time go in; the plan holds the versions the program
declares, the routing to carry out, and the decision whether to run ``up``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from twc.connections import default_registry
from twc.errors import TemporaryError
from twc.reconcile.observe import Observation, RolloutFacts, WorkerFacts
from twc.reconcile.plan import desired_from, make_plan, version_key
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import LoopState, ReconcileAction
from twc.rollout import (
    RolloutObservation,
    Routing,
    RoutingKind,
    TemporalVersion,
    VersionDeployment,
    VersionStatus,
    build_id_of,
    deployment_name_of,
    policy_of,
    version_spec,
)
from twc.spec import load_fleet

NOW = 1_000_000.0


def doc(image: str = "registry.example/worker:2.0", **worker: Any) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "clusterObjects": False,
        "clusterConnections": [{"name": "local", "hostPort": "127.0.0.1:7233"}],
        "defaults": {
            "connectionRef": {
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": "local",
                }
            }
        },
        "workers": [
            {
                "name": "orders",
                "namespace": "apps",
                "taskQueueName": "orders",
                "image": image,
                "rollout": {"strategy": "AllAtOnce"},
                "sunset": {"scaledownDelay": "1m", "deleteDelay": "2m"},
                **worker,
            },
            {"name": "plain", "namespace": "apps", "taskQueueName": "plain", "image": image},
        ],
    }


def worker_of(fleet: dict[str, Any]) -> Any:
    return load_fleet(fleet, "t.yaml").resolved_workers()[0]


V1 = worker_of(doc("registry.example/worker:1.0"))
B1 = build_id_of(V1)


def facts_for(
    fleet: dict[str, Any],
    *,
    routing: Routing | None,
    deployments: dict[str, VersionDeployment],
    backlogs: dict[str, int | None] | None = None,
) -> RolloutFacts:
    worker = worker_of(fleet)
    policy = policy_of(worker)
    assert policy is not None
    seen = RolloutObservation(
        worker=worker.stack_key,
        target=build_id_of(worker),
        policy=policy,
        deployment_name=deployment_name_of(worker),
        task_queue=worker.task_queue_name,
        deployments=deployments,
        routing=routing,
        task_queues=("orders",),
        backlogs=backlogs or {},
    )
    return RolloutFacts(
        observed={worker.stack_key: seen},
        specs={worker.stack_key: {B1: version_spec(V1)}},
    )


def plan(fleet: dict[str, Any], facts: RolloutFacts | None, state: LoopState | None = None) -> Any:
    parsed = load_fleet(fleet, "t.yaml")
    seen = Observation(fleet=parsed, cluster=None, live={})
    desired = desired_from(seen, accepted={}, registry=default_registry(), file="t.yaml")
    return make_plan(
        seen,
        desired,
        WorkerFacts(rollouts=facts),
        state or LoopState(started_at=0.0),
        settings=DaemonSettings(),
        now=50.0,
        last_replicas={},
        program={},
        native=None,
        wall=NOW,
    )


def routing(**versions: tuple[VersionStatus, float | None]) -> Routing:
    current = next((b for b, (s, _) in versions.items() if s is VersionStatus.CURRENT), None)
    return Routing(
        conflict_token=b"t",
        current=current,
        versions={b: TemporalVersion(b, s, drained_since=d) for b, (s, d) in versions.items()},
    )


def test_a_new_version_is_declared_next_to_the_current_one_and_routed_once_it_polls() -> None:
    fleet = doc()
    b2 = build_id_of(worker_of(fleet))
    # Before its Deployment exists: both versions declared, nothing routed yet.
    first = plan(
        fleet,
        facts_for(
            fleet,
            routing=routing(**{B1: (VersionStatus.CURRENT, None)}),
            deployments={B1: VersionDeployment(B1, "orders-1", 1, 1)},
        ),
    )
    versions = first.inputs.versions["apps/orders"].versions
    assert set(versions) == {B1, b2}
    assert versions[B1].spec == version_spec(V1)
    assert versions[b2].spec is None
    assert first.versions.plans["apps/orders"].routing is None
    assert first.inputs.versions["apps/orders"].status["currentVersion"]["buildID"] == B1
    assert "apps/plain" not in first.inputs.versions
    # Once it polls: Current (AllAtOnce), with the conflict token it was planned from.
    polling = plan(
        fleet,
        facts_for(
            fleet,
            routing=routing(
                **{B1: (VersionStatus.CURRENT, None), b2: (VersionStatus.INACTIVE, None)}
            ),
            deployments={
                B1: VersionDeployment(B1, "orders-1", 1, 1),
                b2: VersionDeployment(b2, "orders-2", 1, 1),
            },
        ),
    )
    change = polling.versions.plans["apps/orders"].routing
    assert change is not None
    assert (change.kind, change.build_id, change.conflict_token) == (
        RoutingKind.SET_CURRENT,
        b2,
        b"t",
    )


def test_a_new_version_runs_a_full_up_and_a_sunset_scale_down_a_targeted_one() -> None:
    fleet = doc()
    b2 = build_id_of(worker_of(fleet))
    deps = {
        B1: VersionDeployment(B1, "orders-1", 1, 1),
        b2: VersionDeployment(b2, "orders-2", 1, 1),
    }
    drained = routing(**{b2: (VersionStatus.CURRENT, None), B1: (VersionStatus.DRAINED, NOW - 10)})
    applied = plan(fleet, facts_for(fleet, routing=drained, deployments=deps))
    state = LoopState(started_at=0.0, applied=applied.hashes)
    # Nothing changed: skip.
    same = plan(fleet, facts_for(fleet, routing=drained, deployments=deps), state)
    assert same.decision.action is ReconcileAction.SKIP
    # Drained for scaledownDelay: v1 to 0 replicas; only this worker changes.
    later = routing(**{b2: (VersionStatus.CURRENT, None), B1: (VersionStatus.DRAINED, NOW - 61)})
    scaled = plan(fleet, facts_for(fleet, routing=later, deployments=deps), state)
    assert scaled.inputs.versions["apps/orders"].versions[B1].replicas == 0
    assert scaled.decision.action is ReconcileAction.TARGETED
    assert scaled.decision.workers == {"apps/orders"}
    # A third version: a Deployment without a URN yet, so a full up.
    newer = doc("registry.example/worker:3.0")
    added = plan(newer, facts_for(newer, routing=drained, deployments=deps), state)
    assert added.decision.action is ReconcileAction.FULL


def test_each_version_of_an_autoscaled_worker_scales_on_its_own_backlog() -> None:
    fleet = doc(autoscaling={"minReplicas": 1, "maxReplicas": 10, "targetBacklogPerReplica": 10})
    b2 = build_id_of(worker_of(fleet))
    facts = facts_for(
        fleet,
        routing=routing(**{b2: (VersionStatus.CURRENT, None), B1: (VersionStatus.DRAINING, None)}),
        deployments={
            B1: VersionDeployment(B1, "orders-1", 1, 1),
            b2: VersionDeployment(b2, "orders-2", 1, 1),
        },
        backlogs={b2: 40, B1: 0},
    )
    result = plan(fleet, facts)
    versions = result.inputs.versions["apps/orders"].versions
    assert versions[b2].replicas == 4  # 40 waiting tasks, 10 per replica
    assert versions[B1].replicas == 1  # the draining version keeps its minimum
    assert set(result.versions.decisions) == {
        version_key("apps/orders", b2),
        version_key("apps/orders", B1),
    }
    # The worker-level autoscaler leaves a versioned worker to its versions.
    assert "apps/orders" not in result.inputs.replicas


def test_versions_that_cannot_be_read_stop_the_plan_instead_of_deleting_them() -> None:
    fleet = doc()
    with pytest.raises(TemporaryError, match="versions of versioned workers are unknown"):
        plan(fleet, RolloutFacts(error="ApiException: 503"))
    with pytest.raises(TemporaryError, match="no cluster"):
        plan(fleet, None)
    # A fleet without versioned workers needs none of it.
    plain = copy.deepcopy(fleet)
    plain["workers"] = plain["workers"][1:]
    assert plan(plain, None).decision.action is ReconcileAction.FULL


def test_temporal_unreachable_holds_every_version_as_it_runs() -> None:
    fleet = doc()
    b2 = build_id_of(worker_of(fleet))
    worker = worker_of(fleet)
    policy = policy_of(worker)
    assert policy is not None
    seen = RolloutObservation(
        worker="apps/orders",
        target=b2,
        policy=policy,
        deployment_name="apps/orders",
        task_queue="orders",
        deployments={B1: VersionDeployment(B1, "orders-1", 3, 3)},
        error="TemporalClientCreationFailed: refused",
    )
    result = plan(
        fleet,
        RolloutFacts(observed={"apps/orders": seen}, specs={"apps/orders": {B1: version_spec(V1)}}),
    )
    versions = result.inputs.versions["apps/orders"].versions
    assert versions[B1].replicas == 3
    assert versions[B1].spec == version_spec(V1)
    assert result.versions.plans["apps/orders"].routing is None
