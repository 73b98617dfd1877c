"""The loop with a versioned TemporalWorker object, Temporal and the cluster faked.

Each iteration reads the versions back from the (fake) cluster and the routing from the
(fake) Temporal, hands the program the versions to declare, routes with the conflict
token it read, and writes the official version records into the object's status. A
second daemon — a restart, a new leader — continues from what it reads, nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, cast

from tests.unit._daemon_fakes import (
    FakeBacklogs,
    FakeClock,
    FakeEngine,
    NoLimit,
    StaticNative,
    fake_clocks,
    fleet_data,
)
from tests.unit._native_objects import (
    CLUSTER_CONNECTION,
    CONNECTION,
    cluster_conn_obj,
    cluster_ref,
    worker_obj,
)
from twc.connections import Registry
from twc.kube.watch import NativeSnapshot, StaticQueues
from twc.kube.workloads import ObservedVersion
from twc.native.objects import NativeObject
from twc.reconcile.act import Effects
from twc.reconcile.daemon import Daemon
from twc.reconcile.health import DaemonMetrics
from twc.reconcile.observe import RolloutSource, Sources
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import LoopState
from twc.rollout import (
    GateRun,
    GateStart,
    Routing,
    RoutingChange,
    RoutingKind,
    TemporalVersion,
    VersionDeployment,
    VersionStatus,
)
from twc.spec import Fleet, ResolvedWorker, load_fleet
from twc.versioning import ConflictError, VersionDetail, WorkerClients, WorkerVersioning

WALL = 1_700_000_000.0


class FakeTemporal(WorkerVersioning):
    """One Temporal namespace's worker deployments, as routing state."""

    def __init__(self) -> None:
        super().__init__(cast(Any, None), "default")
        self.current: str | None = None
        self.ramping: str | None = None
        self.token = 0
        self.registered: dict[str, VersionStatus] = {}
        self.changes: list[RoutingChange] = []

    async def routing(self, deployment_name: str) -> Routing | None:
        if not self.registered:
            return None
        return Routing(
            conflict_token=str(self.token).encode(),
            current=self.current,
            ramping=self.ramping,
            versions={b: TemporalVersion(b, s) for b, s in self.registered.items()},
        )

    async def version(
        self, deployment_name: str, build_id: str, *, task_queue: str | None = None
    ) -> VersionDetail | None:
        return VersionDetail(("orders",), None) if build_id in self.registered else None

    async def gate_runs(self, runs: Iterable[tuple[str, str]]) -> dict[str, GateRun]:
        return {}

    async def start_gate(self, deployment_name: str, start: GateStart, arg: Any = None) -> None:
        raise AssertionError("no gate in this fleet")

    async def apply(self, deployment_name: str, change: RoutingChange) -> bytes:
        if change.conflict_token != str(self.token).encode():
            raise ConflictError("conflict token mismatch")
        self.changes.append(change)
        assert change.kind is RoutingKind.SET_CURRENT
        if self.current is not None:
            self.registered[self.current] = VersionStatus.DRAINING
        self.current = change.build_id
        self.registered[change.build_id] = VersionStatus.CURRENT
        self.token += 1
        return str(self.token).encode()

    async def forget(self, deployment_name: str, build_id: str) -> bool:
        return True


class FakeClients(WorkerClients):
    def __init__(self, temporal: FakeTemporal) -> None:
        super().__init__()
        self.temporal = temporal

    async def for_worker(self, worker: ResolvedWorker, fleet: Fleet) -> WorkerVersioning:
        return self.temporal


class Writer:
    def __init__(self) -> None:
        self.status: list[tuple[str, dict[str, Any]]] = []

    def patch_status(self, obj: NativeObject, patch: Mapping[str, Any]) -> None:
        self.status.append((obj.key, dict(patch["status"])))

    def set_finalizers(self, obj: NativeObject, finalizers: list[str]) -> None:
        return None

    def event(self, obj: NativeObject, reason: str, message: str, *, warning: bool = True) -> None:
        return None

    def last(self, key: str) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for k, status in self.status:
            if k == key:
                merged.update(status)
        return merged


