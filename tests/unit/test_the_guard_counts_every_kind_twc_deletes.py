"""Besides whole workers (the worker guard's), one run deletes at most the fleet's share of
each kind of object twc made: versions, in-place Deployments switched to versioned, PDBs,
DLQs, Queue objects and credential copies. Drained versions go by their sunset, a copy
whose users all moved away goes with them, and an object already gone is not counted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from twc.desired import deletions_beyond_share

W = [f"ns/w{i}" for i in range(4)]


def _workers(*kinds: str, builds: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Four workers, each with a ServiceAccount and the given objects (named like it)."""
    out: dict[str, list[str]] = {}
    for key in W:
        objs = [f"ServiceAccount {key}", *(f"{k} {key}" for k in kinds)]
        out[key] = sorted([*objs, *(f"Deployment {key}-{b}" for b in builds)])
    return out


def _beyond(
    olds: dict[str, Any], news: dict[str, Any], exists: Callable[[str], bool] | None
) -> tuple[list[str], str]:
    """The verdict on the ownership check's recorded and new inputs."""
    return deletions_beyond_share(olds["objects"], news, exists)


QUEUES = [f"Queue ns/q{i}" for i in range(4)]

CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[str]]] = [
    (
        "every worker deleted: the worker guard's to judge",
        {"objects": _workers("Deployment", "PodDisruptionBudget")},
        {"objects": {"": []}},
        [],
    ),
    (
        "every PDB dropped while the workers stay",
        {"objects": _workers("Deployment", "PodDisruptionBudget")},
        {"objects": _workers("Deployment")},
        [f"PodDisruptionBudget {k}" for k in W],
    ),
    (
        "one PDB of four: within the share",
        {"objects": _workers("Deployment", "PodDisruptionBudget")},
        {
            "objects": {
                **_workers("Deployment", "PodDisruptionBudget"),
                W[0]: [f"Deployment {W[0]}"],
            }
        },
        [],
    ),
    (
        "three of four Queue objects twc created",
        {"objects": {"": QUEUES, **_workers("Deployment")}},
        {"objects": {"": QUEUES[:1], **_workers("Deployment")}},
        QUEUES[1:],
    ),
    (
        "every worker switched from in place to versioned",
        {"objects": _workers("Deployment")},
        {"objects": _workers(builds=("b1",))},
        [f"Deployment {k}" for k in W],
    ),
    (
        "every worker's old version, never routed to (NotRegistered), deleted at once",
        {"objects": _workers(builds=("b1", "b2"))},
        {"objects": _workers(builds=("b2",))},
        [f"Deployment {k}-b1" for k in W],
    ),
    (
        "every worker's old version retired after draining",
        {"objects": _workers(builds=("b1", "b2"))},
        {"objects": _workers(builds=("b2",)), "retiring": [f"Deployment {k}-b1" for k in W]},
        [],
    ),
    (
        "credential copies going with their users (moved to another connection)",
        {"objects": {f"shared n{i}": [f"Secret n{i}/mtls"] for i in range(4)}},
        {"objects": {"shared n0": ["Secret n0/mtls"], "own n1": [], "own n2": [], "own n3": []}},
        [],
    ),
    (
        "credential copies going while their users stay (the source dropped)",
        {"objects": {f"shared n{i}": [f"Secret n{i}/mtls"] for i in range(4)}},
        {"objects": {f"shared n{i}": [] for i in range(4)}},
        [f"Secret n{i}/mtls" for i in range(4)],
    ),
    (
        "a state from before the grouping (a list): counted as the fleet's",
        {"objects": [f"Secret n{i}/mtls" for i in range(4)]},
        {"objects": {"": ["Secret n0/mtls"]}},
        [f"Secret n{i}/mtls" for i in range(1, 4)],
    ),
    (
        "maxShare 1: the guard is off",
        {"objects": {"": QUEUES}},
        {"objects": {"": []}, "maxShare": 1},
        [],
    ),
    (
        "maxShare 0: even one needs a person",
        {"objects": {"": QUEUES}},
        {"objects": {"": QUEUES[1:]}, "maxShare": 0},
        QUEUES[:1],
    ),
]


@pytest.mark.parametrize(
    ("olds", "news", "held"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_kind_is_held_beyond_the_share_and_whole_workers_and_drained_versions_are_not(
    olds: dict[str, Any], news: dict[str, Any], held: list[str]
) -> None:
    found, reason = _beyond(olds, news, None)
    assert found == sorted(held)
    if held:
        kind = held[0].split(" ")[0]
        assert f"{len(held)} of " in reason
        assert f" {kind} objects would be deleted at once" in reason
    else:
        assert reason == ""


def test_objects_already_gone_from_the_cluster_are_not_counted() -> None:
    olds: dict[str, Any] = {"objects": {"": QUEUES}}
    news: dict[str, Any] = {"objects": {"": []}}
    assert _beyond(olds, news, lambda entry: entry == QUEUES[0]) == ([], "")
    still = set(QUEUES[:2])
    found, reason = _beyond(olds, news, still.__contains__)
    assert found == QUEUES[:2]
    assert "2 of 4 Queue objects" in reason
