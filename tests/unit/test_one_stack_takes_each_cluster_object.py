"""One stack per cluster object: a stack's ``select`` takes the Queue and TemporalWorker
objects it names; one that another stack's ``select`` takes too is refused by both
(``StackConflict``, naming the stacks), kept on its last accepted spec where it ran;
unknown selections hold both kinds (fail closed)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit._daemon_fakes import queue_object
from tests.unit._fake_configmaps import FakeConfigMaps
from tests.unit._native_objects import worker_obj
from twc.connections import Registry
from twc.desired import (
    OWN_STACK,
    QUEUE_KIND_KEY,
    STACKS_KEY,
    WORKER_KIND_KEY,
    DesiredInputs,
    ObjectList,
    ObjectsUnknown,
    desired_fleet,
    object_key,
    trimmed,
)
from twc.errors import SpecError
from twc.kube.record import RecordStore
from twc.spec import load_fleet

REGISTRY = Registry.with_builtins()


def _fleet(select: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {"image": "registry.example/worker:1.0.0", "connectionRef": {"name": "c"}},
        "connections": [
            {"name": "c", "namespace": ns, "hostPort": "t.example:7233"} for ns in ("a", "b")
        ],
    }
    return {**doc, "select": select} if select is not None else doc


def _stacks(**others: dict[str, Any]) -> ObjectList:
    own = {"metadata": {"name": "me", "annotations": {OWN_STACK: "true"}}}
    return ObjectList.known(
        [own, *({"metadata": {"name": n}, "spec": s} for n, s in others.items())]
    )


def _desired(
    select: dict[str, Any] | None,
    stacks: ObjectList | None,
    workers: list[dict[str, Any]],
    queues: list[dict[str, Any]] | None = None,
    accepted: dict[str, Any] | None = None,
) -> Any:
    doc = _fleet(select)
    cluster = {
        WORKER_KIND_KEY: ObjectList.known(workers),
        QUEUE_KIND_KEY: ObjectList.known(queues or []),
        "ClusterConnection.temporal.io": ObjectList.known(()),
        "Connection.temporal.io": ObjectList.known(()),
    }
    if stacks is not None:
        cluster[STACKS_KEY] = stacks
    inputs = DesiredInputs(fleet=doc, cluster=cluster, accepted=accepted or {})
    return desired_fleet(load_fleet(doc, "f.yaml"), inputs, registry=REGISTRY, file="f.yaml")


W_A = worker_obj("wa", namespace="a", ref={"name": "c"})
W_B = worker_obj("wb", namespace="b", ref={"name": "c"})
W_B["metadata"]["labels"] = {"team": "x"}


@pytest.mark.parametrize(
    ("select", "taken"),
    [
        ({"namespaces": ["a"]}, {"a/wa"}),
        ({"namespaces": ["a", "b"]}, {"a/wa", "b/wb"}),
        ({"matchLabels": {"team": "x"}}, {"b/wb"}),
        ({"namespaces": ["a"], "matchLabels": {"team": "x"}}, set()),
        ({}, {"a/wa", "b/wb"}),
    ],
)
def test_a_stack_takes_only_the_objects_it_selects(select: dict[str, Any], taken: set[str]) -> None:
    desired = _desired(select, _stacks(), [W_A, W_B])
    assert set(desired.workers) == taken
    assert desired.rejected == ()


def test_an_object_two_stacks_select_is_refused_naming_both() -> None:
    desired = _desired(
        {"namespaces": ["a", "b"]},
        _stacks(other={"namespaces": ["b"]}),
        [W_A, W_B],
        queues=[queue_object("q", namespace="b")],
    )
    assert set(desired.workers) == {"a/wa"}
    refused = {(r.key, r.reason, r.kept) for r in desired.rejected}
    assert refused == {("b/wb", "StackConflict", False), ("b/q", "StackConflict", False)}
    assert all("selected by stacks me, other" in r.message for r in desired.rejected)


def test_an_object_a_stack_ran_keeps_its_last_accepted_spec_when_contested() -> None:
    accepted = {WORKER_KIND_KEY: {"b/wb": trimmed(W_B)}}
    changed = dict(W_B, spec={**W_B["spec"], "image": "registry.example/worker:2.0.0"})
    desired = _desired({"namespaces": ["b"]}, _stacks(other={}), [changed], accepted=accepted)
    assert desired.workers["b/wb"].image == "registry.example/worker:1.0.0"
    [refused] = desired.rejected
    assert (refused.reason, refused.kept) == ("StackConflict", True)


def test_unknown_selections_hold_the_selected_kinds() -> None:
    with pytest.raises(ObjectsUnknown, match="other stacks' selections unknown"):
        _desired({"namespaces": ["a"]}, ObjectList.unknown("403"), [W_A])


def test_a_stack_without_select_takes_everything_and_reads_no_selections() -> None:
    desired = _desired(None, None, [W_A, W_B])
    assert set(desired.workers) == {"a/wa", "b/wb"}


def test_stacks_publish_their_selection_where_the_others_read_it() -> None:
    api = FakeConfigMaps()
    mine, theirs = (RecordStore(api, namespace="ctl", stack=s) for s in ("me", "other"))
    theirs.selections({"namespaces": ["b"]}, publish=True)
    found = mine.selections({"namespaces": ["a", "b"]}, publish=True)
    desired = _desired({"namespaces": ["a", "b"]}, found, [W_A, W_B])
    assert set(desired.workers) == {"a/wa"}
    again = theirs.selections({"namespaces": ["b"]}, publish=False).objects or ()
    assert [object_key(o) for o in again] == ["me", "other"]
    assert again[0]["spec"] == {"namespaces": ["a", "b"]}


def test_a_sharded_stack_cannot_select_yet() -> None:
    doc = {**_fleet({"namespaces": ["a"]}), "sharding": {}}
    with pytest.raises(SpecError, match="select and sharding cannot be combined"):
        load_fleet(doc, "f.yaml")