class World:
    """Fakes shared by every daemon the test starts: cluster, Temporal, engine."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.engine = FakeEngine()
        self.writer = Writer()
        self.temporal = FakeTemporal()
        self.cluster: dict[str, dict[str, ObservedVersion]] = {}
        worker = worker_obj(
            "orders",
            ref=cluster_ref("prod"),
            image="registry.example/worker:1.0",
            rollout={"strategy": "AllAtOnce"},
        )
        self.native = StaticNative(
            NativeSnapshot(
                workers=(worker,),
                connections={CLUSTER_CONNECTION: (cluster_conn_obj("prod"),), CONNECTION: ()},
            )
        )

    def daemon(self) -> Daemon:
        doc = fleet_data(workers=[])
        return Daemon(
            "unit",
            DaemonSettings(),
            Sources(
                fleet=lambda: load_fleet(doc, "fleet.yaml"),
                queues=StaticQueues(()),
                native=self.native,
                backlogs=FakeBacklogs(),
                registry=Registry.with_builtins(),
                file="fleet.yaml",
                rollouts=RolloutSource(
                    versions=lambda: self.cluster, clients=FakeClients(self.temporal)
                ),
            ),
            Effects(engine=self.engine, writer=self.writer),
            metrics=DaemonMetrics("unit"),
            clocks=replace(fake_clocks(self.clock), wall=lambda: WALL + self.clock.now),
            budgets=NoLimit(),
        )

    def apply_versions(self) -> None:
        """What the last up declared now runs, and its workers poll (register)."""
        inputs = self.engine.last_inputs
        declared = dict(inputs.versions["team/orders"].versions)
        for build, version in declared.items():
            replicas = 1 if version.replicas is None else version.replicas
            self.cluster.setdefault("team/orders", {})[build] = ObservedVersion(
                VersionDeployment(build, f"orders-{build}", replicas, replicas),
                spec=version.spec or {},
                target=version.spec is None,
            )
            self.temporal.registered.setdefault(build, VersionStatus.INACTIVE)


def test_a_versioned_temporalworker_is_routed_and_reported_across_a_restart() -> None:
    world = World()
    daemon = world.daemon()
    state = daemon.iterate(LoopState(started_at=world.clock.now))
    assert state.last_outcome is not None
    assert state.last_outcome.ok, state.last_outcome
    # The first up declares the target version; nothing polls yet, nothing is routed.
    (target,) = world.engine.last_inputs.versions["team/orders"].versions
    assert target.startswith("1.0-")
    assert world.temporal.changes == []
    status = world.writer.last("team/orders")
    assert status["targetVersion"]["status"] == "NotRegistered"
    assert status["rollout"]["reason"] == "WaitingForPollers"

    # Its workers poll: the next iteration makes it Current, with the token it read.
    world.apply_versions()
    state = daemon.iterate(state)
    assert [(c.kind, c.build_id, c.conflict_token) for c in world.temporal.changes] == [
        (RoutingKind.SET_CURRENT, target, b"0")
    ]
    ups = len(world.engine.ups)
    state = daemon.iterate(state)
    status = world.writer.last("team/orders")
    assert status["currentVersion"]["buildID"] == target
    assert status["targetVersion"]["status"] == "Current"
    assert status["rollout"] == {
        "phase": "Complete",
        "reason": "RolloutComplete",
        "message": f"version {target} is Current",
    }
    assert status["replicas"] == 1
    assert status["readyReplicas"] == 1
    assert len(world.engine.ups) == ups  # routing and status need no engine run

    # A new daemon (a restart, another leader): it reads where things are, changes nothing.
    again = world.daemon()
    after = again.iterate(LoopState(started_at=world.clock.now))
    assert after.last_outcome is not None
    assert after.last_outcome.ok
    assert len(world.temporal.changes) == 1
    assert set(world.engine.last_inputs.versions["team/orders"].versions) == {target}
