"""A shard's slice of the fleet, of the cluster's objects and of the desired state holds
its namespaces' workers and queues, the connections they use, and nothing else; the
program on a shard stack builds only those."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from tests.unit.pulumi_mocks import RecordingMocks, pulumi_test
from twc.connections import default_registry
from twc.desired import QUEUE_KIND_KEY, WORKER_KIND_KEY, DesiredInputs, ObjectList, desired_fleet
from twc.native.objects import metadata
from twc.reconcile.shards import FanoutWakeup, KeptCuts, ShardNamespaces, ShardNative, ShardQueues
from twc.shards import namespace_load, restrict, slice_fleet, slice_inputs, slice_objects
from twc.spec import load_fleet

FLEET: dict[str, Any] = {
    "apiVersion": "twc.temporal.io/v1",
    "kind": "Fleet",
    "sharding": {"maxWorkersPerShard": 2},
    "defaults": {
        "image": "registry.example/worker:1.0.0",
        "connectionRef": {
            "objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": "main"}
        },
    },
    "clusterConnections": [{"name": "main", "hostPort": "temporal.example:7233"}],
    "connections": [
        {"name": "own", "namespace": "a", "hostPort": "a.example:7233"},
        {"name": "own", "namespace": "b", "hostPort": "b.example:7233"},
    ],
    "queues": [
        {"name": "orders", "namespace": "a", "workerEnabled": True},
        {"name": "shared", "namespace": "b"},
    ],
    "workers": [
        {"name": "w1", "namespace": "a", "taskQueueName": "w1"},
        {"name": "w2", "namespace": "a", "taskQueueName": "w2", "connectionRef": {"name": "own"}},
        {"name": "w3", "namespace": "b", "taskQueueName": "w3"},
        # Polls a queue of namespace b from namespace a.
        {"name": "w4", "namespace": "a", "queueRef": {"name": "shared", "namespace": "b"}},
    ],
}


def _queue_object(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"temporal.io/worker-enabled": "true"},
        },
        "spec": {},
    }


def test_the_fleet_slice_keeps_the_shards_workers_and_what_they_reference() -> None:
    fleet = load_fleet(FLEET, "fleet.yaml")

    a = slice_fleet(fleet, ["a"])

    assert sorted(w.stack_key for w in a.resolved_workers()) == [
        "a/w1",
        "a/w2",
        "a/w4",
        "a/worker-orders",
    ]
    # The queue of b that w4 polls stays, so its reference resolves.
    assert sorted((q.namespace, q.name) for q in a.queues) == [("a", "orders"), ("b", "shared")]
    assert [(c.namespace, c.name) for c in a.connections] == [("a", "own")]
    assert [c.name for c in a.cluster_connections] == ["main"]
    b = slice_fleet(fleet, ["b"])
    assert [w.stack_key for w in b.resolved_workers()] == ["b/w3"]


def test_a_shards_fleet_slice_is_the_same_object_until_the_fleet_or_its_namespaces_change() -> None:
    fleet, namespaces = load_fleet(FLEET, "fleet.yaml"), ShardNamespaces(("a",))
    cuts = KeptCuts(namespaces)

    first = cuts.get("fleet", fleet, slice_fleet)

    assert [w.name for w in first.workers] == ["w1", "w2", "w4"]
    assert cuts.get("fleet", fleet, slice_fleet) is first  # an unchanged memo key compares at once
    again = cuts.get("fleet", load_fleet(FLEET, "fleet.yaml"), slice_fleet)  # a new parse
    assert again is not first
    assert again == first
    namespaces.update(("b",))
    assert [w.name for w in cuts.get("fleet", fleet, slice_fleet).workers] == ["w3"]


def test_cluster_objects_are_sliced_by_namespace_and_cluster_scoped_ones_kept() -> None:
    objects = [
        _queue_object("q1", "a"),
        _queue_object("q2", "b"),
        {"kind": "ClusterConnection", "metadata": {"name": "main"}},
    ]

    kept = slice_objects(objects, {"a"})

    assert [o["metadata"]["name"] for o in kept] == ["q1", "main"]


def test_the_inputs_a_shards_program_gets_hold_its_slice_only() -> None:
    fleet = load_fleet(FLEET, "fleet.yaml")
    inputs = DesiredInputs(
        fleet=FLEET,
        cluster={
            QUEUE_KIND_KEY: ObjectList.known([_queue_object("q1", "a"), _queue_object("q2", "b")]),
            WORKER_KIND_KEY: ObjectList.known([]),
            "ClusterConnection.temporal.io": ObjectList.known([]),
            "Connection.temporal.io": ObjectList.known([]),
        },
        replicas={"a/w1": 3, "b/w3": 2},
        accepted={QUEUE_KIND_KEY: {"a/q1": {"spec": {}}, "b/q2": {"spec": {}}}},
    )

    b = slice_inputs(inputs, fleet, ["b"])

    assert b.fleet is not None
    document: Any = b.fleet
    assert [w["name"] for w in document["workers"]] == ["w3"]
    assert b.cluster is not None
    found: Any = b.cluster[QUEUE_KIND_KEY].objects or ()
    assert [o["metadata"]["name"] for o in found] == ["q2"]
    assert b.replicas == {"b/w3": 2}
    assert set(b.accepted[QUEUE_KIND_KEY]) == {"b/q2"}
    # The same desired state, computed by the shard, holds only b's workers.
    desired = desired_fleet(
        load_fleet(b.fleet, "fleet.yaml"), b, registry=default_registry(), file="fleet.yaml"
    )
    assert sorted(desired.workers) == ["b/w3", "b/worker-q2"]


def test_workers_per_namespace_count_the_file_and_the_cluster() -> None:
    fleet = load_fleet(FLEET, "fleet.yaml")

    load = namespace_load(
        fleet,
        queues=[_queue_object("q1", "c")],
        workers=[{"metadata": {"name": "t", "namespace": "c"}}],
    )

    assert load == {"a": 4, "b": 1, "c": 2}


def test_generated_views_open_no_shard() -> None:
    # Another stack's views of its fleet-file workers sit in that stack's namespaces: a
    # shard opened for them made this stack's guard count that stack's workers as its own.
    fleet = load_fleet(FLEET, "fleet.yaml")
    view = {
        "metadata": {
            "name": "w-0000",
            "namespace": "elsewhere",
            "labels": {"twc.temporal.io/derived-from": "Fleet"},
        }
    }

    load = namespace_load(fleet, queues=[], workers=[view])

    assert load == {"a": 4, "b": 1}


def test_without_cluster_objects_the_clusters_namespaces_get_no_shard() -> None:
    # Another stack's (or a test's) Queue elsewhere on the cluster is no part of a stack
    # that takes the fleet file alone: the daemon opened a shard for its namespace.
    fleet = load_fleet({**FLEET, "clusterObjects": False}, "fleet.yaml")

    load = namespace_load(
        fleet,
        queues=[_queue_object("q1", "c")],
        workers=[{"metadata": {"name": "t", "namespace": "c"}}],
    )

    assert load == {"a": 4, "b": 1}


@pulumi_test
def test_a_shard_stacks_program_builds_its_namespaces_only() -> Any:
    from twc.program import ProgramOptions, build

    fleet = load_fleet(FLEET, "fleet.yaml")
    desired = restrict(
        desired_fleet(fleet, DesiredInputs(), registry=default_registry(), file="fleet.yaml"),
        ["a"],
    )
    mocks = RecordingMocks(
        fake_dynamic={"TaskQueueCheck": {"pollers": 0, "approximateBacklog": 0, "condition": {}}}
    )
    pulumi.runtime.set_mocks(mocks, preview=False)
    statuses = build(
        desired,
        file="fleet.yaml",
        options=ProgramOptions(),
        read_secret=lambda ns, name: None,
    )

    def check(_: Any) -> None:
        assert sorted(statuses) == ["a/w1", "a/w2", "a/w4", "a/worker-orders"]
        queues = sorted(r.name for r in mocks.of_type("twc:kmsvc:Queue"))
        # b/shared is polled from here, but shard b owns it.
        assert queues == ["a/orders"]
        assert not [r for r in mocks.resources if r.name.startswith("b/")]

    return pulumi.Output.all(*statuses.values()).apply(check)


def test_restrict_keeps_only_the_shards_workers() -> None:
    fleet = load_fleet(FLEET, "fleet.yaml")
    desired = desired_fleet(fleet, DesiredInputs(), registry=default_registry(), file="fleet.yaml")

    b = restrict(desired, ["b"])

    assert sorted(b.workers) == ["b/w3"]
    assert set(b.references) == {"b/w3"}
    assert [q.name for q in b.fleet.queues] == ["shared"]


@pytest.mark.parametrize("namespaces", [[], ["zzz"]])
def test_a_shard_without_workers_builds_nothing(namespaces: list[str]) -> None:
    fleet = load_fleet(FLEET, "fleet.yaml")
    desired = desired_fleet(fleet, DesiredInputs(), registry=default_registry(), file="fleet.yaml")

    assert restrict(desired, namespaces).workers == {}


class _SharedNative:
    """The shared watches' readings: the same objects until ``kinds`` is replaced."""

    def __init__(self, kinds: dict[str, ObjectList]) -> None:
        self.kinds = kinds

    def observed(self) -> dict[str, ObjectList]:
        return dict(self.kinds)


