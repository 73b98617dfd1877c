"""A TemporalWorker edited into a spec the fleet model refuses keeps running on its last
accepted spec: nothing of it changes, and its status, an Event and a metric say so —
apart from an object that never had an accepted spec, which is left out."""

from __future__ import annotations

from typing import Any

from tests.unit._native_objects import cluster_conn_obj, cluster_ref, worker_obj
from tests.unit.test_daemon_writes_back_native_objects import World, _last_status
from twc.desired import WORKER_KIND_KEY
from twc.native.objects import NativeObject

BAD_CPU: dict[str, Any] = {"resources": {"requests": {"cpu": "lots"}}}


class EventWorld(World):
    def __init__(self, workers: list[dict[str, Any]], conns: list[dict[str, Any]]) -> None:
        super().__init__(workers, conns)
        self.messages: list[tuple[str, str, str]] = []
        record = self.writer.event

        def event(obj: NativeObject, reason: str, message: str, *, warning: bool = True) -> None:
            self.messages.append((obj.key, reason, message))
            record(obj, reason, message, warning=warning)

        self.writer.event = event  # type: ignore[method-assign]


def _conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_an_invalid_edit_keeps_the_worker_as_it_was_and_says_so() -> None:
    conn = cluster_conn_obj("prod")
    world = EventWorld([worker_obj("orders", ref=cluster_ref("prod"), generation=1)], [conn])
    world.deployments["team/orders"] = (1, 1)
    world.backlogs.pollers_by_queue["orders"] = 1
    world.step()
    world.step()
    before = world.engine.last_program().workers["team/orders"]
    ups = len(world.engine.ups)
    assert _last_status(world.writer, "team/orders")["phase"] == "Ready"

    edited = worker_obj("orders", ref=cluster_ref("prod"), generation=2, **BAD_CPU)
    world.native.replace(World.snapshot([edited], [conn]))
    world.step()

    # The desired state is unchanged, so no engine run at all.
    assert len(world.engine.ups) == ups
    program = world.engine.last_program()
    assert program.workers["team/orders"] == before
    status = _last_status(world.writer, "team/orders")
    assert status["phase"] == "Ready"
    assert status["observedGeneration"] == 1
    spec = _conditions(status)["SpecAccepted"]
    assert spec["status"] == "False"
    assert spec["reason"] == "InvalidSpec"
    assert "last accepted spec (generation 1) keeps running" in spec["message"]
    [(key, _, message)] = [m for m in world.messages if m[1] == "InvalidSpec"]
    assert key == "team/orders"
    assert "keeps running" in message
    assert world.daemon.metrics.value("twc_kept_objects", kind="TemporalWorker") == 1
    assert world.daemon.metrics.value("twc_invalid_native_objects", kind="TemporalWorker") == 1

    # Fixed again: accepted, the condition turns True, the metric falls back.
    fixed = worker_obj("orders", ref=cluster_ref("prod"), generation=3)
    world.native.replace(World.snapshot([fixed], [conn]))
    world.step()
    status = _last_status(world.writer, "team/orders")
    assert _conditions(status)["SpecAccepted"]["status"] == "True"
    assert status["observedGeneration"] == 3
    assert world.daemon.metrics.value("twc_kept_objects", kind="TemporalWorker") == 0


def test_an_object_invalid_from_the_start_is_left_out_and_says_so() -> None:
    conn = cluster_conn_obj("prod")
    world = EventWorld([worker_obj("stray", ref=cluster_ref("prod"), **BAD_CPU)], [conn])
    world.step()

    assert world.engine.last_program().accepted_objects(WORKER_KIND_KEY) == {}
    status = _last_status(world.writer, "team/stray")
    assert status["phase"] == "Failed"
    assert status["replicas"] == 0
    spec = _conditions(status)["SpecAccepted"]
    assert spec["reason"] == "InvalidSpec"
    assert "left out: nothing runs for it" in spec["message"]
    [(_, _, message)] = [m for m in world.messages if m[1] == "InvalidSpec"]
    assert "left out" in message
    assert world.daemon.metrics.value("twc_kept_objects", kind="TemporalWorker") == 0
    assert world.daemon.metrics.value("twc_invalid_native_objects", kind="TemporalWorker") == 1
