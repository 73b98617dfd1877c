"""A shard's loop reads the shared Deployment cache cut to its namespaces: the deletion
guard counts the workers the shard runs, and another shard's are not deletions of it."""

from __future__ import annotations

import pytest

from twc.loop.shardviews import ShardNamespaces, shard_keyed, shard_keys

pytestmark = pytest.mark.unit


def test_a_shared_reading_is_cut_to_the_shards_namespaces_as_they_grow() -> None:
    shared = {"a/w1": 2, "a/w2": 1, "b/w3": 4, "ab/w4": 1}
    namespaces = ShardNamespaces(("a",))
    mine = shard_keyed(lambda: shared, namespaces)

    assert mine() == {"a/w1": 2, "a/w2": 1}

    namespaces.update(("a", "b"))
    assert mine() == {"a/w1": 2, "a/w2": 1, "b/w3": 4}


def test_the_autoscaled_keys_are_cut_once_per_reading_of_the_shared_cache() -> None:
    # Every shard's loop reads the keys on every iteration; cutting all of the fleet's
    # each time grew a shard's iteration with the fleet.
    readings = [["a/w1", "b/w3"]]
    reads: list[int] = []

    def read() -> list[str]:
        reads.append(1)
        return readings[-1]

    namespaces = ShardNamespaces(("a",))
    mine = shard_keys(read, namespaces)

    first = mine()
    assert first == frozenset({"a/w1"})
    assert mine() is first, "the same reading was cut again"

    readings.append(["a/w1", "a/w2", "b/w3"])  # the cache saw a change
    assert mine() == frozenset({"a/w1", "a/w2"})
    namespaces.update(("a", "b"))
    assert mine() == frozenset({"a/w1", "a/w2", "b/w3"})
    assert len(reads) == 4


def test_every_shard_together_groups_a_new_reading_once() -> None:
    # A Deployment's status change is a new reading of the whole cache: 20 shards each
    # testing all of 5000 keys was 100 000 tests per reading; grouped once by namespace,
    # each shard takes its own namespaces' keys.
    from twc.loop.shardviews import KeyGroups

    class Counted(dict[str, int]):
        iterated = 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            Counted.iterated += 1
            return super().__iter__()

    shared = Counted({f"ns-{s:02d}/w{i}": i for s in range(20) for i in range(5)})
    groups = KeyGroups()
    shards = [
        shard_keyed(lambda: shared, ShardNamespaces((f"ns-{s:02d}",)), groups) for s in range(20)
    ]

    cuts = [mine() for mine in shards]

    assert Counted.iterated == 1, "the reading was gone through once per shard"
    assert cuts[3] == {f"ns-03/w{i}": i for i in range(5)}
    assert sum(len(c) for c in cuts) == len(shared)
