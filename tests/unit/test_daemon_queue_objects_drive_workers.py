"""Labelled Queue objects become workers; an invalid one is reported and skipped alone."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from tests.unit._daemon_fakes import NS, fleet_data, make_daemon, program_queues, queue_object
from tests.unit._native_objects import merge_queue_objects
from twc.desired import ObjectList
from twc.kube.watch import QueueWatcher
from twc.reconcile.outcome import OutcomeKind
from twc.spec import load_fleet


def _derived(h: Any) -> set[str]:
    return set(program_queues(h.engine.last_inputs))


def test_a_new_queue_object_wakes_the_loop_and_the_next_iteration_runs_an_up() -> None:
    h = make_daemon()
    h.step()
    assert not h.daemon.wakeup.is_set()

    h.queues.replace([queue_object("orders", partitions=3)])

    assert h.daemon.wakeup.is_set()  # the sleep between iterations ends at once
    h.step()
    assert len(h.engine.ups) == 2
    assert h.engine.ups[1][1] is None  # a new queue is a shared change: full up
    assert _derived(h) == {"orders"}
    assert h.metrics.value("twc_worker_desired_replicas", worker=f"{NS}/worker-orders") == 3


def test_deleting_the_queue_object_runs_an_up_without_its_worker() -> None:
    h = make_daemon(queues=[queue_object("orders")])
    h.step()
    assert _derived(h) == {"orders"}

    h.queues.replace([])
    h.step()

    assert len(h.engine.ups) == 2
    assert _derived(h) == set()
    assert h.metrics.value("twc_worker_desired_replicas", worker=f"{NS}/worker-orders") is None


def test_an_invalid_queue_object_is_skipped_and_counted_while_valid_ones_apply() -> None:
    bad_name = queue_object("bad.name")
    bad_partitions = queue_object("zero")
    bad_partitions["spec"]["partitions"] = 0
    h = make_daemon(
        queues=[queue_object("orders"), bad_name, bad_partitions, queue_object("refunds")]
    )

    state = h.step()

    assert state.last_outcome is not None
    assert state.last_outcome.ok
    assert _derived(h) == {"orders", "refunds"}
    assert h.metrics.value("twc_invalid_queue_objects") == 2
    assert h.metrics.value("twc_cluster_queue_objects") == 2


def test_a_queue_whose_derived_worker_clashes_with_the_file_is_rejected_alone() -> None:
    # The file already has a worker named like the one "orders" would derive.
    fleet = fleet_data(
        workers=[{"name": "worker-orders", "namespace": NS, "taskQueueName": "something-else"}]
    )
    h = make_daemon(fleet, queues=[queue_object("orders"), queue_object("refunds")])

    h.step()

    assert _derived(h) == {"refunds"}
    assert h.metrics.value("twc_invalid_queue_objects") == 1


def test_a_queue_declared_in_the_file_wins_over_the_cluster_object() -> None:
    fleet = load_fleet(
        fleet_data(queues=[{"name": "orders", "namespace": NS, "workerEnabled": True}]), "f.yaml"
    )

    merged = merge_queue_objects(fleet, [queue_object("orders", partitions=5)], file="f.yaml")

    assert merged.accepted == {}
    assert merged.rejected == ()
    assert [q.partitions for q in merged.fleet.queues] == [None]


def test_no_up_runs_before_the_queue_objects_were_listed() -> None:
    h = make_daemon()

    class NotListed:
        def start(self, wakeup: threading.Event) -> None: ...
        def stop(self) -> None: ...
        def snapshot(self) -> None:
            return None

        def observed(self) -> ObjectList:
            return ObjectList.unknown("not listed yet")

    observer = h.daemon.observer
    observer.sources = dataclasses.replace(observer.sources, queues=NotListed())

    state = h.step()

    assert h.engine.ups == []  # an up now would delete every Queue-derived worker
    assert state.last_outcome is not None
    assert state.last_outcome.kind is OutcomeKind.TEMPORARY
    assert "Queue.kmsvc.io: not listed yet" in state.last_outcome.message
    assert state.last_outcome.delay == 1.0
    assert "ClusterObjectsUnknown" in h.daemon.status()["faults"]


class FakeCustomApi:
    """Answers the watcher's list like the API server, then ends the watch at once."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.lists = 0

    def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("watch"):
            raise RuntimeError("no watch in this fake")
        self.lists += 1
        return {"items": list(self.items), "metadata": {"resourceVersion": str(self.lists)}}


def test_the_watcher_lists_once_sets_the_snapshot_and_wakes_the_loop() -> None:
    api = FakeCustomApi([queue_object("orders")])
    watcher = QueueWatcher(api, resync_interval=300)
    wakeup = threading.Event()
    watcher._wakeup = wakeup  # as start() would, without the thread

    assert watcher.snapshot() is None
    watcher.list_now()

    snapshot = watcher.snapshot()
    assert snapshot is not None
    assert [o["metadata"]["name"] for o in snapshot] == ["orders"]
    assert wakeup.is_set()


def test_watch_events_update_the_snapshot_and_only_real_changes_wake_the_loop() -> None:
    watcher = QueueWatcher(FakeCustomApi([]), resync_interval=300)
    wakeup = threading.Event()
    watcher._wakeup = wakeup
    watcher.list_now()
    wakeup.clear()

    obj = queue_object("orders")
    watcher._apply("ADDED", obj)
    assert wakeup.is_set()
    wakeup.clear()

    status_only = {
        **obj,
        "status": {"ready": True},
        "metadata": {**obj["metadata"], "resourceVersion": "2"},
    }
    watcher._apply("MODIFIED", status_only)
    assert not wakeup.is_set()

    watcher._apply("DELETED", obj)
    assert wakeup.is_set()
    assert watcher.snapshot() == ()
