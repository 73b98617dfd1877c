"""A shard's view of the shared watches stays the same value while its own objects do.

Every status the daemon writes changes the shared watch's objects; the other 19 shards
of a 5000-worker daemon then cut a new slice of them, equal to the last one. The loop
keeps what it derived from a slice while the slice is the same value (by identity), so
a new, equal one made each shard derive its views again.
"""

from __future__ import annotations

import copy
import threading

from tests.unit._daemon_fakes import queue_object
from tests.unit._native_objects import worker_obj
from twc.desired import ObjectList, same_but_status
from twc.kube.watch import NativeSnapshot, StaticNative, StaticQueues
from twc.loop.shardviews import FanoutWakeup, ShardNamespaces, ShardNative, ShardQueues

WORKERS = "TemporalWorker.temporal.kmsvc.io"


def _native(*objects: dict[str, object]) -> StaticNative:
    return StaticNative(NativeSnapshot(workers=tuple(objects)))


def test_another_shards_status_write_keeps_this_shards_slice() -> None:
    mine, theirs = (
        worker_obj("orders", namespace="team-a"),
        worker_obj("billing", namespace="team-b"),
    )
    shared = _native(mine, theirs)
    view = ShardNative(shared, ShardNamespaces(("team-a",)), FanoutWakeup())
    first = view.observed()

    written = copy.deepcopy(theirs)
    written["status"] = {"phase": "Ready"}
    shared.replace(NativeSnapshot(workers=(mine, written)))

    assert next(iter(first.values())) is next(iter(view.observed().values()))


def test_a_change_to_this_shards_objects_is_a_new_slice() -> None:
    mine = worker_obj("orders", namespace="team-a")
    shared = _native(mine)
    view = ShardNative(shared, ShardNamespaces(("team-a",)), FanoutWakeup())
    before = next(iter(view.observed().values()))

    shared.replace(
        NativeSnapshot(workers=(worker_obj("orders", namespace="team-a", generation=2),))
    )

    after = next(iter(view.observed().values()))
    assert after is not before
    assert after.objects is not None
    assert after.objects[0]["metadata"] == {**mine["metadata"], "generation": 2}


def test_the_shards_queues_are_the_same_value_while_they_are_the_same() -> None:
    source = StaticQueues([queue_object("orders", namespace="team-a")])
    view = ShardQueues(source, ShardNamespaces(("team-a",)), FanoutWakeup())
    view.start(threading.Event())
    first = view.observed()

    source.replace(
        [queue_object("orders", namespace="team-a"), queue_object("x", namespace="team-b")]
    )
    assert view.observed() is first

    source.replace(
        [queue_object("orders", namespace="team-a"), queue_object("y", namespace="team-a")]
    )
    assert view.observed() is not first


def test_objects_that_differ_only_in_status_are_the_same_but_status() -> None:
    obj = worker_obj("orders")
    written = copy.deepcopy(obj)
    written["status"] = {"phase": "Ready"}
    written["metadata"]["resourceVersion"] = "11"
    written["metadata"]["managedFields"] = [{"manager": "twc", "subresource": "status"}]
    edited = copy.deepcopy(obj)
    edited["spec"]["image"] = "registry.example/worker:2.0.0"
    labelled = copy.deepcopy(obj)
    labelled["metadata"]["labels"] = {"team": "a"}

    before = ObjectList.of_api([obj])
    assert before.same_but_status(ObjectList.of_api([written]))
    assert not before.same_but_status(ObjectList.of_api([edited]))
    assert not before.same_but_status(ObjectList.of_api([labelled]))
    assert not before.same_but_status(ObjectList.of_api([]))
    assert not before.same_but_status(ObjectList.unknown("list failed"))
    assert same_but_status({WORKERS: before}, {WORKERS: ObjectList.of_api([written])})
    assert not same_but_status({WORKERS: before}, {WORKERS: ObjectList.of_api([edited])})
    assert not same_but_status({WORKERS: before}, None)
