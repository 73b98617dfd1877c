"""A ClusterConnection with ``allowedNamespaces`` serves only workers of those
namespaces: a TemporalWorker or Queue object elsewhere is refused alone
(``NamespaceNotAllowed``), and nothing is made for it — no credential copy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pytest

from tests.unit._daemon_fakes import queue_object
from tests.unit._native_objects import cluster_conn_obj, cluster_ref, worker_obj
from tests.unit.pulumi_mocks import RecordingMocks
from tests.unit.test_program_builds_resource_graph import CA, KEY
from twc.connections import Registry
from twc.desired import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredFleet,
    DesiredInputs,
    ObjectList,
    desired_fleet,
    kind_key,
)
from twc.errors import SpecError
from twc.spec import (
    ALLOWED_NAMESPACES_ANNOTATION,
    SOURCE_NAMESPACE_ANNOTATION,
    load_cluster_connection_object,
    load_fleet,
)
from twc.spec.crds import cluster_connection_crd

REGISTRY = Registry.with_builtins()
SECRETS = {("temporal", "temporal-mtls"): {"tls.crt": CA, "tls.key": KEY}}


def _fleet(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {
            "image": "registry.example/worker:1.0.0",
            "connectionRef": cluster_ref("prod"),
        },
        "clusterConnections": [
            {
                "name": "prod",
                "hostPort": "temporal.example:7233",
                "mutualTLSSecretRef": {"name": "temporal-mtls"},
                "secretSource": {"namespace": "temporal"},
                "allowedNamespaces": ["payments"],
            }
        ],
        **extra,
    }


def _desired(
    doc: dict[str, Any],
    workers: Sequence[dict[str, Any]] = (),
    queues: Sequence[dict[str, Any]] = (),
) -> DesiredFleet:
    cluster = {
        WORKER_KIND_KEY: ObjectList.known(workers),
        QUEUE_KIND_KEY: ObjectList.known(queues),
        kind_key("ClusterConnection", "temporal.io"): ObjectList.known(()),
        kind_key("Connection", "temporal.io"): ObjectList.known(()),
    }
    return desired_fleet(
        load_fleet(doc, "f.yaml"),
        DesiredInputs(fleet=doc, cluster=cluster),
        registry=REGISTRY,
        file="f.yaml",
    )


def test_objects_in_a_namespace_the_connection_does_not_allow_are_refused_alone() -> None:
    desired = _desired(
        _fleet(),
        workers=[
            worker_obj("ok", namespace="payments", ref=cluster_ref("prod")),
            worker_obj("intruder", namespace="tenant-b", ref=cluster_ref("prod")),
        ],
        queues=[
            queue_object("orders", namespace="payments"),
            queue_object("grab", namespace="tenant-b"),
        ],
    )

    assert sorted(desired.workers) == ["payments/ok", "payments/worker-orders"]
    refused = {(r.obj.kind, r.key): r for r in desired.rejected}
    assert set(refused) == {("TemporalWorker", "tenant-b/intruder"), ("Queue", "tenant-b/grab")}
    for rejection in refused.values():
        assert rejection.reason == "NamespaceNotAllowed"
        assert not rejection.kept
        # Only the connection and the object's own namespace are named.
        assert "payments" not in rejection.message
        assert "tenant-b" in rejection.message


def test_a_fleet_file_worker_in_a_namespace_not_allowed_refuses_the_file() -> None:
    doc = _fleet(workers=[{"name": "w", "namespace": "tenant-b", "taskQueueName": "q"}])
    with pytest.raises(SpecError, match="NamespaceNotAllowed"):
        _desired(doc)


@pulumi.runtime.test  # type: ignore[untyped-decorator]
def test_no_credential_copy_is_made_for_a_refused_namespace() -> Any:
    from twc.program import ProgramOptions, build

    mocks = RecordingMocks()
    pulumi.runtime.set_mocks(mocks, preview=False)
    desired = _desired(
        _fleet(),
        workers=[
            worker_obj("ok", namespace="payments", ref=cluster_ref("prod")),
            worker_obj("intruder", namespace="tenant-b", ref=cluster_ref("prod")),
        ],
    )
    statuses = build(
        desired,
        file="f.yaml",
        options=ProgramOptions(),
        read_secret=lambda ns, name: SECRETS.get((ns, name)),
    )

    def check(_: Any) -> None:
        copies = mocks.of_type("kubernetes:core/v1:Secret")
        assert [c.inputs["metadata"]["namespace"] for c in copies] == ["payments"]
        namespaces = {
            d.inputs["metadata"]["namespace"]
            for d in mocks.of_type("kubernetes:apps/v1:Deployment")
        }
        assert namespaces == {"payments"}

    return pulumi.Output.all(*statuses.values()).apply(check)


def test_an_objects_allowed_namespaces_and_secret_source_are_its_annotations() -> None:
    obj = cluster_conn_obj("prod", mutualTLSSecretRef={"name": "mtls"})
    obj["metadata"]["annotations"] = {
        ALLOWED_NAMESPACES_ANNOTATION: "payments, billing",
        SOURCE_NAMESPACE_ANNOTATION: "temporal",
    }

    conn = load_cluster_connection_object(obj)

    assert conn.allowed_namespaces == ("payments", "billing")
    assert conn.secret_source is not None
    assert conn.secret_source.namespace == "temporal"
    # The CRD is the official schema: neither is a field of it.
    spec = cluster_connection_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert not {"allowedNamespaces", "secretSource"} & set(spec["properties"]["spec"]["properties"])


def test_a_secret_source_without_allowed_namespaces_names_the_annotation() -> None:
    obj = cluster_conn_obj("prod", mutualTLSSecretRef={"name": "mtls"})
    obj["metadata"]["annotations"] = {SOURCE_NAMESPACE_ANNOTATION: "temporal"}

    with pytest.raises(SpecError, match="secretSource needs allowedNamespaces"):
        load_cluster_connection_object(obj)
    obj["metadata"]["annotations"][ALLOWED_NAMESPACES_ANNOTATION] = "Not_A_Label"
    with pytest.raises(SpecError, match=r'annotations\["twc.temporal.io/allowed-namespaces"\]'):
        load_cluster_connection_object(obj)
