"""The loop turns sampled backlogs into replicas, HPA style, on the injected clock."""

from __future__ import annotations

from tests.unit._daemon_fakes import NS, autoscaled, fleet_data, make_daemon
from twc.loop import AutoscaleBehavior, DaemonSettings, ScalingRules

KEY = f"{NS}/orders"
UNLIMITED_UP = DaemonSettings(
    autoscale=AutoscaleBehavior(scale_up=ScalingRules(policies=())),
)


def test_a_backlog_raises_replicas_with_one_targeted_up_of_that_worker() -> None:
    fleet = fleet_data(
        workers=[
            autoscaled("orders", target=25, hi=12),
            {"name": "other", "namespace": NS, "taskQueueName": "x"},
        ]
    )
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 0})
    h.engine.urns = {KEY: ["urn:orders", "urn:orders-deployment"]}
    h.step()
    assert h.live[KEY] == 1

    h.backlogs.counts["orders"] = 200
    h.clock.now += 30
    h.step()

    assert h.live[KEY] == 8  # ceil(200 / 25)
    assert h.engine.ups[-1][1] == ["urn:orders", "urn:orders-deployment"]
    assert h.metrics.value("twc_task_queue_backlog", task_queue="orders") == 200
    assert h.metrics.value("twc_worker_desired_replicas", worker=KEY) == 8


def test_the_default_scale_up_policy_limits_growth_per_period() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=1, hi=100)])
    h = make_daemon(fleet, backlogs={"orders": 0})
    h.step()

    h.backlogs.counts["orders"] = 100
    h.clock.now += 30
    h.step()

    # HPA: max(+100 %, +4 pods) per 15 s from 1 replica.
    assert h.live[KEY] == 5


def test_scale_down_waits_for_the_stabilization_window_then_drops() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=10, window=60)])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 0})
    h.step()
    h.backlogs.counts["orders"] = 100
    h.clock.now += 10
    h.step()
    assert h.live[KEY] == 10
    h.backlogs.counts["orders"] = 0

    for _ in range(5):  # 50 s of empty backlog: still within the 60 s window
        h.clock.now += 10
        h.step()
        assert h.live[KEY] == 10

    h.clock.now += 11
    h.step()
    assert h.live[KEY] == 1


def test_the_live_replica_count_is_where_the_autoscaler_starts() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=10, lo=2, hi=20)])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 60})
    h.live[KEY] = 6  # e.g. applied by a previous daemon

    h.step()

    # Within tolerance of 60 / (10 * 6) = 1: the count stays, no scale event.
    assert h.engine.last_inputs.replicas == {KEY: 6}
