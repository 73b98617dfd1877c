"""A shard's loop reads the shared Deployment cache cut to its namespaces: the deletion
guard counts the workers the shard runs, and another shard's are not deletions of it."""

from __future__ import annotations

import pytest

from twc.reconcile.shards import ShardNamespaces, shard_keyed

pytestmark = pytest.mark.unit


def test_a_shared_reading_is_cut_to_the_shards_namespaces_as_they_grow() -> None:
    shared = {"a": {"a/w1": 2, "a/w2": 1}, "b": {"b/w3": 4}, "ab": {"ab/w4": 1}}
    namespaces = ShardNamespaces(("a",))
    mine = shard_keyed(lambda: shared, namespaces)

    assert mine() == {"a/w1": 2, "a/w2": 1}

    namespaces.update(("a", "b"))
    assert mine() == {"a/w1": 2, "a/w2": 1, "b/w3": 4}
