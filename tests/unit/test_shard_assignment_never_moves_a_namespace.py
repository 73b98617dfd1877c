"""Namespaces are assigned to shards once: new ones fill the least-filled shard with
room, open a new shard when none has room, and never move an assigned namespace."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twc.shards import ShardMap, assign, shard_stack
from twc.spec.labels import owner_stack


def test_an_empty_map_fills_shards_up_to_the_limit_in_name_order() -> None:
    shard_map = assign(ShardMap(), {"a": 100, "b": 100, "c": 100}, max_workers_per_shard=250)

    assert shard_map.shards == 2
    # a (100) and b (100) fit shard 0 together; c (100) would make it 300.
    assert dict(shard_map.namespaces) == {"a": 0, "b": 0, "c": 1}


def test_a_new_namespace_joins_the_least_filled_shard_with_room() -> None:
    current = ShardMap(namespaces={"a": 0, "b": 1}, shards=2)

    shard_map = assign(current, {"a": 200, "b": 50, "c": 40}, max_workers_per_shard=250)

    assert shard_map.shard_of("c") == 1
    assert shard_map.shards == 2


def test_when_no_shard_has_room_a_new_one_is_opened() -> None:
    current = ShardMap(namespaces={"a": 0, "b": 1}, shards=2)

    shard_map = assign(current, {"a": 240, "b": 240, "c": 20}, max_workers_per_shard=250)

    assert shard_map.shard_of("c") == 2
    assert shard_map.shards == 3


def test_a_namespace_larger_than_the_limit_gets_a_shard_of_its_own() -> None:
    shard_map = assign(ShardMap(), {"big": 900, "small": 10}, max_workers_per_shard=250)

    assert shard_map.shard_of("big") == 0
    assert shard_map.shard_of("small") == 1


def test_assigned_namespaces_never_move_even_over_the_limit_or_when_gone() -> None:
    current = ShardMap(namespaces={"a": 0, "b": 0, "gone": 1}, shards=2)

    # `a` grew past the limit and `gone` has no workers any more: both stay.
    shard_map = assign(current, {"a": 400, "b": 10, "new": 5}, max_workers_per_shard=250)

    assert shard_map.shard_of("a") == 0
    assert shard_map.shard_of("b") == 0
    assert shard_map.shard_of("gone") == 1
    assert shard_map.shard_of("new") == 1  # shard 0 is over the limit
    assert assign(shard_map, {"a": 400}, max_workers_per_shard=250) is shard_map


@given(
    first=st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.integers(0, 300)),
    second=st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), st.integers(0, 300)),
    limit=st.integers(1, 500),
)
def test_extending_keeps_every_earlier_assignment(
    first: dict[str, int], second: dict[str, int], limit: int
) -> None:
    before = assign(ShardMap(), first, max_workers_per_shard=limit)
    after = assign(before, {**first, **second}, max_workers_per_shard=limit)

    for namespace, index in before.namespaces.items():
        assert after.shard_of(namespace) == index
    assert set(after.namespaces) == set(first) | set(second)
    assert after.shards >= before.shards
    # Every caller computes the same map from the same inputs.
    assert assign(before, {**first, **second}, max_workers_per_shard=limit) == after


def test_the_map_round_trips_through_its_configmap_form() -> None:
    shard_map = ShardMap(namespaces={"a": 0, "b": 2}, shards=3)

    assert ShardMap.from_json(shard_map.to_json()) == shard_map
    assert shard_map.namespaces_of(2) == ("b",)
    assert shard_map.namespaces_of(1) == ()


def test_a_map_cannot_name_a_shard_it_does_not_have() -> None:
    with pytest.raises(ValueError, match="cannot hold"):
        ShardMap(namespaces={"a": 3}, shards=2)


def test_shard_stacks_are_named_after_the_stack() -> None:
    assert shard_stack("prod", 3) == "prod.s03"
    assert owner_stack("prod.s03") == "prod"
    assert owner_stack("prod.eu.s12") == "prod.eu"
    assert owner_stack("prod") == "prod"
    assert [shard_stack("prod", i) for i in range(2)] == ["prod.s00", "prod.s01"]
