"""The loop keeps a TemporalWorker view of every Queue and fleet-file worker: created on
the first iteration (engine run or not), status written as for any TemporalWorker, no
write while nothing changes, an edit put back with an Event, deleted with its worker.

The API server is faked: a small store that applies, replaces and deletes the way the
real one does for these calls (an apply keeps fields another manager added).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

import pytest

from tests.unit._daemon_fakes import (
    NS,
    FakeClock,
    FakeEngine,
    FakeQueues,
    NoLimit,
    StaticNative,
    fake_clocks,
    fleet_data,
    queue_object,
)
from tests.unit._native_objects import CLUSTER_CONNECTION, CONNECTION, cluster_conn_obj
from tests.unit.test_daemon_writes_back_native_objects import Pollers, Writer
from twc.connections import Registry
from twc.desired import WORKER_KIND_KEY
from twc.kube.watch import NativeSnapshot
from twc.native.views import VIEW_FIELD_MANAGER, VIEW_LABEL
from twc.reconcile.act import VIEW_OVERWRITTEN, Effects
from twc.reconcile.daemon import Daemon
from twc.reconcile.health import DaemonMetrics
from twc.reconcile.observe import POLLERS_RECHECK_INTERVAL, Sources
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import LoopState, ReconcileAction
from twc.spec import Fleet, load_fleet


class NotServed(Exception):
    status = 404


class Server:
    """TemporalWorker objects as the API server keeps them, for the calls views make."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.version = 100
        self.foreign: dict[str, set[str]] = {}
        """Per object, spec fields another manager added (an apply leaves them)."""
        self.served = True
        """False: the TemporalWorker CRD is deleted (every write is a 404)."""

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def apply(self, body: Mapping[str, Any], *, resource_version: str | None) -> dict[str, Any]:
        meta = body["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        self.calls.append(("apply", key))
        if not self.served:
            raise NotServed()
        current = self.objects.get(key)
        if current is not None and resource_version is not None:
            assert current["metadata"]["resourceVersion"] == resource_version, "409"
        if current is None:
            current = {
                "apiVersion": body["apiVersion"],
                "kind": body["kind"],
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": f"uid-{key}",
                    "generation": 0,
                },
                "spec": {},
            }
            self.objects[key] = current
        kept = {k: v for k, v in current["spec"].items() if k in self.foreign.get(key, set())}
        current["spec"] = {**kept, **copy.deepcopy(dict(body["spec"]))}
        current["metadata"]["generation"] += 1
        current["metadata"]["labels"] = {
            **current["metadata"].get("labels", {}),
            **meta["labels"],
        }
        current["metadata"]["annotations"] = dict(meta["annotations"])
        if "ownerReferences" in meta:
            current["metadata"]["ownerReferences"] = copy.deepcopy(meta["ownerReferences"])
        current["metadata"]["managedFields"] = [
            {"manager": VIEW_FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {}}}
        ]
        return self._bump(current)

    def replace_spec(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str
    ) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        self.calls.append(("replace", key))
        current = self.objects[key]
        assert current["metadata"]["resourceVersion"] == resource_version, "409"
        current["spec"] = copy.deepcopy(dict(spec))
        self.foreign.pop(key, None)
        return self._bump(current)

    def delete(self, namespace: str, name: str, uid: str) -> None:
        key = f"{namespace}/{name}"
        self.calls.append(("delete", key))
        if key in self.objects and self.objects[key]["metadata"]["uid"] == uid:
            del self.objects[key]

    def edit(self, key: str, manager: str, **spec: Any) -> None:
        """A person's ``kubectl edit`` of the spec."""
        current = self.objects[key]
        for name, value in spec.items():
            if name not in current["spec"]:
                self.foreign.setdefault(key, set()).add(name)
            current["spec"][name] = value
        current["metadata"]["generation"] += 1
        current["metadata"]["managedFields"].append(
            {"manager": manager, "operation": "Update", "fieldsV1": {"f:spec": {}}}
        )
        self._bump(current)


