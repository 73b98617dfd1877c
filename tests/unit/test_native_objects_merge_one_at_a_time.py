"""Native objects join the desired state one at a time; an invalid one is skipped alone."""

from __future__ import annotations

from typing import Any

from tests.unit._daemon_fakes import fleet_data
from tests.unit._native_objects import (
    CLUSTER_CONNECTION,
    CONNECTION,
    cluster_conn_obj,
    cluster_ref,
    conn_obj,
    merge_connection_objects,
    merge_worker_objects,
    worker_obj,
)
from twc.connections import ConnectionIdentity, Registry, ResolvedConnection, TLSSettings
from twc.errors import Reason, TwcConnectionError
from twc.spec import ConnectionTarget, Fleet, load_fleet

REGISTRY = Registry.with_builtins()


def _fleet(**kw: Any) -> Fleet:
    return load_fleet(fleet_data(**kw), "fleet.yaml")


def _merge(
    fleet: Fleet, conns: dict[Any, list[dict[str, Any]]], workers: list[dict[str, Any]]
) -> Any:
    merged = merge_connection_objects(fleet, conns, file="fleet.yaml")
    return merged, merge_worker_objects(merged.fleet, workers, registry=REGISTRY, file="fleet.yaml")


def test_an_unknown_kind_rejects_only_that_worker() -> None:
    bad = {"objectRef": {"apiGroup": "temporal.io", "kind": "NoSuchKind", "name": "x"}}
    _, workers = _merge(
        _fleet(), {}, [worker_obj("good", ref=cluster_ref("main")), worker_obj("stray", ref=bad)]
    )

    assert set(workers.accepted) == {"team/good"}
    [rejected] = workers.rejected
    assert rejected.obj.key == "team/stray"
    assert rejected.reason == "UnknownConnectionKind"
    names = {(w.namespace, w.name) for w in workers.fleet.resolved_workers()}
    assert ("team", "good") in names
    assert ("team", "stray") not in names
    assert [e["name"] for e in workers.entries["workers"]] == ["good"]


def test_invalid_and_clashing_worker_objects_are_skipped_alone() -> None:
    objs = [
        worker_obj("payments"),  # the fleet file's own worker: the file wins
        worker_obj("bad", env={"TEMPORAL_TLS": "x"}),
        worker_obj("fine"),
    ]
    _, workers = _merge(_fleet(), {}, objs)

    assert set(workers.accepted) == {"team/fine"}
    assert {r.obj.key: r.reason for r in workers.rejected} == {
        "team/bad": "InvalidSpec",
        "team/payments": "InvalidSpec",
    }


def test_a_namespaced_and_a_cluster_scoped_foo_are_different_connections() -> None:
    conns = {
        CLUSTER_CONNECTION: [cluster_conn_obj("foo")],
        CONNECTION: [conn_obj("foo", "team")],
    }
    objs = [
        worker_obj("by-name", ref={"name": "foo"}),
        worker_obj("by-ref", ref=cluster_ref("foo")),
        worker_obj("elsewhere", namespace="other", ref={"name": "foo"}),
    ]
    merged, workers = _merge(_fleet(), conns, objs)

    assert set(merged.accepted) == {
        "ClusterConnection.temporal.io foo",
        "Connection.temporal.io team/foo",
    }
    resolved = {
        w.name: REGISTRY.resolve_worker(w, workers.fleet).identity
        for w in workers.fleet.resolved_workers()
        if w.name in ("by-name", "by-ref")
    }
    assert resolved["by-name"] == ConnectionIdentity("temporal.io", "Connection", "foo", "team")
    assert resolved["by-ref"] == ConnectionIdentity("temporal.io", "ClusterConnection", "foo", None)
    # No Connection foo in namespace other: that worker alone waits for one.
    assert {r.obj.key: r.reason for r in workers.rejected} == {
        "other/elsewhere": "ConnectionNotFound"
    }


def test_the_fleet_files_connection_wins_over_an_object_of_the_same_identity() -> None:
    merged = merge_connection_objects(
        _fleet(),
        {CLUSTER_CONNECTION: [cluster_conn_obj("main", hostPort="elsewhere:1")]},
        file="fleet.yaml",
    )

    assert merged.accepted == {}
    assert merged.fleet.find_cluster_connection("main").host_port == "temporal.example:7233"  # type: ignore[union-attr]


def test_an_invalid_connection_object_is_rejected_and_its_workers_wait() -> None:
    conns = {
        CLUSTER_CONNECTION: [
            cluster_conn_obj("broken", hostPort="no-port"),
            cluster_conn_obj("ok"),
        ]
    }
    merged, workers = _merge(
        _fleet(),
        conns,
        [worker_obj("a", ref=cluster_ref("broken")), worker_obj("b", ref=cluster_ref("ok"))],
    )

    assert [(r.obj.key, r.reason) for r in merged.rejected] == [("broken", "InvalidSpec")]
    assert set(workers.accepted) == {"team/b"}
    assert [(r.obj.key, r.reason) for r in workers.rejected] == [("team/a", "ConnectionNotFound")]


class _Edge:
    """A plugin kind that is cluster-scoped and says how to watch it."""

    api_group = "temporal.io"
    kind = "EdgeConnection"
    plural = "edgeconnections"
    namespaced = False

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        found = fleet.find_custom_connection(self.kind, target.name, target.namespace)
        if found is None:
            raise TwcConnectionError(Reason.CONNECTION_NOT_FOUND, target.name)
        return ResolvedConnection(
            identity=ConnectionIdentity("temporal.io", self.kind, found.name, None),
            host_port=str(found.spec["hostPort"]),
            tls=TLSSettings(enabled=False),
        )


def test_a_plugin_kind_is_watched_and_its_objects_resolve() -> None:
    registry = Registry([*Registry.with_builtins()._providers.values(), _Edge()])
    [edge] = [k for k in registry.watched_kinds() if k.kind == "EdgeConnection"]
    assert (edge.plural, edge.namespaced, edge.version) == ("edgeconnections", False, "v1")

    obj = {"metadata": {"name": "e1"}, "spec": {"hostPort": "edge:7233"}}
    merged = merge_connection_objects(_fleet(), {edge: [obj]}, file="fleet.yaml")
    ref = {"objectRef": {"apiGroup": "temporal.io", "kind": "EdgeConnection", "name": "e1"}}
    workers = merge_worker_objects(
        merged.fleet, [worker_obj("w", ref=ref)], registry=registry, file="fleet.yaml"
    )

    assert merged.entries["customConnections"][0]["kind"] == "EdgeConnection"
    assert set(workers.accepted) == {"team/w"}
