"""One up deletes at most a share of the stack's workers; more is held until a person
approves exactly that set (or, when the fleet opts in, the same deletions were wanted
long enough). An approval is spent once. Held workers stay in the desired state exactly
as they were, from the inputs they last came from."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit._daemon_fakes import NS, fleet_data, make_daemon
from tests.unit._fake_configmaps import FakeConfigMaps
from tests.unit._native_objects import cluster_conn_obj, cluster_ref, worker_obj
from twc.connections import Registry
from twc.desired import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredFleet,
    DesiredInputs,
    Hold,
    ObjectList,
    deletion_digest,
    desired_fleet,
    held_objects,
    judge_deletions,
    kind_key,
)
from twc.kube.record import RecordStore
from twc.reconcile.settings import DaemonSettings
from twc.spec import DeletionGuard, load_fleet

REGISTRY = Registry.with_builtins()
CC_KEY = kind_key("ClusterConnection", "temporal.io")
CONN_KEY = kind_key("Connection", "temporal.io")
GUARD = DeletionGuard()
RELEASING = DeletionGuard.model_validate({"releaseAfter": 120})


# ------------------------------------------------------------------ the decision
@pytest.mark.parametrize(
    ("deleting", "total", "held"),
    [
        (0, 4, False),
        (1, 4, False),  # 25 % of 4
        (2, 4, True),
        (1, 1, False),  # at least one is always allowed
        (1, 2, False),
        (2, 3, True),
        (25, 100, False),
        (26, 100, True),
    ],
)
def test_deletions_beyond_the_share_are_held(deleting: int, total: int, held: bool) -> None:
    gone = [f"team/w{i}" for i in range(deleting)]
    verdict = judge_deletions(gone, total, None, now=0, wall=0, settings=GUARD, approved=None)
    assert (verdict.hold is not None) is held
    assert verdict.deleting == frozenset(gone)


def test_a_hold_waits_for_a_person_unless_the_fleet_opts_into_a_period() -> None:
    gone = ["team/a", "team/b"]

    def judge(
        previous: Hold | None, now: float, settings: DeletionGuard, which: list[str] = gone
    ) -> Any:
        return judge_deletions(
            which, 4, previous, now=now, wall=now, settings=settings, approved=None
        )

    # By default nothing but an approval releases a hold, however long it lasts.
    held = judge(None, 0, GUARD)
    for now in (200, 10_000, 1e9):
        held = judge(held.hold, now, GUARD)
        assert held.hold is not None
    assert held.hold.since == 0
    assert held.hold.observations == 4

    # Opted in: the same set still wanted after the period goes.
    first = judge(None, 0, RELEASING)
    assert first.hold is not None
    early = judge(first.hold, 119, RELEASING)
    assert early.hold is not None
    late = judge(early.hold, 121, RELEASING)
    assert late.hold is None
    assert late.released == "confirmed"

    # A different set starts the wait again.
    other = judge(early.hold, 202, RELEASING, ["team/a", "team/c"])
    assert other.hold is not None
    assert other.hold.since == 202
    assert other.hold.observations == 1


def test_an_approval_of_exactly_these_deletions_releases_them() -> None:
    gone = ["team/a", "team/b"]
    wrong = judge_deletions(
        gone, 4, None, now=0, wall=0, settings=GUARD, approved=deletion_digest(["team/a"])
    )
    assert wrong.hold is not None
    right = judge_deletions(
        gone, 4, None, now=0, wall=0, settings=GUARD, approved=deletion_digest(gone)
    )
    assert right.hold is None
    assert right.released == "approved"


# ------------------------------------------------------- held workers come back
def _desired(doc: dict[str, Any], cluster: dict[str, list[dict[str, Any]]] | None) -> DesiredFleet:
    fleet = load_fleet(doc, "f.yaml")
    observed = None
    accepted: dict[str, Any] = {}
    if cluster is not None:
        observed = {
            key: ObjectList.known(cluster.get(key, []))
            for key in (QUEUE_KIND_KEY, WORKER_KIND_KEY, CC_KEY, CONN_KEY)
        }
    inputs = DesiredInputs(fleet=doc, cluster=observed, accepted=accepted)
    return desired_fleet(fleet, inputs, registry=REGISTRY, file="f.yaml")


def _with_held(current: DesiredFleet, previous: DesiredFleet, workers: set[str]) -> DesiredFleet:
    held, missing = held_objects(previous, workers, current)
    assert missing == frozenset()
    inputs = current.inputs.model_copy(update={"held": held})
    assert inputs.fleet is not None
    return desired_fleet(
        load_fleet(inputs.fleet, "f.yaml"), inputs, registry=REGISTRY, file="f.yaml"
    )


def test_temporal_worker_objects_gone_with_their_crd_come_back_exactly() -> None:
    doc = fleet_data(workers=[])
    objects = [worker_obj(f"w{i}", ref=cluster_ref("main")) for i in range(3)]
    previous = _desired(doc, {WORKER_KIND_KEY: objects})
    current = _desired(doc, {WORKER_KIND_KEY: []})
    assert set(current.workers) == set()

    kept = _with_held(current, previous, set(previous.workers))

    assert kept.workers == previous.workers
    assert kept.origins == previous.origins
    assert kept.held == frozenset(previous.workers)


def test_file_workers_removed_from_the_file_come_back_with_their_entries() -> None:
    workers = [{"name": f"w{i}", "namespace": NS, "taskQueueName": f"q{i}"} for i in range(4)]
    previous = _desired(fleet_data(workers=workers), None)
    current = _desired(fleet_data(workers=workers[:1]), None)

    kept = _with_held(current, previous, {f"{NS}/w1", f"{NS}/w2", f"{NS}/w3"})

    assert kept.workers == previous.workers


def test_workers_whose_connection_objects_went_too_come_back_with_the_connection() -> None:
    doc = fleet_data(workers=[])
    doc["clusterConnections"] = []
    doc["defaults"].pop("connectionRef")
    conn = cluster_conn_obj("shared")
    objects = [worker_obj(f"w{i}", ref=cluster_ref("shared")) for i in range(2)]
    previous = _desired(doc, {WORKER_KIND_KEY: objects, CC_KEY: [conn]})
    # The ClusterConnection CRD is deleted: its objects go, the workers cannot resolve.
    current = _desired(doc, {WORKER_KIND_KEY: objects, CC_KEY: []})
    assert set(current.workers) == set()
    assert {r.reason for r in current.rejected} == {"ConnectionNotFound"}

    kept = _with_held(current, previous, set(previous.workers))

    assert kept.workers == previous.workers
    assert kept.references == previous.references


# ------------------------------------------------------------------ the daemon
def _four_workers() -> list[dict[str, Any]]:
    return [{"name": f"w{i}", "namespace": NS, "taskQueueName": f"q{i}"} for i in range(4)]


def _guarded_fleet(workers: list[dict[str, Any]], release_after: float | None = None) -> Any:
    doc = fleet_data(workers=workers)
    if release_after is not None:
        doc["deletionGuard"] = {"releaseAfter": release_after}
    return doc


def _guarded_daemon(record: RecordStore | None = None, release_after: float | None = None) -> Any:
    h = make_daemon(_guarded_fleet(_four_workers(), release_after), record=record)
    h.step()
    assert len(h.engine.ups) == 1
    h.live.update({f"{NS}/w{i}": 1 for i in range(4)})
    return h


def _program_workers(h: Any) -> set[str]:
    return set(h.engine.last_program().workers)


def test_the_daemon_holds_three_of_four_deletions_until_a_person_approves() -> None:
    h = _guarded_daemon()
    h.fleet["workers"] = _four_workers()[:1]

    h.step()
    # Held: the desired state is what was applied, so no up at all.
    assert len(h.engine.ups) == 1
    held = h.daemon.status()["heldDeletions"]
    assert held["workers"] == [f"{NS}/w1", f"{NS}/w2", f"{NS}/w3"]
    assert h.metrics.value("twc_deletions_held", stack="unit") == 3

    h.clock.now += 86_400
    h.step()
    h.step()
    assert len(h.engine.ups) == 1
    assert h.daemon.status()["heldDeletions"]["workers"] == held["workers"]
    assert h.daemon.status()["consecutiveFailures"] == 0, "a hold is kept, not failed"


def test_the_daemon_releases_held_deletions_after_the_period_the_fleet_opts_into() -> None:
    h = _guarded_daemon(release_after=120)
    h.fleet["workers"] = _four_workers()[:1]

    h.step()
    h.clock.now += 60
    h.step()
    assert len(h.engine.ups) == 1
    h.clock.now += 61
    h.step()  # 121 s: released
    assert len(h.engine.ups) == 2
    assert _program_workers(h) == {f"{NS}/w0"}
    assert h.daemon.status()["heldDeletions"] is None
    assert h.metrics.value("twc_deletions_held", stack="unit") == 0


def test_held_deletions_apply_the_rest_of_the_change() -> None:
    h = _guarded_daemon()
    workers = _four_workers()[:1]
    workers[0] = {**workers[0], "image": "registry.example/worker:2.0.0"}
    h.fleet["workers"] = [*workers, {"name": "new", "namespace": NS, "taskQueueName": "n"}]

    h.step()

    assert len(h.engine.ups) == 2
    program = h.engine.last_program()
    assert set(program.workers) == {f"{NS}/w{i}" for i in range(4)} | {f"{NS}/new"}
    assert program.workers[f"{NS}/w0"].image == "registry.example/worker:2.0.0"
    assert program.held == frozenset({f"{NS}/w1", f"{NS}/w2", f"{NS}/w3"})

    h.fleet["workers"][0]["image"] = "registry.example/worker:3.0.0"
    h.step()  # still held: the next change applies too
    assert len(h.engine.ups) == 3
    program = h.engine.last_program()
    assert program.workers[f"{NS}/w0"].image == "registry.example/worker:3.0.0"
    assert program.held == frozenset({f"{NS}/w1", f"{NS}/w2", f"{NS}/w3"})


def test_a_deletion_an_earlier_up_let_go_is_counted_but_not_held_while_its_worker_stops() -> None:
    h = _guarded_daemon()
    h.fleet["workers"] = _four_workers()[1:]
    h.step()  # 1 of 4: within the share, applied
    assert _program_workers(h) == {f"{NS}/w{i}" for i in (1, 2, 3)}

    # w0 still runs while the engine removes it; the next edit deletes one more.
    h.live[f"{NS}/w0"] = 1
    h.fleet["workers"] = _four_workers()[2:]
    h.step()

    # Two of four stop at once: w1 is held, w0 (already let go) is not kept.
    assert h.daemon.status()["consecutiveFailures"] == 0
    assert h.daemon.status()["heldDeletions"]["workers"] == [f"{NS}/w0", f"{NS}/w1"]
    assert _program_workers(h) == {f"{NS}/w1", f"{NS}/w2", f"{NS}/w3"}


def test_an_operators_approval_releases_the_held_deletions_at_once() -> None:
    api = FakeConfigMaps()
    record = RecordStore(api, namespace="twc", stack="unit")
    h = _guarded_daemon(record)
    h.fleet["workers"] = _four_workers()[:2]

    h.step()
    assert len(h.engine.ups) == 1
    published = RecordStore(api, namespace="twc", stack="unit").load()
    assert published is not None
    assert published.held is not None
    assert published.held.workers == (f"{NS}/w2", f"{NS}/w3")

    RecordStore(api, namespace="twc", stack="unit").approve(published.held.digest)
    h.step()

    assert len(h.engine.ups) == 2
    assert _program_workers(h) == {f"{NS}/w0", f"{NS}/w1"}
    after = RecordStore(api, namespace="twc", stack="unit").load()
    assert after is not None
    assert after.held is None
    assert after.approved is None


def test_an_approval_is_spent_once_and_the_same_deletions_coming_back_are_held_again() -> None:
    api = FakeConfigMaps()
    h = _guarded_daemon(RecordStore(api, namespace="twc", stack="unit"))
    two = _four_workers()[:2]
    h.fleet["workers"] = two
    h.step()
    published = RecordStore(api, namespace="twc", stack="unit").load()
    assert published is not None
    assert published.held is not None
    RecordStore(api, namespace="twc", stack="unit").approve(published.held.digest)
    h.step()
    assert len(h.engine.ups) == 2

    # Until the approved deletions are done (an up that failed midway) they stay released.
    h.live.update({f"{NS}/w2": 1, f"{NS}/w3": 1})
    h.step()
    assert h.daemon.status()["heldDeletions"] is None
    for gone in (2, 3):
        del h.live[f"{NS}/w{gone}"]
    h.step()

    # The same two workers come back, run, and go again: held again.
    h.fleet["workers"] = _four_workers()
    h.step()
    ups = len(h.engine.ups)
    assert set(h.live) == {f"{NS}/w{i}" for i in range(4)}
    h.fleet["workers"] = two
    h.step()

    assert len(h.engine.ups) == ups
    assert h.daemon.status()["heldDeletions"]["workers"] == [f"{NS}/w2", f"{NS}/w3"]
    again = RecordStore(api, namespace="twc", stack="unit").load()
    assert again is not None
    assert again.held is not None
    assert again.held.digest == published.held.digest
    assert again.approved is None


def test_a_restarted_daemon_holds_from_the_record_it_left() -> None:
    api = FakeConfigMaps()
    h = _guarded_daemon(RecordStore(api, namespace="twc", stack="unit"))
    live = dict(h.live)

    doc = fleet_data(workers=_four_workers()[:1])
    again = make_daemon(doc, record=RecordStore(api, namespace="twc", stack="unit"))
    again.live.update(live)
    again.step()

    assert set(again.engine.last_program().workers) == {f"{NS}/w{i}" for i in range(4)}
    assert again.daemon.status()["heldDeletions"]["workers"] == [f"{NS}/w{i}" for i in (1, 2, 3)]


def test_held_workers_nobody_remembers_stop_the_up_rather_than_go() -> None:
    # A restarted daemon without a record: the three missing workers cannot be put back,
    # so nothing is applied (they are not deleted) until the deletions are approved.
    h = make_daemon(fleet_data(workers=_four_workers()[:1]))
    h.live.update({f"{NS}/w{i}": 1 for i in range(4)})

    state = h.step()

    assert h.engine.ups == []
    assert state.last_outcome is not None
    assert not state.last_outcome.ok
    assert "held workers cannot be kept" in state.last_outcome.message
    assert h.daemon.status()["heldDeletions"]["workers"] == [f"{NS}/w{i}" for i in (1, 2, 3)]


def test_twc_approve_writes_the_digest_of_what_is_held(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import contextlib

    from twc.cli import common, up
    from twc.kube.record import HeldRecord

    api = FakeConfigMaps()
    record = RecordStore(api, namespace="twc", stack="prod")
    monkeypatch.setattr(common, "stack_kube", lambda ref: contextlib.nullcontext())
    monkeypatch.setattr(common, "stack_record", lambda ref, kube: record)

    assert up.run_approve("prod") == 1
    assert "no deletions are held" in capsys.readouterr().err

    record.save({}, None)
    record.publish_held(HeldRecord("d1g35t", (f"{NS}/a", f"{NS}/b"), "2 of 4 workers"))
    assert up.run_approve("prod") == 0
    out = capsys.readouterr().out
    assert f"{NS}/a" in out
    assert "approved (d1g35t)" in out
    assert RecordStore(api, namespace="twc", stack="prod").approved() == "d1g35t"


def test_while_the_running_workers_cannot_be_listed_every_deletion_is_held() -> None:
    listing = {"fails": False}

    def replicas(live: dict[str, int]) -> dict[str, int]:
        if listing["fails"]:
            raise LookupError("deployments not listed yet")
        return dict(live)

    h = make_daemon(_guarded_fleet(_four_workers()), read_replicas=replicas)
    h.step()
    h.live.update({f"{NS}/w{i}": 1 for i in range(4)})
    listing["fails"] = True
    h.fleet["workers"] = _four_workers()[:3]  # one of four: within the share when known

    h.step()
    h.step()
    assert len(h.engine.ups) == 1
    assert h.daemon.status()["heldDeletions"]["workers"] == [f"{NS}/w3"]
    assert h.daemon.status()["consecutiveFailures"] == 0

    listing["fails"] = False
    h.step()
    assert len(h.engine.ups) == 2
    assert _program_workers(h) == {f"{NS}/w{i}" for i in range(3)}


def test_a_daemon_that_neither_lists_nor_remembers_the_running_workers_applies_nothing() -> None:
    def replicas(live: dict[str, int]) -> dict[str, int]:
        raise LookupError("deployments not listed yet")

    h = make_daemon(_guarded_fleet(_four_workers()), read_replicas=replicas)
    h.step()
    assert h.engine.ups == []
    assert "running workers are unknown" in h.daemon.status()["lastOutcome"]["message"]


def test_a_burst_of_deletions_seen_in_part_is_held_whole() -> None:
    # A CRD's deletion reaches the watch as a burst of events: the first iteration sees one
    # worker of four gone (within the share; its up waits for the burst to end), the next
    # sees three. The first deletion must not slip out of the hold.
    h = make_daemon(_guarded_fleet(_four_workers()), settings=DaemonSettings(reconcile_interval=30))
    sleeps = 0

    def burst() -> None:
        nonlocal sleeps
        sleeps += 1
        if sleeps == 1:
            h.live.update({f"{NS}/w{i}": 1 for i in range(4)})
            h.fleet["workers"] = _four_workers()[1:]
            h.daemon.wakeup.set()
        elif sleeps == 3:
            h.fleet["workers"] = _four_workers()[3:]
            h.daemon.wakeup.set()
        elif sleeps > 12:
            h.daemon.request_stop()

    h.clock.on_sleep = burst
    assert h.daemon.run() == 0

    assert len(h.engine.ups) == 1  # only the first: the burst is held whole
    assert h.daemon.status()["heldDeletions"]["workers"] == [f"{NS}/w{i}" for i in range(3)]
    assert _program_workers(h) == {f"{NS}/w{i}" for i in range(4)}