class World:
    def __init__(self, workers: list[dict[str, Any]], queues: list[dict[str, Any]]) -> None:
        self.clock = FakeClock()
        self.engine = FakeEngine()
        self.writer = Writer()
        self.server = Server()
        self.pollers = Pollers()
        self.deployments: dict[str, tuple[int, int]] = {}
        self.doc = fleet_data(workers=workers)
        self.queues = FakeQueues(queues)
        self.native = StaticNative(self.snapshot())
        self.leading = True

        def load() -> Fleet:
            return load_fleet(self.doc, "fleet.yaml")

        self.daemon = Daemon(
            "prod",
            DaemonSettings(),
            Sources(
                fleet=load,
                queues=self.queues,
                native=self.native,
                backlogs=self.pollers,
                deployments=lambda: dict(self.deployments),
                registry=Registry.with_builtins(),
                file="fleet.yaml",
            ),
            Effects(engine=self.engine, writer=self.writer, views=self.server),
            leader=self,
            metrics=DaemonMetrics("prod"),
            clocks=fake_clocks(self.clock),
            budgets=NoLimit(),
        )
        self.state = LoopState(started_at=self.clock.now)

    def is_leader(self) -> bool:
        return self.leading

    def snapshot(self) -> NativeSnapshot:
        return NativeSnapshot(
            workers=tuple(copy.deepcopy(list(self.server.objects.values()))),
            connections={CLUSTER_CONNECTION: (cluster_conn_obj("main"),), CONNECTION: ()},
        )

    def step(self) -> LoopState:
        self.state = self.daemon.iterate(self.state)
        # The watch catches up with what was written.
        self.native.replace(self.snapshot())
        return self.state

    def status(self, key: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for k, status in self.writer.status:
            if k == key:
                merged.update(status)
        return merged


def _queue(name: str) -> dict[str, Any]:
    obj = queue_object(name)
    obj["metadata"]["uid"] = f"uid-queue-{name}"
    return obj


def test_views_appear_with_status_and_cost_nothing_once_they_say_what_they_should() -> None:
    world = World(
        [{"name": "payments", "namespace": NS, "taskQueueName": "payments"}], [_queue("orders")]
    )
    world.step()

    assert sorted(world.server.objects) == [f"{NS}/payments", f"{NS}/worker-orders"]
    labels = world.server.objects[f"{NS}/worker-orders"]["metadata"]["labels"]
    assert labels[VIEW_LABEL] == "Queue"
    # The program never sees the views as TemporalWorker sources.
    assert world.engine.last_program().accepted_objects(WORKER_KIND_KEY) == {}

    # Next iteration: the views are in the watch; their status is written like any
    # TemporalWorker's, and once the worker polls it turns Ready without an engine run.
    world.step()
    assert world.status(f"{NS}/worker-orders")["phase"] == "Pending"
    world.deployments[f"{NS}/worker-orders"] = (1, 1)
    world.pollers.pollers_by_queue["orders"] = 1
    # A queue without pollers is asked again once its recheck interval has passed.
    world.clock.now += POLLERS_RECHECK_INTERVAL
    ups, calls = len(world.engine.ups), len(world.server.calls)
    world.step()
    status = world.status(f"{NS}/worker-orders")
    assert status["phase"] == "Ready"
    assert status["taskQueue"] == "orders"
    assert status["observedGeneration"] == 1
    assert len(world.engine.ups) == ups
    for _ in range(3):
        world.step()
    assert len(world.server.calls) == calls  # not one write per iteration


def test_a_deleted_view_comes_back_on_an_iteration_that_skips_the_engine() -> None:
    world = World([{"name": "payments", "namespace": NS, "taskQueueName": "payments"}], [])
    world.step()
    key = f"{NS}/payments"
    uid = world.server.objects[key]["metadata"]["uid"]
    world.server.delete(NS, "payments", uid)  # `kubectl delete temporalworker payments`
    world.native.replace(world.snapshot())

    plan = world.daemon.plan(world.state, now=world.clock.now)
    assert plan.decision.action is ReconcileAction.SKIP
    world.step()

    assert key in world.server.objects
    assert len(world.engine.ups) == 1


def test_an_edit_of_a_view_is_put_back_with_an_event() -> None:
    world = World([{"name": "payments", "namespace": NS, "taskQueueName": "payments"}], [])
    world.step()
    key = f"{NS}/payments"
    world.server.edit(key, "kubectl-edit", image="registry.example/hacked:6", env={"X": "1"})
    world.native.replace(world.snapshot())
    world.step()

    spec = world.server.objects[key]["spec"]
    assert spec["image"] == "registry.example/worker:1.0.0"
    assert "env" not in spec  # an added field is removed too, not only a changed one
    assert ("apply", key) in world.server.calls
    assert ("replace", key) in world.server.calls
    assert (key, VIEW_OVERWRITTEN) in world.writer.events
    # The desired state did not move: the edit started no engine run.
    assert len(world.engine.ups) == 1


def test_a_view_goes_with_its_worker_and_a_standby_writes_none() -> None:
    world = World(
        [{"name": "payments", "namespace": NS, "taskQueueName": "payments"}], [_queue("orders")]
    )
    world.step()
    assert f"{NS}/worker-orders" in world.server.objects

    # One worker at a time: removing both of two at once is more than the deletion
    # guard's share, and a held worker keeps its view.
    world.queues.replace([])
    world.step()
    assert set(world.server.objects) == {f"{NS}/payments"}
    world.doc["workers"] = []
    world.step()
    assert world.server.objects == {}
    assert [c for c in world.server.calls if c[0] == "delete"] == [
        ("delete", f"{NS}/worker-orders"),
        ("delete", f"{NS}/payments"),
    ]

    world.doc["workers"] = [{"name": "payments", "namespace": NS, "taskQueueName": "payments"}]
    world.leading = False
    calls = len(world.server.calls)
    world.daemon.actor.sync_views(world.daemon.plan(world.state, now=world.clock.now))
    assert len(world.server.calls) == calls


def test_without_the_temporalworker_crd_views_wait_quietly_and_come_back_with_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World(
        [
            {"name": "payments", "namespace": NS, "taskQueueName": "payments"},
            {"name": "billing", "namespace": NS, "taskQueueName": "billing"},
        ],
        [],
    )
    world.server.served = False  # `kubectl delete crd temporalworkers.temporal.kmsvc.io`

    with caplog.at_level(logging.INFO):
        world.step()
        world.step()

    # One refused write per iteration, no warning each second.
    assert [c for c in world.server.calls if c[0] == "apply"] == [("apply", f"{NS}/billing")] * 2
    assert "not written" not in caplog.text
    world.server.served = True
    world.step()
    assert sorted(world.server.objects) == [f"{NS}/billing", f"{NS}/payments"]
