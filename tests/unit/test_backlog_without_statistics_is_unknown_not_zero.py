"""A DescribeTaskQueue answer without statistics is missing data, never a zero backlog."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest

from tests.unit._daemon_fakes import NS, autoscaled, fleet_data, make_daemon
from twc.reconcile.asking import TaskQueueRef, backlog_from_stats

REF = TaskQueueRef("default", "orders")


def _stats(count: int, age: float, add: float = 0.0, dispatch: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(
        approximate_backlog_count=count,
        approximate_backlog_age=SimpleNamespace(ToTimedelta=lambda: timedelta(seconds=age)),
        tasks_add_rate=add,
        tasks_dispatch_rate=dispatch,
    )


def test_statistics_of_every_task_queue_type_are_summed() -> None:
    backlog = backlog_from_stats([_stats(40, 3.0, 1.5), _stats(2, 9.0, 0.5)], REF)
    assert backlog.count == 42


@pytest.mark.parametrize(("add", "dispatch", "count"), [(0, 0, 0), (0.5, 0, 1), (0, 2.0, 1)])
def test_work_in_flight_counts_as_a_backlog_of_one(add: float, dispatch: float, count: int) -> None:
    # Tasks handed straight to a polling worker leave no backlog; scaling to zero under
    # them would stop them (a queue with tasks added or dispatched lately is busy).
    backlog = backlog_from_stats([_stats(0, 0.0, add, dispatch)], REF)
    assert (backlog.count, backlog.scaled) == (0, count)


def test_no_statistics_at_all_is_an_error_not_a_zero_backlog() -> None:
    with pytest.raises(LookupError, match="no backlog statistics for default/orders"):
        backlog_from_stats([], REF)


def test_the_daemon_holds_replicas_when_temporal_reports_no_statistics() -> None:
    h = make_daemon(fleet_data(workers=[autoscaled("orders", target=10)]), backlogs={"orders": 50})
    h.step()
    h.clock.now += 30
    h.step()
    assert h.live[f"{NS}/orders"] == 5

    h.backlogs.counts["orders"] = LookupError("Temporal reported no backlog statistics")
    h.clock.now += 600  # far past any stabilization window: a zero would scale down
    h.step()

    assert h.live[f"{NS}/orders"] == 5
    assert "BacklogSamplingFailed" in h.daemon.status()["faults"]
