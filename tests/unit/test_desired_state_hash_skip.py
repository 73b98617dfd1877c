"""The desired-state hash is canonical, and an unchanged hash skips the engine entirely."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twc.reconcile.state import (
    DesiredState,
    ReconcileAction,
    canonical_json,
    changed_workers,
    decide_reconcile,
    desired_state,
    state_hash,
)


def worker(image: str = "w:1", replicas: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "image": image,
        "replicas": replicas,
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
        "lifecycle": {"preStopCommand": ["sh", "-c", "sleep 5"]},
        **extra,
    }


FLEET = {name: worker() for name in ("a", "b", "c", "d", "e")}
SHARED = {"connections": [{"name": "prod", "hostPort": "t:7233"}]}


def state(workers: dict[str, Any] = FLEET, **kwargs: Any) -> DesiredState:
    return desired_state(workers, shared=kwargs.pop("shared", SHARED), **kwargs)


def test_hash_is_stable_across_dict_insertion_order() -> None:
    one = {"b": {"y": 1, "x": [1, {"q": 1, "p": 2}]}, "a": None}
    two = {"a": None, "b": {"x": [1, {"p": 2, "q": 1}], "y": 1}}

    assert state_hash(one) == state_hash(two)
    assert canonical_json(one) == '{"a":null,"b":{"x":[1,{"p":2,"q":1}],"y":1}}'


def test_worker_order_does_not_matter() -> None:
    reordered = dict(reversed(list(FLEET.items())))

    assert state(reordered) == state(FLEET)


def test_list_order_matters_but_set_order_does_not() -> None:
    assert state_hash({"cmd": ["a", "b"]}) != state_hash({"cmd": ["b", "a"]})
    assert state_hash({"tags": {"a", "b", "c"}}) == state_hash({"tags": {"c", "b", "a"}})
    assert state_hash(("a", 1)) == state_hash(["a", 1])


def test_hash_is_sha256_hex() -> None:
    digest = state_hash({"a": 1})

    assert len(digest) == 64
    assert digest == state_hash({"a": 1})
    assert digest != state_hash({"a": 2})


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({"a": object()}, TypeError),
        ({"a": b"bytes"}, TypeError),
        ({"a": math.nan}, ValueError),
        ({"a": [math.inf]}, ValueError),
    ],
    ids=["object", "bytes", "nan", "inf"],
)
def test_non_plain_data_is_refused(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        state_hash(value)


def test_a_no_op_iteration_skips() -> None:
    previous = state()

    decision = decide_reconcile(previous, state(), target_threshold=3)

    assert decision.action is ReconcileAction.SKIP
    assert decision.workers == frozenset()


def test_one_changed_worker_is_targeted() -> None:
    previous = state()
    changed = {**FLEET, "c": worker(image="w:2")}

    decision = decide_reconcile(previous, state(changed), target_threshold=3)

    assert decision.action is ReconcileAction.TARGETED
    assert decision.modified == {"c"}
    assert decision.workers == {"c"}


def test_many_changes_run_a_full_up() -> None:
    previous = state()
    changed = {name: worker(image="w:2") for name in FLEET}

    decision = decide_reconcile(previous, state(changed), target_threshold=3)

    assert decision.action is ReconcileAction.FULL
    assert decision.modified == set(FLEET)


def test_removal_counts_as_a_change() -> None:
    previous = state()
    fewer = {k: v for k, v in FLEET.items() if k != "e"}

    decision = decide_reconcile(previous, state(fewer), target_threshold=3)

    assert decision.action is ReconcileAction.TARGETED
    assert (decision.removed, decision.added, decision.modified) == (
        frozenset({"e"}),
        frozenset(),
        frozenset(),
    )


def test_addition_counts_as_a_change() -> None:
    previous = state()

    decision = decide_reconcile(previous, state({**FLEET, "f": worker()}), target_threshold=3)

    assert (decision.action, decision.added) == (ReconcileAction.TARGETED, frozenset({"f"}))


def test_threshold_counts_added_removed_and_modified_together() -> None:
    previous = state()
    changed = {k: v for k, v in FLEET.items() if k != "e"}
    changed |= {"a": worker(image="w:2"), "f": worker()}

    at_three = decide_reconcile(previous, state(changed), target_threshold=3)
    at_two = decide_reconcile(previous, state(changed), target_threshold=2)

    assert at_three.action is ReconcileAction.TARGETED
    assert at_two.action is ReconcileAction.FULL
    assert at_two.workers == {"a", "e", "f"}


def test_threshold_zero_never_targets() -> None:
    changed = {**FLEET, "a": worker(image="w:2")}

    decision = decide_reconcile(state(), state(changed), target_threshold=0)

    assert decision.action is ReconcileAction.FULL


def test_a_shared_change_runs_a_full_up() -> None:
    other = {"connections": [{"name": "prod", "hostPort": "u:7233"}]}

    decision = decide_reconcile(state(), state(shared=other), target_threshold=3)

    assert decision.action is ReconcileAction.FULL
    assert decision.workers == frozenset()


def test_nothing_applied_yet_runs_a_full_up() -> None:
    assert decide_reconcile(None, state(), target_threshold=3).action is ReconcileAction.FULL


def test_a_permanently_failed_state_is_not_retried_as_is() -> None:
    previous = state()
    broken = state({**FLEET, "a": worker(image="")})
    fixed = state({**FLEET, "a": worker(image="w:3")})

    blocked = decide_reconcile(previous, broken, target_threshold=3, blocked=broken.fleet)
    unblocked = decide_reconcile(previous, fixed, target_threshold=3, blocked=broken.fleet)

    assert blocked.action is ReconcileAction.SKIP
    assert unblocked.action is ReconcileAction.TARGETED


def test_changed_workers_compares_per_worker_hashes() -> None:
    old = {"a": "1", "b": "2", "c": "3"}
    new = {"a": "1", "b": "9", "d": "4"}

    assert changed_workers(old, new) == {"b", "c", "d"}
    assert changed_workers(old, dict(old)) == set()


def test_desired_state_is_immutable() -> None:
    desired = state()

    with pytest.raises(dataclasses.FrozenInstanceError):
        desired.fleet = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        desired.workers["a"] = "x"  # type: ignore[index]


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=8), plain, max_size=8), st.randoms())
def test_any_reordering_of_dicts_keeps_the_hash(data: dict[str, Any], rng: Any) -> None:
    def shuffled(value: Any) -> Any:
        if isinstance(value, dict):
            items = list(value.items())
            rng.shuffle(items)
            return {k: shuffled(v) for k, v in items}
        if isinstance(value, list):
            return [shuffled(v) for v in value]
        return value

    assert state_hash(shuffled(data)) == state_hash(data)
