"""The loop turns sampled backlogs into replicas, HPA style, on the injected clock."""

from __future__ import annotations

import threading

from tests.unit._daemon_fakes import NS, autoscaled, fleet_data, make_daemon
from twc.reconcile.settings import AutoscaleBehavior, DaemonSettings, ScalingRules

KEY = f"{NS}/orders"
UNLIMITED_UP = DaemonSettings(
    autoscale=AutoscaleBehavior(scale_up=ScalingRules(policies=())),
)


def test_a_backlog_raises_replicas_through_the_scale_subresource_without_an_engine_run() -> None:
    fleet = fleet_data(
        workers=[
            autoscaled("orders", target=25, hi=12),
            {"name": "other", "namespace": NS, "taskQueueName": "x"},
        ]
    )
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 0})
    h.step()
    assert h.live[KEY] == 1
    runs = h.engine_runs()
    ups = len(h.engine.ups)

    h.backlogs.counts["orders"] = 200
    h.clock.now += 30
    h.step()

    assert h.live[KEY] == 8  # ceil(200 / 25)
    assert h.scaler.writes[-1] == (KEY, 8)
    assert len(h.engine.ups) == ups
    assert h.engine_runs() == runs
    assert h.metrics.value("twc_task_queue_backlog", task_queue="orders") == 200
    assert h.metrics.value("twc_worker_desired_replicas", worker=KEY) == 8
    assert (h.metrics.value("twc_scale_writes_total", result="written") or 0) >= 1


def test_a_count_the_autoscaler_does_not_own_is_claimed_once_then_left_alone() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=10, lo=2, hi=20)])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 60})
    h.live[KEY] = 6  # e.g. applied by an older program through the engine

    h.step()
    # Within tolerance of 60 / (10 * 6) = 1: the count stays, but is claimed.
    assert h.scaler.writes == [(KEY, 6)]
    assert KEY in h.scaler.owned

    h.clock.now += 30
    h.step()
    assert h.scaler.writes == [(KEY, 6)]


def test_a_failed_scale_write_is_retried_by_the_next_iteration() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=10, hi=20)])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 0})
    h.step()
    h.backlogs.counts["orders"] = 50
    h.scaler.failures.append(RuntimeError("the API server said no"))
    h.clock.now += 30
    h.step()
    assert h.live[KEY] == 1
    assert h.state is not None
    assert h.state.last_outcome is not None
    assert h.state.last_outcome.ok  # one worker's failed write never fails the iteration
    assert h.metrics.value("twc_scale_writes_total", result="failed") == 1

    h.clock.now += 30
    h.step()
    assert h.live[KEY] == 5


def test_a_worker_asleep_at_zero_wakes_only_above_its_activation_backlog() -> None:
    worker = autoscaled("orders", target=10, lo=0, hi=20, window=60)
    worker["autoscaling"]["activationBacklog"] = 5
    h = make_daemon(fleet_data(workers=[worker]), settings=UNLIMITED_UP, backlogs={"orders": 0})
    h.step()
    h.clock.now += 30
    h.step()
    assert h.live[KEY] == 0

    h.backlogs.counts["orders"] = 5  # at the activation backlog: still asleep
    h.clock.now += 30
    h.step()
    assert h.live[KEY] == 0

    h.backlogs.counts["orders"] = 6
    h.clock.now += 30
    h.step()
    assert h.live[KEY] == 1
    ups = len(h.engine.ups)

    h.backlogs.counts["orders"] = 3  # inactive again: back to zero after the window
    h.clock.now += 30
    h.step()
    assert h.live[KEY] == 1
    h.clock.now += 61
    h.step()
    assert h.live[KEY] == 0
    assert len(h.engine.ups) == ups


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
    h.scaler.owned.add(KEY)

    h.step()

    # Within tolerance of 60 / (10 * 6) = 1: the count stays, no scale write at all.
    assert h.live[KEY] == 6
    assert h.scaler.writes == []


def test_a_backlog_is_sampled_on_its_interval_not_on_every_wake_up() -> None:
    # Watch events and file edits wake the loop at any rate; Temporal is asked about an
    # autoscaled queue once per sampling interval (KEDA's pollingInterval), and the loop
    # wakes up for the next sample when it is due.
    fleet = fleet_data(workers=[autoscaled("orders", target=10, hi=20)])
    settings = UNLIMITED_UP.model_copy(update={"reconcile_interval": 30.0})
    h = make_daemon(fleet, settings=settings, backlogs={"orders": 0})
    interval = settings.sampling.interval
    h.step()
    assert h.backlogs.described == ["orders"]

    h.backlogs.counts["orders"] = 50
    for _ in range(3):  # woken again and again before the sample is due
        h.clock.now += interval / 4
        h.step()
    assert h.backlogs.described == ["orders"]
    assert h.live[KEY] == 1

    state = h.step()
    due = h.daemon.observer.next_sample_in(h.clock.now)
    assert due is not None
    assert 0 < due <= interval / 4
    assert state.next_delay(now=h.clock.now, settings=settings, sample_due_in=due) == due

    h.clock.now += due
    h.step()
    assert h.backlogs.described == ["orders", "orders"]
    assert h.live[KEY] == 5


def test_a_failed_sample_is_tried_again_on_the_next_iteration() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=10, hi=20)])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": RuntimeError("down")})
    h.step()
    h.backlogs.counts["orders"] = 30
    h.clock.now += 1
    h.step()
    assert h.backlogs.described == ["orders", "orders"]
    assert h.live[KEY] == 3


def test_the_backlog_is_published_with_the_time_of_its_sample() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=25, hi=12)])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 0})
    h.step()
    first = h.metrics.value("twc_task_queue_backlog_sampled_at_seconds", task_queue="orders")
    assert first == h.daemon.clocks.wall()  # sampled within the step, on the loop's clock

    h.step()  # within the sampling interval: the same sample, the same time
    assert (
        h.metrics.value("twc_task_queue_backlog_sampled_at_seconds", task_queue="orders") == first
    )

    h.backlogs.counts["orders"] = 200
    h.clock.now += 30
    h.step()  # a new sample
    second = h.metrics.value("twc_task_queue_backlog_sampled_at_seconds", task_queue="orders")
    assert second == first + 30


def test_workers_scaled_in_one_iteration_are_written_at_once_not_one_after_another() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=10, hi=20), autoscaled("bills")])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 0, "bills": 0})
    h.step()
    both_in_flight = threading.Barrier(2, timeout=10)  # broken if one write waits for another
    write = h.scaler.scale

    def meeting(namespace: str, name: str, replicas: int) -> None:
        both_in_flight.wait()
        write(namespace, name, replicas)

    h.scaler.scale = meeting  # type: ignore[method-assign]
    h.backlogs.counts.update(orders=50, bills=50)
    h.clock.now += 30
    h.step()

    assert h.live[KEY] == 5
    assert h.live[f"{NS}/bills"] > 1


def test_the_up_that_adds_an_autoscaled_worker_claims_its_count_for_the_autoscaler() -> None:
    fleet = fleet_data(workers=[{"name": "other", "namespace": NS, "taskQueueName": "x"}])
    h = make_daemon(fleet, settings=UNLIMITED_UP, backlogs={"orders": 50})
    h.step()
    fleet["workers"].append(autoscaled("orders", target=10, hi=20))
    h.clock.now += 30
    h.step()

    assert len(h.engine.ups) == 2
    assert h.scaler.writes == [(KEY, 1)]  # by the up's end, not by a later iteration
    assert KEY in h.scaler.owned
