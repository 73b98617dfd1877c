"""A change to one namespaced object wakes only the shards whose namespaces hold it.

At 5000 workers (20 shards) every Queue, TemporalWorker or Connection event woke all 20
shards' loops: 19 of them iterated for nothing, and the one the object concerned waited
for the GIL behind them (bench/n5000-shared-parse: Queue → polling p50 59.8 s).
"""

from __future__ import annotations

import threading
from typing import Any

from tests.unit._daemon_fakes import queue_object
from twc.kube.watch import QueueWatcher
from twc.reconcile.shards import FanoutWakeup, ShardNamespaces, ShardQueues


class _Api:
    """Answers the Queue list with what the test holds."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def list_cluster_custom_object(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"items": list(self.items), "metadata": {"resourceVersion": "7"}}


def _shards(fanout: FanoutWakeup, watcher: QueueWatcher, *namespaces: tuple[str, ...]) -> Any:
    loops = []
    for owned in namespaces:
        event = threading.Event()
        ShardQueues(watcher, ShardNamespaces(owned), fanout).start(event)
        loops.append((event, owned))
    return loops


def _woken(loops: Any) -> list[bool]:
    return [event.is_set() for event, _ in loops]


def _listed(fanout: FanoutWakeup, loops: Any, items: list[dict[str, Any]]) -> QueueWatcher:
    watcher = QueueWatcher(_Api(items), resync_interval=300, crd_exists=lambda _: True)
    watcher._wakeup = fanout  # what start() hands it, without the thread
    watcher.list_now()
    for event, _ in loops:
        event.clear()
    return watcher


def test_a_new_queue_wakes_only_the_shard_of_its_namespace() -> None:
    fanout = FanoutWakeup()
    watcher = _listed(fanout, [], [])
    loops = _shards(fanout, watcher, ("team-a",), ("team-b", "team-c"))

    watcher._apply("ADDED", queue_object("orders", namespace="team-c"))

    assert _woken(loops) == [False, True]
    cut: Any = ShardQueues(watcher, lambda: ("team-c",), fanout).observed().objects
    assert [o["metadata"]["name"] for o in cut] == ["orders"]


def test_a_deleted_queue_wakes_only_the_shard_of_its_namespace() -> None:
    fanout = FanoutWakeup()
    orders = queue_object("orders", namespace="team-a")
    loops = _shards(fanout, QueueWatcher(_Api([]), resync_interval=300), ("team-a",), ("team-b",))
    watcher = _listed(fanout, loops, [orders])

    watcher._apply("DELETED", orders)

    assert _woken(loops) == [True, False]


def test_a_namespace_a_shard_was_given_later_wakes_it() -> None:
    fanout = FanoutWakeup()
    watcher = _listed(fanout, [], [])
    owned = ShardNamespaces(("team-a",))
    event = threading.Event()
    ShardQueues(watcher, owned, fanout).start(event)

    watcher._apply("ADDED", queue_object("orders", namespace="team-b"))
    assert not event.is_set()

    owned.update(("team-a", "team-b"))
    watcher._apply("ADDED", queue_object("billing", namespace="team-b"))
    assert event.is_set()


def test_a_change_without_a_namespace_wakes_every_shard() -> None:
    # A cluster-scoped object (a ClusterConnection), a re-list, a fleet-file edit.
    fanout = FanoutWakeup()
    watcher = _listed(fanout, [], [])
    loops = _shards(fanout, watcher, ("team-a",), ("team-b",))

    fanout.set_for(None)
    assert _woken(loops) == [True, True]

    for event, _ in loops:
        event.clear()
    watcher._api.items = [queue_object("orders", namespace="team-b")]
    watcher.list_now()  # a re-list that found a change
    assert _woken(loops) == [True, True]


def test_a_status_change_wakes_no_shard() -> None:
    fanout = FanoutWakeup()
    orders = queue_object("orders", namespace="team-a")
    loops = _shards(fanout, QueueWatcher(_Api([]), resync_interval=300), ("team-a",))
    watcher = _listed(fanout, loops, [orders])

    watcher._apply("MODIFIED", {**orders, "status": {"ready": True}})

    assert _woken(loops) == [False]
