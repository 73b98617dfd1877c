"""An object the API server refuses is refused alone: a TemporalWorker whose Deployment the
API server's dry run refuses is left out (new) or keeps its last accepted spec (edited),
with ``InvalidSpec`` and the API server's message; the rest of the stack is applied. The
daemon asks only for new or changed workers and remembers each verdict."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

import pytest

from tests.unit._native_objects import cluster_conn_obj, cluster_ref, worker_obj
from tests.unit.test_daemon_writes_back_native_objects import World, _last_status
from twc.connections import Registry
from twc.desired import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredInputs,
    ObjectList,
    desired_fleet,
    trimmed,
)
from twc.spec import Fleet, load_fleet

REGISTRY = Registry.with_builtins()
REFUSAL = "spec: worker a/w: the API server refuses its Deployment: denied by policy"
DOC: dict[str, Any] = {
    "apiVersion": "twc.temporal.io/v1",
    "kind": "Fleet",
    "defaults": {"image": "registry.example/worker:1.0.0", "connectionRef": {"name": "c"}},
    "connections": [
        {"name": "c", "namespace": ns, "hostPort": "t.example:7233"} for ns in ("a", "b")
    ],
}
W = worker_obj("w", namespace="a", ref={"name": "c"})
OTHER = worker_obj("o", namespace="b", ref={"name": "c"})
EDITED = dict(W, spec={**W["spec"], "image": "registry.example/forbidden:2.0.0"})
EDITED["metadata"] = {**W["metadata"], "generation": 2}


def _desired(
    workers: list[dict[str, Any]], accepted: dict[str, Any], refused: dict[str, str]
) -> Any:
    cluster = {
        WORKER_KIND_KEY: ObjectList.known(workers),
        QUEUE_KIND_KEY: ObjectList.known([]),
        "ClusterConnection.temporal.io": ObjectList.known(()),
        "Connection.temporal.io": ObjectList.known(()),
    }
    inputs = DesiredInputs(fleet=DOC, cluster=cluster, accepted=accepted, refused=refused)
    return desired_fleet(load_fleet(DOC, "f.yaml"), inputs, registry=REGISTRY, file="f.yaml")


@pytest.mark.parametrize(
    ("current", "accepted", "image", "kept"),
    [
        # A new object refused: left out, nothing created for it.
        (W, None, None, False),
        # An accepted object's refused edit: its accepted spec keeps running.
        (EDITED, W, "registry.example/worker:1.0.0", True),
    ],
)
def test_a_refused_object_is_left_out_or_kept_with_invalid_spec(
    current: dict[str, Any], accepted: dict[str, Any] | None, image: str | None, kept: bool
) -> None:
    store = {WORKER_KIND_KEY: {"a/w": trimmed(accepted)}} if accepted is not None else {}
    desired = _desired([current, OTHER], store, {"a/w": REFUSAL})

    assert "b/o" in desired.workers  # the rest of the stack stays
    worker = desired.workers.get("a/w")
    assert (worker.image if worker is not None else None) == image
    [rejection] = desired.rejected
    assert (rejection.key, rejection.reason, rejection.kept) == ("a/w", "InvalidSpec", kept)
    assert rejection.message == REFUSAL
    assert rejection.obj.generation == current["metadata"]["generation"]
    assert rejection.kept_generation == (1 if kept else None)
    # The last accepted spec stays the accepted one.
    assert desired.accepted[WORKER_KIND_KEY].get("a/w") == (trimmed(W) if kept else None)


class DryRun:
    """The API server's dry run: refuses images named forbidden, records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.fails = False

    def __call__(
        self, fleet: Fleet, origins: Mapping[str, str], only: Collection[str]
    ) -> dict[str, str]:
        if self.fails:
            raise RuntimeError("HTTP 403: forbidden")
        self.asked.append(sorted(only))
        images = {w.stack_key: w.image for w in fleet.resolved_workers()}
        return {k: f"{k}: denied by policy" for k in only if "forbidden" in images[k]}


def _world(workers: list[dict[str, Any]]) -> tuple[World, DryRun]:
    world = World(workers, [cluster_conn_obj("prod")])
    dry_run = DryRun()
    observer = world.daemon.observer
    observer.sources = replace(observer.sources, dry_run=dry_run)
    return world, dry_run


def test_the_daemon_leaves_a_refused_worker_out_asks_once_and_applies_the_rest() -> None:
    ref = cluster_ref("prod")
    fine = worker_obj("fine", ref=ref)
    world, dry_run = _world([fine, worker_obj("evil", ref=ref, image="r.example/forbidden:1")])

    world.step()
    world.step()

    assert dry_run.asked == [["team/evil", "team/fine"]]  # new ones, once
    assert set(world.engine.last_program().workers) == {"team/fine"}
    status = _last_status(world.writer, "team/evil")
    assert status["phase"] == "Failed"
    assert {c["reason"] for c in status["conditions"]} == {"InvalidSpec"}
    assert "team/evil: denied by policy" in status["conditions"][0]["message"]
    assert world.state.last_outcome is not None
    assert world.state.last_outcome.ok

    # An accepted worker's refused edit keeps its running spec.
    edited = worker_obj("fine", ref=ref, generation=2, image="r.example/forbidden:2")
    world.native.replace(world.snapshot([edited], [cluster_conn_obj("prod")]))
    world.step()
    world.step()
    assert dry_run.asked[1:] == [["team/fine"]]
    assert world.engine.last_program().workers["team/fine"].image != "r.example/forbidden:2"
    fine_status = _last_status(world.writer, "team/fine")
    spec = [c for c in fine_status["conditions"] if c["reason"] == "InvalidSpec"]
    assert spec
    assert "denied by policy" in spec[0]["message"]


def test_a_dry_run_that_cannot_be_asked_refuses_nothing() -> None:
    world, dry_run = _world([worker_obj("evil", ref=cluster_ref("prod"), image="forbidden:1")])
    dry_run.fails = True

    world.step()

    assert set(world.engine.last_program().workers) == {"team/evil"}
    assert "dry-run" in world.daemon.status()["faults"]["KubernetesUnavailable"]["sources"]

    dry_run.fails = False
    world.step()
    assert "KubernetesUnavailable" not in world.daemon.status()["faults"]
