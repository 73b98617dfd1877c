"""The official worker controller's Connection, on twc's cluster and on a cluster of its own.

On the real kube-apiserver, with kubectl: the Connection manifests of the official docs
(verbatim copies under ``tests/fixtures/official``) apply to twc's CRD as they are; with
the official CRD installed first, ``twc local up`` and ``twc crds --install`` leave it
exactly as it is (same ``uid`` and ``resourceVersion``), the docs' manifests apply to it,
and a twc worker referencing one of them gets its Deployment through ``twc up``. twc's
Connection has no field of its own the official schema would prune (checked), and twc's
old ``temporal.io/v1`` CRD is switched to ``v1alpha1`` cleanly.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import FleetStack, create_tls_secret, fleet_doc
from tests.e2e.native import Kubectl, temporal_worker
from tests.helpers import delete_twc_objects
from twc import cli
from twc.cli import up as up_cmd
from twc.kube.crds import install_crds
from twc.local.environment import LocalEnvironment
from twc.spec import CONNECTION_VERSION, load_connection_object
from twc.spec.crds import all_crds, connection_crd

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

OFFICIAL = Path(__file__).parent.parent / "fixtures" / "official"
CRD = "connections.temporal.io"


@pytest.fixture
def kubectl(local_env: LocalEnvironment) -> Kubectl:
    return Kubectl(local_env)


@pytest.fixture
def other_namespace(kube: Any) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(name)
    yield name
    delete_twc_objects(kube, name)


def _delete_crd(kube: Any, name: str) -> None:
    try:
        kube.ext.delete_custom_resource_definition(name)
    except ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            kube.ext.read_custom_resource_definition(name)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.2)
    raise AssertionError(f"CRD {name} was not deleted")


def _wait_served(kube: Any, version: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            kube.custom.list_cluster_custom_object("temporal.io", version, "connections")
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.2)
    raise AssertionError(f"connections.temporal.io/{version} is not served")


@pytest.fixture
def official_crd(kube: Any, kubectl: Kubectl) -> Iterator[Any]:
    """The official Connection CRD in place of twc's; twc's again afterwards."""
    _delete_crd(kube, CRD)
    kubectl("apply", "-f", str(OFFICIAL / "crd-connections.yaml"))
    kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
    _wait_served(kube, CONNECTION_VERSION)
    try:
        yield kube.ext.read_custom_resource_definition(CRD)
    finally:
        _delete_crd(kube, CRD)
        install_crds(kube.api_client, all_crds())
        _wait_served(kube, CONNECTION_VERSION)


def _identity(crd: Any) -> tuple[str, str, dict[str, str] | None]:
    return (crd.metadata.uid, crd.metadata.resource_version, crd.metadata.labels)


def test_the_official_docs_connections_apply_verbatim_to_twcs_crd(
    kube: Any, kubectl: Kubectl, namespace: str, other_namespace: str
) -> None:
    assert kube.ext.read_custom_resource_definition(CRD).metadata.labels == {
        "app.kubernetes.io/managed-by": "twc"
    }
    _apply_the_docs(kube, kubectl, namespace, other_namespace)


def _apply_the_docs(kube: Any, kubectl: Kubectl, namespace: str, other: str) -> None:
    """Apply every documented Connection unchanged and read each back as twc reads it."""
    kubectl("apply", "-n", namespace, "-f", str(OFFICIAL / "connection-mtls.yaml"))
    kubectl("apply", "-n", other, "-f", str(OFFICIAL / "connection-api-key.yaml"))
    try:
        # This one names its namespace (default) itself.
        kubectl("apply", "-f", str(OFFICIAL / "migration-connections.yaml"))
        for name in ("production-temporal", "staging-temporal"):
            obj = kube.custom.get_namespaced_custom_object(
                "temporal.io", CONNECTION_VERSION, "default", "connections", name
            )
            assert load_connection_object(obj).mutual_tls_secret_ref is not None
    finally:
        kubectl("delete", "-f", str(OFFICIAL / "migration-connections.yaml"), "--ignore-not-found")
    mtls = load_connection_object(
        kube.custom.get_namespaced_custom_object(
            "temporal.io", CONNECTION_VERSION, namespace, "connections", "production-temporal"
        )
    )
    assert mtls.tls is not None
    assert mtls.tls.server_name == "production.abc123.tmprl.cloud"
    assert mtls.mutual_tls_secret_ref is not None
    assert mtls.mutual_tls_secret_ref.name == "temporal-cloud-mtls"
    keyed = load_connection_object(
        kube.custom.get_namespaced_custom_object(
            "temporal.io", CONNECTION_VERSION, other, "connections", "production-temporal"
        )
    )
    assert keyed.api_key_secret_ref is not None
    assert (keyed.api_key_secret_ref.name, keyed.api_key_secret_ref.key) == (
        "temporal-api-key",
        "api-key",
    )


def test_with_the_official_crd_installed_twc_keeps_it_and_its_workers_use_the_docs_connections(
    local_env: LocalEnvironment,
    kube: Any,
    kubectl: Kubectl,
    namespace: str,
    other_namespace: str,
    official_crd: Any,
    fleet_stack: Callable[..., FleetStack],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _identity(official_crd)
    assert not (before[2] or {}).get("app.kubernetes.io/managed-by")

    # `twc local up` (installing CRDs on every up) and `twc crds --install` leave it be.
    local_env.up(progress=lambda m: None)
    monkeypatch.setenv("KUBECONFIG", str(local_env.kubeconfig))
    assert cli.main(["crds", "--install"]) == 0
    printed = capsys.readouterr().out
    assert f"{CRD}: kept (not labelled as twc's" in printed
    assert "clusterconnections.temporal.io: updated" in printed
    assert _identity(kube.ext.read_custom_resource_definition(CRD)) == before

    # The docs' manifests apply to the official CRD too.
    _apply_the_docs(kube, kubectl, namespace, other_namespace)

    # A twc worker (a TemporalWorker object) referencing the docs' mTLS Connection gets
    # its Deployment from `twc up`, which reads the cluster's objects as the daemon does.
    create_tls_secret(kube, namespace, name="temporal-cloud-mtls")
    kube.custom.create_namespaced_custom_object(
        "temporal.kmsvc.io",
        "v1",
        namespace,
        "temporalworkers",
        temporal_worker(namespace, "payments", "payments", {"name": "production-temporal"}),
    )
    fs = fleet_stack(fleet_doc(namespace, host_port=local_env.temporal_address()))
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    code = up_cmd.run_up(fs.name, str(fs.fleet_file), out=io.StringIO(), cluster_objects=True)
    assert code == 0, err.getvalue()
    assert "1 TemporalWorker" in err.getvalue()
    dep = kube.get_deployment(namespace, "payments")
    assert dep is not None, err.getvalue()
    pod = dep["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["TEMPORAL_ADDRESS"] == "production.abc123.tmprl.cloud:7233"
    assert env["TEMPORAL_TLS"] == "true"
    assert env["TEMPORAL_TLS_SERVER_NAME"] == "production.abc123.tmprl.cloud"
    assert {
        "name": "temporal-tls",
        "secret": {"secretName": "temporal-cloud-mtls", "defaultMode": 420},
    } in pod["volumes"]
    assert dep["metadata"]["annotations"]["twc.temporal.io/connection"] == (
        f"{namespace}/production-temporal"
    )
    assert _identity(kube.ext.read_custom_resource_definition(CRD)) == before


def test_the_official_schema_keeps_every_twc_connection_field(
    kube: Any, namespace: str, official_crd: Any
) -> None:
    expected: dict[str, Any] = {
        "hostPort": "temporal.example:7233",
        "tls": {"serverName": "temporal.example"},
        "apiKeySecretRef": {"name": "key", "key": "token", "optional": False},
    }
    body = {
        "apiVersion": f"temporal.io/{CONNECTION_VERSION}",
        "kind": "Connection",
        "metadata": {"name": "full", "namespace": namespace},
        # `secretSource` is no Connection field anywhere: the official schema prunes it,
        # which is why twc keeps no settings of its own in a Connection's spec.
        "spec": {**expected, "secretSource": {"namespace": "temporal"}},
    }
    stored = kube.custom.create_namespaced_custom_object(
        "temporal.io", CONNECTION_VERSION, namespace, "connections", body
    )
    assert "secretSource" not in stored["spec"]
    assert stored["spec"] == expected
    conn = load_connection_object(stored)
    assert (conn.host_port, conn.api_key_secret_ref.key if conn.api_key_secret_ref else None) == (
        "temporal.example:7233",
        "token",
    )


def test_an_old_v1_crd_of_twcs_is_switched_to_v1alpha1_cleanly(kube: Any, namespace: str) -> None:
    old = connection_crd()
    (version,) = old["spec"]["versions"]
    version["name"] = "v1"
    _delete_crd(kube, CRD)
    try:
        assert [o.action for o in install_crds(kube.api_client, [old])] == ["created"]
        _wait_served(kube, "v1")
        kube.custom.create_namespaced_custom_object(
            "temporal.io",
            "v1",
            namespace,
            "connections",
            {
                "apiVersion": "temporal.io/v1",
                "kind": "Connection",
                "metadata": {"name": "old"},
                "spec": {"hostPort": "temporal.example:7233"},
            },
        )
        (outcome,) = install_crds(kube.api_client, [connection_crd()])
        assert outcome.action == "recreated", outcome
        assert "v1 is gone" in outcome.note
        served = kube.ext.read_custom_resource_definition(CRD)
        assert [v.name for v in served.spec.versions] == [CONNECTION_VERSION]
        _wait_served(kube, CONNECTION_VERSION)
        found = kube.custom.list_namespaced_custom_object(
            "temporal.io", CONNECTION_VERSION, namespace, "connections"
        )
        assert found["items"] == []
        # Installing again changes nothing.
        (again,) = install_crds(kube.api_client, [connection_crd()])
        assert again.action == "updated"
    finally:
        _delete_crd(kube, CRD)
        install_crds(kube.api_client, all_crds())
        _wait_served(kube, CONNECTION_VERSION)
