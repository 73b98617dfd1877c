"""TemporalWorker, Connection and ClusterConnection objects become fleet-file models."""

from __future__ import annotations

import pytest

from tests.unit._native_objects import cluster_conn_obj, conn_obj, worker_obj
from twc.errors import SpecError
from twc.spec import (
    load_cluster_connection_object,
    load_connection_object,
    load_custom_connection_object,
    load_worker_object,
)


def test_a_worker_object_takes_its_name_and_namespace_from_metadata() -> None:
    obj = worker_obj("orders", namespace="sales", replicas=3)
    obj["spec"]["name"] = "hijack"  # a spec cannot rename the object

    worker = load_worker_object(obj)

    assert (worker.namespace, worker.name) == ("sales", "orders")
    assert worker.replicas == 3
    assert worker.task_queue_name == "orders"


def test_an_invalid_worker_object_names_the_object_and_the_field() -> None:
    obj = worker_obj("orders", env={"TEMPORAL_ADDRESS": "x"})

    with pytest.raises(SpecError) as err:
        load_worker_object(obj)

    text = str(err.value)
    assert "temporal.kmsvc.io/v1 TemporalWorker team/orders" in text
    assert "TEMPORAL_ADDRESS" in text


def test_a_name_the_crd_admits_but_the_model_does_not_is_rejected() -> None:
    # The CRD only limits the length; Deployment names must be DNS labels.
    with pytest.raises(SpecError) as err:
        load_worker_object(worker_obj("a.b"))
    assert "metadata.name" in str(err.value)


def test_connection_objects_convert_with_their_scope() -> None:
    cc = load_cluster_connection_object(cluster_conn_obj("prod"))
    conn = load_connection_object(conn_obj("prod", "sales"))

    assert cc.name == "prod"
    assert cc.host_port == "temporal.example:7233"
    assert (conn.namespace, conn.name) == ("sales", "prod")


def test_a_plugin_kind_object_becomes_a_custom_connection() -> None:
    obj = {"metadata": {"name": "edge"}, "spec": {"hostPort": "edge:7233"}}

    custom = load_custom_connection_object(
        obj, api_group="temporal.io", kind="StaticConnection", namespaced=False
    )

    assert (custom.kind, custom.name, custom.namespace) == ("StaticConnection", "edge", None)
    assert custom.spec == {"hostPort": "edge:7233"}


def test_a_malformed_object_is_a_spec_error_not_a_crash() -> None:
    with pytest.raises(SpecError):
        load_worker_object(["not", "a", "mapping"])
    with pytest.raises(SpecError):
        load_cluster_connection_object({"metadata": {"name": "x"}, "spec": "nope"})
