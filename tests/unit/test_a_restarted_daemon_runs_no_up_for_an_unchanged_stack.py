"""A restarted daemon runs no ``up`` for a stack that is still as its last recorded
``up`` left it (every shard ran a full one on every restart: minutes at 250 workers a
shard); whatever makes that uncertain runs the engine as before."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit._daemon_fakes import NS, STACK, FakeEngine, Harness, fleet_data, make_daemon
from tests.unit._fake_configmaps import FakeConfigMaps
from twc.engine.build import build_id
from twc.kube.record import RecordStore
from twc.reconcile.settings import DaemonSettings

WORKERS = [
    {"name": name, "namespace": NS, "taskQueueName": name}
    for name in ("payments", "orders", "billing", "search", "mail")
]


def _fleet() -> dict[str, Any]:
    return fleet_data(workers=[dict(w) for w in WORKERS])


def _daemon(api: FakeConfigMaps, engine: FakeEngine, fleet: dict[str, Any], **kw: Any) -> Harness:
    record = RecordStore(api, namespace="twc-system", stack=STACK)
    return make_daemon(fleet, engine=engine, record=record, **kw)


def _started(api: FakeConfigMaps, engine: FakeEngine) -> None:
    """A first daemon applies the fleet once and records it."""
    engine.urns = {f"{NS}/{w['name']}": [f"urn:{w['name']}"] for w in WORKERS}
    _daemon(api, engine, _fleet()).step()
    assert len(engine.ups) == 1


def test_a_restart_on_an_unchanged_stack_runs_no_up() -> None:
    api, engine = FakeConfigMaps(), FakeEngine()
    _started(api, engine)
    recorded = RecordStore(api, namespace="twc-system", stack=STACK).load_applied()
    assert recorded is not None
    assert recorded.update == engine.last_update()
    assert recorded.build == build_id()
    assert set(recorded.workers) == {f"{NS}/{w['name']}" for w in WORKERS}

    again = _daemon(api, engine, _fleet())
    state = again.step()
    again.step()

    assert len(engine.ups) == 1, "the restarted daemon ran an up"
    assert state.applied is not None
    assert state.applied.fleet == recorded.fleet
    assert state.last_outcome is not None
    assert state.last_outcome.ok


def test_a_worker_changed_while_the_daemon_was_down_is_upped_alone() -> None:
    api, engine = FakeConfigMaps(), FakeEngine()
    _started(api, engine)
    fleet = _fleet()
    fleet["workers"][1]["image"] = "registry.example/worker:2.0.0"

    _daemon(api, engine, fleet).step()

    assert len(engine.ups) == 2
    assert engine.ups[-1][1] == ["urn:orders"], "a targeted up of the changed worker"


def _pdb_urn(name: str) -> str:
    kind = "twc:temporal:TemporalWorker$kubernetes:policy/v1:PodDisruptionBudget"
    return f"urn:pulumi:{STACK}::twc::{kind}::{NS}/{name}-pdb"


def test_a_changed_worker_that_would_lose_an_object_the_state_has_runs_a_full_up() -> None:
    api, engine = FakeConfigMaps(), FakeEngine()
    _started(api, engine)
    # The state (as the restarted daemon reads it) holds a PDB the worker's spec no longer
    # makes: its ownership check judges that deletion only in a whole-stack up.
    engine.urns[f"{NS}/orders"] = ["urn:orders", _pdb_urn("orders")]
    fleet = _fleet()
    fleet["workers"][1]["image"] = "registry.example/worker:2.0.0"

    _daemon(api, engine, fleet).step()

    assert len(engine.ups) == 2
    assert engine.ups[-1][1] is None, "a whole-stack up"


def test_changed_workers_deleting_a_kind_beyond_the_share_run_whole_stack_within_it_alone() -> None:
    api, engine = FakeConfigMaps(), FakeEngine()
    fleet = _fleet()
    for w in fleet["workers"]:
        w["replicas"] = 2  # each worker gets a PDB
    engine.urns = {f"{NS}/{w['name']}": [f"urn:{w['name']}"] for w in WORKERS}
    daemon = _daemon(api, engine, fleet)
    daemon.step()
    fleet["workers"][0]["replicas"] = 1  # one PDB of five goes: within the share
    daemon.step()
    assert engine.ups[-1][1] == ["urn:payments"]
    for w in fleet["workers"]:
        w["replicas"] = 1  # the other four go at once: beyond it
    daemon.step()
    assert len(engine.ups) == 3
    assert engine.ups[-1][1] is None, "a whole-stack up"


@pytest.mark.parametrize(
    "what",
    ["someone else updated the stack", "another build of twc", "a killed run was repaired"],
)
def test_whatever_makes_the_stack_uncertain_runs_a_full_up(
    what: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, engine = FakeConfigMaps(), FakeEngine()
    _started(api, engine)
    if what == "someone else updated the stack":
        engine.version += 1  # a manual `twc up`, plain `pulumi up`
    elif what == "another build of twc":
        monkeypatch.setattr("twc.reconcile.act.build_id", lambda: "another-build")
    else:
        engine.recover_actions = ["cancel", "drop-pending-operations:1"]

    _daemon(api, engine, _fleet()).step()

    assert len(engine.ups) == 2
    assert engine.ups[-1][1] is None, "a full up"


def test_a_refresh_that_found_no_drift_keeps_the_stack_resumable() -> None:
    api, engine = FakeConfigMaps(), FakeEngine()
    settings = DaemonSettings(refresh_interval=60.0)
    engine.urns = {f"{NS}/{w['name']}": [f"urn:{w['name']}"] for w in WORKERS}
    first = _daemon(api, engine, _fleet(), settings=settings)
    first.step()
    first.clock.now += 61
    first.step()  # nothing to apply; the refresh is due and runs (a version of its own)
    assert engine.refreshes == 1
    recorded = RecordStore(api, namespace="twc-system", stack=STACK).load_applied()
    assert recorded is not None
    assert recorded.update == engine.last_update()

    _daemon(api, engine, _fleet(), settings=settings).step()

    assert len(engine.ups) == 1


def test_a_refresh_that_found_drift_leaves_the_restart_a_full_up() -> None:
    api, engine = FakeConfigMaps(), FakeEngine()
    settings = DaemonSettings(refresh_interval=60.0)
    first = _daemon(api, engine, _fleet(), settings=settings)
    first.step()
    engine.drift = ["payments"]
    first.clock.now += 61
    first.step()
    assert engine.refreshes == 1

    _daemon(api, engine, _fleet(), settings=settings).step()

    assert len(engine.ups) == 2
    assert engine.ups[-1][1] is None
