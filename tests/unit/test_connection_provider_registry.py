"""The connection-provider registry: built-in kinds, plugin kinds, stable error reasons."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.fleet_data import valid_fleet
from twc.connections import (
    ConnectionIdentity,
    NamespacedConnectionProvider,
    Registry,
    default_registry,
    load_entry_point_providers,
    resolve_fleet_connections,
)
from twc.errors import Reason, SpecError, TwcConnectionError, TwcError
from twc.spec import AuthMode, ConnectionTarget, load_fleet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def plugin_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Put the fixture distribution (package + dist-info) on sys.path, as pip would."""
    monkeypatch.syspath_prepend(str(FIXTURES / "connection_plugin"))
    importlib.invalidate_caches()
    yield
    sys.modules.pop("twc_static_connections", None)
    importlib.invalidate_caches()


@pytest.fixture
def broken_plugin_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(FIXTURES / "broken_plugin"))
    importlib.invalidate_caches()
    yield
    importlib.invalidate_caches()


def _static_fleet() -> dict[str, Any]:
    data = valid_fleet()
    data["customConnections"] = [
        {
            "kind": "StaticConnection",
            "name": "sandbox",
            "spec": {"hostPort": "sandbox.example:7233", "serverName": "sandbox.example"},
        }
    ]
    data["workers"][1]["connectionRef"] = {
        "objectRef": {"apiGroup": "temporal.io", "kind": "StaticConnection", "name": "sandbox"}
    }
    return data


def test_the_builtin_kinds_are_registered() -> None:
    assert Registry.with_builtins().kinds() == [
        ("temporal.io", "ClusterConnection"),
        ("temporal.io", "Connection"),
    ]


def test_the_default_registry_is_built_once() -> None:
    assert default_registry() is default_registry()
    assert ("temporal.io", "Connection") in default_registry().kinds()


def test_a_cluster_connection_resolves_with_its_spec() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")
    reports = next(w for w in fleet.resolved_workers() if w.name == "reports")

    conn = Registry.with_builtins().resolve_worker(reports, fleet)

    assert conn.identity == ConnectionIdentity("temporal.io", "ClusterConnection", "prod", None)
    assert conn.host_port == "temporal-frontend.temporal.svc.cluster.local:7233"
    assert (conn.tls.enabled, conn.tls.server_name) == (True, "temporal.example")
    assert conn.auth_mode is AuthMode.MTLS
    assert conn.mtls_secret_name == "temporal-mtls"
    assert conn.secret_source_namespace == "temporal"


def test_a_namespaced_connection_resolves_in_the_worker_namespace() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")
    billing = next(w for w in fleet.resolved_workers() if w.name == "billing")

    conn = Registry.with_builtins().resolve_worker(billing, fleet)

    assert conn.identity == ConnectionIdentity("temporal.io", "Connection", "orders", "sqs")
    assert (conn.tls.enabled, conn.auth_mode) == (False, AuthMode.NONE)


def test_namespaced_and_cluster_connections_of_one_name_are_different() -> None:
    data = valid_fleet()
    data["connections"].append({"name": "prod", "namespace": "temporal", "hostPort": "a:1"})
    fleet = load_fleet(data, "f.yaml")
    registry = Registry.with_builtins()

    namespaced = registry.resolve(
        ConnectionTarget(
            api_group="temporal.io", kind="Connection", name="prod", namespace="temporal"
        ),
        fleet,
    )
    cluster = registry.resolve(
        ConnectionTarget(
            api_group="temporal.io", kind="ClusterConnection", name="prod", namespace="temporal"
        ),
        fleet,
    )

    assert namespaced.identity != cluster.identity
    assert namespaced.host_port == "a:1"
    assert cluster.host_port == "temporal-frontend.temporal.svc.cluster.local:7233"
    assert namespaced.fingerprint() != cluster.fingerprint()


