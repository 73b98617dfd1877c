"""``twcCredentials``: a connection names the credential twc's own calls use (task-queue
checks, routing, gates, backlogs) apart from the one its workers get, so workers never
hold routing rights. The worker's Deployment names only the workers' secret; twc's
clients connect with twc's; on Connection and ClusterConnection objects (the official
schema) the field is the annotation ``twc.temporal.io/twc-credentials``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.unit._native_objects import cluster_conn_obj, conn_obj
from twc import builders
from twc.connections import Registry, poller_failure
from twc.errors import SpecError, TwcConnectionError
from twc.reconcile.asking import TemporalBacklogs
from twc.spec import (
    TWC_CREDENTIALS_ANNOTATION,
    AuthMode,
    load_cluster_connection_object,
    load_connection_object,
    load_fleet,
)
from twc.spec.crds import cluster_connection_crd, connection_crd

REGISTRY = Registry.with_builtins()


def _fleet(twc: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "clusterConnections": [
            {
                "name": "prod",
                "hostPort": "temporal.example:7233",
                "mutualTLSSecretRef": {"name": "worker-mtls"},
                "twcCredentials": twc,
            }
        ],
        "workers": [
            {
                "name": "orders",
                "namespace": "apps",
                "taskQueueName": "orders",
                "image": "registry.example/orders:1.0",
                "connectionRef": {
                    "objectRef": {
                        "apiGroup": "temporal.io",
                        "kind": "ClusterConnection",
                        "name": "prod",
                    }
                },
            }
        ],
    }


def test_twc_connects_with_its_own_credential_and_workers_never_see_it() -> None:
    fleet = load_fleet(_fleet({"apiKeySecretRef": {"name": "twc-key", "key": "key"}}), "f.yaml")
    worker = fleet.resolved_workers()[0]
    conn = REGISTRY.resolve_worker(worker, fleet)

    twc = conn.for_twc()
    assert (conn.auth_mode, conn.secret_name) == (AuthMode.MTLS, "worker-mtls")
    assert (twc.auth_mode, twc.secret_name, twc.host_port) == (
        AuthMode.API_KEY,
        "twc-key",
        "temporal.example:7233",
    )
    assert twc.fingerprint() != conn.fingerprint()  # its own cached client
    deployment = builders.worker_deployment(worker, conn, conn.fingerprint())
    text = json.dumps(deployment)
    assert "worker-mtls" in text
    assert "twc-key" not in text


def test_without_twc_credentials_twc_uses_the_workers() -> None:
    data = _fleet({})
    del data["clusterConnections"][0]["twcCredentials"]
    fleet = load_fleet(data, "f.yaml")
    conn = REGISTRY.resolve_worker(fleet.resolved_workers()[0], fleet)
    assert conn.for_twc() is conn


def test_twc_credentials_name_exactly_one_credential() -> None:
    with pytest.raises(SpecError, match="set mutualTLSSecretRef or apiKeySecretRef"):
        load_fleet(_fleet({}), "f.yaml")
    both = {"mutualTLSSecretRef": {"name": "a"}, "apiKeySecretRef": {"name": "b"}}
    with pytest.raises(SpecError, match="mutually exclusive"):
        load_fleet(_fleet(both), "f.yaml")


@pytest.mark.parametrize("load", [load_connection_object, load_cluster_connection_object])
def test_an_objects_twc_credentials_are_its_annotation(load: Any) -> None:
    obj = (
        conn_obj("prod", hostPort="t:7233")
        if load is load_connection_object
        else cluster_conn_obj("prod", hostPort="t:7233")
    )
    obj["metadata"]["annotations"] = {
        TWC_CREDENTIALS_ANNOTATION: '{"mutualTLSSecretRef": {"name": "twc-mtls"}}'
    }
    found = load(obj).twc_credentials
    assert found is not None
    assert found.mutual_tls_secret_ref.name == "twc-mtls"
    obj["metadata"]["annotations"][TWC_CREDENTIALS_ANNOTATION] = "not json"
    with pytest.raises(SpecError, match=r'annotations\["twc.temporal.io/twc-credentials"\]'):
        load(obj)
    for crd in (connection_crd(), cluster_connection_crd()):
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert "twcCredentials" not in spec["properties"]


@pytest.mark.parametrize(
    ("twc", "reason"), [(True, "TwcCredentialInvalid"), (False, "AuthSecretInvalid")]
)
def test_an_unreadable_twc_credential_is_named_as_twcs_not_the_workers(
    twc: bool, reason: str
) -> None:
    data = _fleet({"mutualTLSSecretRef": {"name": "twc-mtls"}})
    if not twc:
        del data["clusterConnections"][0]["twcCredentials"]
    fleet = load_fleet(data, "f.yaml")

    def read_secret(namespace: str, name: str) -> dict[str, bytes]:
        raise LookupError(f"secret {namespace}/{name} not found")

    source = TemporalBacklogs(read_secret=read_secret)
    (ref,) = source.refs(fleet, fleet.resolved_workers()).values()
    with pytest.raises((LookupError, TwcConnectionError)) as raised:
        asyncio.run(source.pollers(ref))
    found, message = poller_failure(raised.value)
    assert found == reason
    assert ("twc-mtls" in message) is twc
