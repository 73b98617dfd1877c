"""A shard's part of a watch its daemon shares costs the shard's size, not the fleet's.

Every status the daemon writes is a new version of the shared TemporalWorker list. At
20 shards of 250 workers each shard cut its part out of all 5000 objects after every
write (a profile of the N=5000 no-op iteration: 13 % of it in that cut). Now the list is
grouped by namespace once per version for every shard, an unchanged object keeps its
copy, and a shard whose namespaces' groups are the same ones keeps its value as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from tests.unit._native_objects import worker_obj
from twc.kube.watch import NativeWatch
from twc.loop.shardviews import FanoutWakeup, ShardNamespaces, ShardNative
from twc.shards import NamespaceGroups, _slice

SHARDS = 20
PER_SHARD = 10


class _Api:
    """Answers the TemporalWorker list with what the test holds."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def list_cluster_custom_object(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"items": list(self.items), "metadata": {"resourceVersion": "7"}}


def _fleet() -> list[dict[str, Any]]:
    return [
        worker_obj(f"w-{s:02d}-{i}", namespace=f"ns-{s:02d}")
        for s in range(SHARDS)
        for i in range(PER_SHARD)
    ]


def _watched(items: list[dict[str, Any]]) -> NativeWatch:
    watch = NativeWatch(_Api(items), (), resync_interval=300, crd_exists=lambda _: True)
    watch.list_now()
    return watch


def _views(watch: NativeWatch, groups: NamespaceGroups) -> list[ShardNative]:
    return [
        ShardNative(watch, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), groups)
        for s in range(SHARDS)
    ]


def _values(views: list[ShardNative]) -> list[Any]:
    return [next(iter(v.observed().values())) for v in views]


def test_a_status_write_costs_every_shard_together_its_own_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Cut by each shard, it was every object for each of the 20 shards (4000 here);
    # grouped once per version of the list, every object once (200); kept by namespace
    # in the watch, the written object's namespace alone (10).
    from twc.kube.watch import ObjectWatcher

    items = _fleet()
    watch = _watched(items)
    views = _views(watch, NamespaceGroups())
    _values(views)
    looked_at: list[str] = []
    handed_out = ObjectWatcher._handed_out
    namespace_of = _slice._namespace_of

    def counted(self: ObjectWatcher, key: str, copies: bool) -> Mapping[str, Any]:
        looked_at.append(key)
        return handed_out(self, key, copies)

    def grouped_again(obj: Mapping[str, Any]) -> str:
        looked_at.append("grouped again")
        return namespace_of(obj)

    monkeypatch.setattr(ObjectWatcher, "_handed_out", counted)
    monkeypatch.setattr(_slice, "_namespace_of", grouped_again)
    written = copy.deepcopy(items[0])
    written["status"] = {"phase": "Ready"}
    watch._workers._apply("MODIFIED", written)
    _values(views)

    assert sorted(looked_at) == sorted(f"ns-00/w-00-{i}" for i in range(PER_SHARD))


def test_a_namespaces_group_is_the_same_tuple_while_its_objects_are_the_same() -> None:
    a1, a2, b1 = (
        worker_obj("a1", namespace="a"),
        worker_obj("a2", namespace="a"),
        worker_obj("b1", namespace="b"),
    )
    cluster = {"metadata": {"name": "shared"}}
    groups = NamespaceGroups()
    first = groups.of("kind", (a1, cluster, b1, a2))
    assert first == {"a": (a1, a2), "b": (b1,), "": (cluster,)}

    b1_written = {**b1, "status": {"phase": "Ready"}}
    second = groups.of("kind", (a1, cluster, b1_written, a2))
    assert second["a"] is first["a"]
    assert second[""] is first[""]
    assert second["b"] is not first["b"]
    assert second["b"] == (b1_written,)

    parts = groups.parts("kind", (a1, cluster, b1_written, a2), ("a", "c"))
    assert parts == ((cluster,), (a1, a2), ())


def test_with_nothing_changed_no_shard_looks_at_the_shared_lists_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The shared watch's snapshot was a new sorted tuple on every call, so every shard
    # grouped all the Queues again on every iteration: 17 ms of a no-op at 5000 Queues.
    from twc.kube.watch import QueueWatcher
    from twc.loop.shardviews import ShardQueues

    queues = QueueWatcher(
        _Api([queue_obj(f"q-{s}-{i}", f"ns-{s:02d}") for s in range(SHARDS) for i in range(3)]),
        resync_interval=300,
        crd_exists=lambda _: True,
    )
    queues.list_now()
    native = _watched(_fleet())
    groups = NamespaceGroups()
    shard_queues = [
        ShardQueues(queues, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), groups)
        for s in range(SHARDS)
    ]
    shard_native = _views(native, NamespaceGroups())

    def look() -> list[Any]:
        out: list[Any] = []
        for q, n in zip(shard_queues, shard_native, strict=True):
            out += [q.observed(), q.snapshot(), n.observed(), n.snapshot()]
        return out

    first = look()
    looked_at: list[object] = []
    namespace_of = _slice._namespace_of

    def counted(obj: Mapping[str, Any]) -> str:
        looked_at.append(obj)
        return namespace_of(obj)

    monkeypatch.setattr(_slice, "_namespace_of", counted)
    again = look()
    assert looked_at == []
    assert queues.snapshot() is queues.snapshot()
    assert [a == b for a, b in zip(first, again, strict=True)] == [True] * len(first)
    assert first[0].objects is not None
    assert {o["metadata"]["name"] for o in first[0].objects} == {"q-0-0", "q-0-1", "q-0-2"}


def queue_obj(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kmsvc.temporal.io/v1",
        "kind": "Queue",
        "metadata": {"name": name, "namespace": namespace, "labels": {}},
        "spec": {"taskQueue": name},
    }


def test_a_watch_keeps_its_objects_by_namespace_through_every_kind_of_change() -> None:
    a2, a1, b1 = (
        worker_obj("a2", namespace="a"),
        worker_obj("a1", namespace="a"),
        worker_obj("b1", namespace="b"),
    )
    cluster = {"metadata": {"name": "shared"}, "spec": {}}
    watch = _watched([a2, a1, b1, cluster])._workers
    first = watch.grouped()
    assert first is not None
    assert {ns: [o["metadata"]["name"] for o in g] for ns, g in first.items()} == {
        "a": ["a1", "a2"],
        "b": ["b1"],
        "": ["shared"],
    }
    copies = watch.grouped(copies=True)
    assert copies is not None
    assert copies["a"] == first["a"]
    assert all(c is not o for c, o in zip(copies["a"], first["a"], strict=True))

    watch._apply("ADDED", worker_obj("b2", namespace="b"))
    second = watch.grouped()
    assert second is not None
    assert second["a"] is first["a"]
    assert second[""] is first[""]
    assert [o["metadata"]["name"] for o in second["b"]] == ["b1", "b2"]
    again = watch.grouped(copies=True)
    assert again is not None
    assert again["a"] is copies["a"], "an unchanged namespace's copies are the same tuple"

    watch._apply("DELETED", b1)
    watch._apply("DELETED", watch.by_key()["b/b2"])  # type: ignore[index]
    third = watch.grouped()
    assert third is not None
    assert "b" not in third
    assert third["a"] is first["a"]

    # A re-list is a new version of every object: every group is made again.
    watch._replace({"a/a1": worker_obj("a1", namespace="a")})
    listed = watch.grouped()
    assert listed is not None
    assert set(listed) == {"a"}
    assert [o["metadata"]["name"] for o in listed["a"]] == ["a1"]

    watch._unknown = "list failed"
    assert watch.grouped() is None