def test_an_unregistered_kind_fails_with_unknown_connection_kind() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")
    target = ConnectionTarget(
        api_group="temporal.io", kind="VaultConnection", name="x", namespace="sqs"
    )

    with pytest.raises(TwcConnectionError) as caught:
        Registry.with_builtins().resolve(target, fleet)

    assert caught.value.reason is Reason.UNKNOWN_CONNECTION_KIND
    assert caught.value.retryable is False
    assert "registered: ClusterConnection.temporal.io, Connection.temporal.io" in str(caught.value)


def test_a_missing_object_fails_with_connection_not_found() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")
    target = ConnectionTarget(
        api_group="temporal.io", kind="ClusterConnection", name="nope", namespace="sqs"
    )

    with pytest.raises(TwcConnectionError) as caught:
        Registry.with_builtins().resolve(target, fleet)

    assert caught.value.reason is Reason.CONNECTION_NOT_FOUND


def test_a_kind_can_only_be_registered_once() -> None:
    registry = Registry.with_builtins()

    with pytest.raises(TwcError, match="already served"):
        registry.register(NamespacedConnectionProvider())


def test_fleet_connections_resolve_per_worker() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")

    resolved = resolve_fleet_connections(fleet, registry=Registry.with_builtins())

    assert {key: conn.identity.kind for key, conn in resolved.items()} == {
        ("sqs", "billing"): "Connection",
        ("temporal", "reports"): "ClusterConnection",
        ("sqs", "worker-orders-fifo"): "ClusterConnection",
    }


def test_unknown_kinds_in_a_fleet_are_reported_once_where_written() -> None:
    data = valid_fleet()
    data["defaults"]["connectionRef"]["objectRef"]["kind"] = "VaultConnection"
    fleet = load_fleet(data, "f.yaml")

    with pytest.raises(SpecError) as caught:
        resolve_fleet_connections(fleet, file="f.yaml", registry=Registry.with_builtins())

    (line,) = caught.value.lines()  # two workers inherit it; one issue
    assert line.startswith(
        "f.yaml: defaults.connectionRef.objectRef: UnknownConnectionKind: "
        "no connection provider for VaultConnection.temporal.io"
    )


def test_a_third_kind_registers_through_the_entry_point_group(plugin_on_path: None) -> None:
    providers, errors = load_entry_point_providers()

    assert errors == []
    assert [(p.api_group, p.kind) for p in providers] == [("temporal.io", "StaticConnection")]


def test_a_worker_referencing_a_plugin_kind_resolves(plugin_on_path: None) -> None:
    registry = Registry.from_entry_points()
    fleet = load_fleet(_static_fleet(), "f.yaml")
    reports = next(w for w in fleet.resolved_workers() if w.name == "reports")

    conn = registry.resolve_worker(reports, fleet)

    assert ("temporal.io", "StaticConnection") in registry.kinds()
    assert conn.identity == ConnectionIdentity("temporal.io", "StaticConnection", "sandbox", None)
    assert conn.host_port == "sandbox.example:7233"
    assert (conn.tls.enabled, conn.tls.server_name) == (True, "sandbox.example")
    assert resolve_fleet_connections(fleet, registry=registry)[("temporal", "reports")] == conn


def test_without_the_plugin_the_same_fleet_is_an_unknown_kind() -> None:
    fleet = load_fleet(_static_fleet(), "f.yaml")

    with pytest.raises(
        SpecError,
        match=r"UnknownConnectionKind: no connection provider for StaticConnection\.temporal\.io",
    ):
        resolve_fleet_connections(fleet, registry=Registry.from_entry_points())


def test_a_plugin_that_fails_to_load_is_reported_not_fatal(broken_plugin_on_path: None) -> None:
    registry = Registry.from_entry_points()
    target = ConnectionTarget(api_group="temporal.io", kind="Broken", name="x", namespace="ns")

    with pytest.raises(TwcConnectionError) as caught:
        registry.resolve(target, load_fleet(valid_fleet(), "f.yaml"))

    assert ("temporal.io", "Connection") in registry.kinds()
    assert len(registry.load_errors) == 1
    assert "twc_module_that_does_not_exist" in registry.load_errors[0]
    assert "plugins that failed to load: broken = twc_module_that_does_not_exist" in str(
        caught.value
    )