def test_a_shards_objects_follow_the_shared_watch_and_its_namespaces() -> None:
    def names(found: dict[str, ObjectList]) -> list[str]:
        return [metadata(o)["name"] for o in found[QUEUE_KIND_KEY].objects or ()]

    shared = _SharedNative({QUEUE_KIND_KEY: ObjectList.known([_queue_object("q1", "a")])})
    namespaces = ShardNamespaces(("a",))
    shard = ShardNative(shared, namespaces, FanoutWakeup())  # type: ignore[arg-type]
    first = shard.observed()
    assert names(first) == ["q1"]
    assert shard.observed()[QUEUE_KIND_KEY] is first[QUEUE_KIND_KEY]  # nothing changed

    both = [_queue_object("q1", "a"), _queue_object("q2", "b"), _queue_object("q3", "a")]
    shared.kinds = {QUEUE_KIND_KEY: ObjectList.known(both)}
    assert names(shard.observed()) == ["q1", "q3"]
    namespaces.update(("a", "b"))
    assert names(shard.observed()) == ["q1", "q3", "q2"]
    shared.kinds = {QUEUE_KIND_KEY: ObjectList.unknown("queues.kmsvc.io: list failed")}
    assert shard.observed()[QUEUE_KIND_KEY].objects is None


class _SharedQueues:
    """The shared Queue watch's reading: the same object until ``found`` is replaced."""

    def __init__(self, found: ObjectList) -> None:
        self.found = found

    def observed(self) -> ObjectList:
        return self.found


def test_a_shards_queues_are_the_same_object_while_the_shared_reading_is() -> None:
    both = [_queue_object("q1", "a"), _queue_object("q2", "b")]
    shared = _SharedQueues(ObjectList.known(both))
    shard = ShardQueues(shared, ShardNamespaces(("b",)), FanoutWakeup())  # type: ignore[arg-type]

    first = shard.observed()

    assert [metadata(o)["name"] for o in first.objects or ()] == ["q2"]
    assert shard.observed() is first
    shared.found = ObjectList.known([*both, _queue_object("q3", "b")])
    assert [metadata(o)["name"] for o in shard.observed().objects or ()] == ["q2", "q3"]
    shared.found = ObjectList.unknown("queues.kmsvc.io: list failed")
    assert shard.observed().objects is None
