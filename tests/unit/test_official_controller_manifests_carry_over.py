"""The official worker controller's objects, as its documentation writes them, in twc.

Its Connection CRD and twc's have the same fields (so neither prunes what the other
writes), its documented Connections load as twc connections, twc watches them at
``temporal.io/v1alpha1``, and a WorkerDeployment is read as the TemporalWorker it is
reconciled as, without what twc sets itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from twc.connections import Registry
from twc.spec import CONNECTION_VERSION, load_connection_object
from twc.spec.convert import as_temporal_worker
from twc.spec.crds import cluster_connection_crd, connection_crd

OFFICIAL = Path(__file__).parent.parent / "fixtures" / "official"


def _docs(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((OFFICIAL / name).read_text()) if d is not None]


def _paths(schema: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, node in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        yield path
        yield from _paths(node, path)


def _served(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v["served"]]
    return dict(version)


def test_twc_and_the_official_connection_crd_have_the_same_fields() -> None:
    (official,) = _docs("crd-connections.yaml")
    ours = connection_crd()
    assert ours["metadata"]["name"] == official["metadata"]["name"] == "connections.temporal.io"
    assert _served(ours)["name"] == _served(official)["name"] == CONNECTION_VERSION
    assert (ours["spec"]["scope"], ours["spec"]["names"]["kind"]) == (
        official["spec"]["scope"],
        official["spec"]["names"]["kind"],
    )
    ours_spec = _served(ours)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    official_spec = _served(official)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert sorted(_paths(ours_spec)) == sorted(_paths(official_spec))
    assert "status" in _served(ours)["subresources"]
    assert [c["name"] for c in _served(ours)["additionalPrinterColumns"]] == [
        c["name"] for c in _served(official)["additionalPrinterColumns"]
    ]


def test_twcs_cluster_connection_has_the_official_connection_fields_only() -> None:
    (official,) = _docs("crd-connections.yaml")
    ours = cluster_connection_crd()
    assert ours["spec"]["scope"] == "Cluster"
    ours_spec = _served(ours)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    official_spec = _served(official)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert sorted(_paths(ours_spec)) == sorted(_paths(official_spec))


def test_a_worker_deployment_may_name_a_cluster_connection() -> None:
    ref = {"name": "shared", "kind": "ClusterConnection"}
    doc = {"kind": "WorkerDeployment", "spec": {"workerOptions": {"connectionRef": ref}}}

    spec = as_temporal_worker(doc)["spec"]

    cluster = {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": "shared"}
    assert spec["connectionRef"] == {"objectRef": cluster}


def test_the_official_crd_is_not_labelled_as_twcs() -> None:
    from twc.kube.crds import is_twc_crd

    (official,) = _docs("crd-connections.yaml")
    assert not is_twc_crd(official["metadata"].get("labels"))
    assert is_twc_crd(connection_crd()["metadata"]["labels"])


@pytest.mark.parametrize(
    "name", ["connection-mtls.yaml", "connection-api-key.yaml", "migration-connections.yaml"]
)
def test_the_documented_connections_load_as_twc_connections(name: str) -> None:
    for doc in _docs(name):
        conn = load_connection_object({**doc, "metadata": {"namespace": "apps", **doc["metadata"]}})
        assert conn.host_port == doc["spec"]["hostPort"]
        assert conn.tls_enabled


def test_twc_watches_its_connection_kinds_at_the_official_version() -> None:
    kinds = {k.kind: k for k in Registry.with_builtins().watched_kinds()}
    assert {k.version for k in kinds.values()} == {CONNECTION_VERSION}
    assert (kinds["Connection"].plural, kinds["ClusterConnection"].plural) == (
        "connections",
        "clusterconnections",
    )


def test_a_worker_deployment_is_read_without_what_twc_sets() -> None:
    doc: dict[str, Any] = {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "WorkerDeployment",
        "metadata": {"name": "orders", "namespace": "apps"},
        "spec": {
            "minReadySeconds": 10,
            "rollout": {"strategy": "AllAtOnce"},
            "sunset": {"scaledownDelay": "1h", "deleteDelay": "24h"},
            "workerOptions": {
                "connectionRef": {"name": "prod"},
                "temporalNamespace": "default",
                "unsafeCustomBuildID": "v1",
            },
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "x", "team": "t"}},
                "spec": {
                    "serviceAccountName": "orders",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "reg/orders:1",
                            "env": [
                                {"name": "TEMPORAL_ADDRESS", "value": "x:7233"},
                                {"name": "LOG_LEVEL", "value": "info"},
                            ],
                        }
                    ],
                },
            },
        },
    }

    worker = as_temporal_worker(doc)

    assert (worker["apiVersion"], worker["kind"]) == ("temporal.kmsvc.io/v1", "TemporalWorker")
    assert worker["metadata"] == doc["metadata"]
    spec = worker["spec"]
    assert spec["taskQueueName"] == "orders"
    assert spec["connectionRef"] == {"name": "prod"}
    assert spec["rollout"] == {"strategy": "AllAtOnce", "buildID": "v1"}
    assert spec["minReadySeconds"] == 10  # the Deployment's, as twc's field of that name
    assert spec["template"]["spec"] == {
        "containers": [
            {
                "name": "worker",
                "image": "reg/orders:1",
                "env": [{"name": "LOG_LEVEL", "value": "info"}],
            }
        ]
    }
    assert spec["template"]["metadata"] == {"labels": {"team": "t"}}
    # The object itself is not changed, and any other kind passes as it is.
    assert doc["spec"]["template"]["spec"]["serviceAccountName"] == "orders"
    other = {"kind": "TemporalWorker", "spec": {}}
    assert as_temporal_worker(other) is other
