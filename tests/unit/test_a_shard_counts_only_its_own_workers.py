"""A shard's loop reads the shared Deployment cache cut to its namespaces: the deletion
guard counts the workers the shard runs, and another shard's are not deletions of it."""

from __future__ import annotations

import pytest

from twc.loop.shardviews import ShardNamespaces, shard_keyed, shard_keys

pytestmark = pytest.mark.unit


def test_a_shared_reading_is_cut_to_the_shards_namespaces_as_they_grow() -> None:
    shared = {"a": {"a/w1": 2, "a/w2": 1}, "b": {"b/w3": 4}, "ab": {"ab/w4": 1}}
    namespaces = ShardNamespaces(("a",))
    mine = shard_keyed(lambda: shared, namespaces)

    assert mine() == {"a/w1": 2, "a/w2": 1}

    namespaces.update(("a", "b"))
    assert mine() == {"a/w1": 2, "a/w2": 1, "b/w3": 4}


def test_the_autoscaled_keys_are_cut_once_per_reading_of_the_shared_cache() -> None:
    # Every shard's loop reads the keys on every iteration; cutting all of the fleet's
    # each time grew a shard's iteration with the fleet.
    readings: list[dict[str, list[str]]] = [{"a": ["a/w1"], "b": ["b/w3"]}]
    reads: list[int] = []

    def read() -> dict[str, list[str]]:
        reads.append(1)
        return readings[-1]

    namespaces = ShardNamespaces(("a",))
    mine = shard_keys(read, namespaces)

    first = mine()
    assert first == frozenset({"a/w1"})
    assert mine() is first, "the same reading was cut again"

    readings.append({"a": ["a/w1", "a/w2"], "b": ["b/w3"]})  # the cache saw a change
    assert mine() == frozenset({"a/w1", "a/w2"})
    namespaces.update(("a", "b"))
    assert mine() == frozenset({"a/w1", "a/w2", "b/w3"})
    assert len(reads) == 4
