"""An iteration whose desired state hashes like the last applied one starts no engine."""

from __future__ import annotations

from tests.unit._daemon_fakes import NS, autoscaled, fleet_data, make_daemon
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import ReconcileAction, decide_reconcile


def test_the_first_iteration_applies_everything_then_unchanged_iterations_skip_the_engine() -> None:
    h = make_daemon()

    h.step()
    assert len(h.engine.ups) == 1
    _overlay, targets = h.engine.ups[0]
    assert targets is None  # nothing applied since start: a full up

    for _ in range(5):
        h.clock.now += 30
        state = h.step()
        assert state.last_outcome is not None
        assert state.last_outcome.ok

    assert len(h.engine.ups) == 1
    assert h.engine.refreshes == 0
    assert h.metrics.value("twc_reconcile_total", result="success") == 6
    assert h.engine_runs() == 1


def test_a_steady_backlog_keeps_the_hash_and_never_reaches_the_engine() -> None:
    fleet = fleet_data(workers=[autoscaled("orders", target=10)])
    h = make_daemon(fleet, backlogs={"orders": 40})

    h.step()  # deploys at min, then the backlog asks for 4
    h.clock.now += 30
    h.step()
    assert h.live[f"{NS}/orders"] == 4
    runs = h.engine_runs()

    for _ in range(4):
        h.clock.now += 30
        h.step()

    assert h.engine_runs() == runs
    assert h.metrics.value("twc_worker_desired_replicas", worker=f"{NS}/orders") == 4


def test_changing_one_worker_in_the_file_targets_only_that_workers_resources() -> None:
    fleet = fleet_data(
        workers=[
            {"name": "a", "namespace": NS, "taskQueueName": "a"},
            {"name": "b", "namespace": NS, "taskQueueName": "b"},
        ]
    )
    h = make_daemon(fleet, settings=DaemonSettings())
    h.engine.urns = {
        f"{NS}/a": ["urn:a", "urn:a-deployment"],
        f"{NS}/b": ["urn:b", "urn:b-deployment"],
    }
    h.step()

    fleet["workers"][1]["image"] = "registry.example/worker:2.0.0"
    h.clock.now += 30
    h.step()

    assert len(h.engine.ups) == 2
    assert h.engine.ups[1][1] == ["urn:b", "urn:b-deployment"]
    assert h.metrics.value("twc_engine_runs_total", mode="targeted") == 1


def test_a_worker_missing_from_the_state_falls_back_to_a_full_up() -> None:
    fleet = fleet_data(workers=[{"name": "a", "namespace": NS, "taskQueueName": "a"}])
    h = make_daemon(fleet)
    h.step()
    h.engine.urns = {}  # e.g. the state was edited by hand

    fleet["workers"][0]["replicas"] = 3
    h.clock.now += 30
    h.step()

    assert h.engine.ups[1][1] is None
    assert h.metrics.value("twc_engine_runs_total", mode="full") == 2


def test_the_decision_for_an_unchanged_fleet_is_skip() -> None:
    h = make_daemon()
    state = h.step()
    assert state.applied is not None

    plan = h.daemon.plan(state, now=h.clock.now)

    assert plan.hashes == state.applied
    decision = decide_reconcile(state.applied, plan.hashes, target_threshold=3)
    assert decision.action is ReconcileAction.SKIP


def test_removing_the_last_worker_of_a_namespace_runs_a_full_up_for_its_connection() -> None:
    # The connection's per-namespace resources (secret copy, fingerprint) go too: a
    # targeted up of the worker alone would leave them behind.
    fleet = fleet_data(
        workers=[
            {"name": "a", "namespace": NS, "taskQueueName": "a"},
            {"name": "c", "namespace": "other", "taskQueueName": "c"},
            {"name": "b", "namespace": NS, "taskQueueName": "b"},
        ]
    )
    h = make_daemon(fleet, settings=DaemonSettings())
    h.engine.urns = {f"{NS}/a": ["urn:a"], f"{NS}/b": ["urn:b"], "other/c": ["urn:c"]}
    h.step()

    fleet["workers"].pop()  # b: `team` keeps worker a, so only b's resources change
    h.clock.now += 30
    h.step()
    assert h.engine.ups[-1][1] == ["urn:b"]

    fleet["workers"].pop()  # c, the last worker in `other`
    h.clock.now += 30
    h.step()
    assert h.engine.ups[-1][1] is None
    assert h.metrics.value("twc_engine_runs_total", mode="full") == 2


def test_removing_a_worker_from_the_middle_of_the_file_targets_only_that_worker() -> None:
    # The others move up in the list; where a worker sits is not what it is.
    fleet = fleet_data(workers=[{"name": n, "namespace": NS, "taskQueueName": n} for n in "abcde"])
    h = make_daemon(fleet, settings=DaemonSettings())
    h.engine.urns = {f"{NS}/{n}": [f"urn:{n}"] for n in "abcde"}
    h.step()

    del fleet["workers"][1]
    h.clock.now += 30
    h.step()

    assert h.engine.ups[-1][1] == ["urn:b"]
