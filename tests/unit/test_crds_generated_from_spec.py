"""The CRDs are generated from the fleet-file models and fit the API server.

Walking the models' fields against the CRD schemas catches a field added to a model but
missing from a CRD; the structural checks mirror what kube-apiserver refuses (the e2e
test ``test_crds_admit_and_reject`` has the real server confirm it).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, JsonValue

from twc import cli
from twc.local import cluster as local_crds
from twc.spec import ClusterConnection, Connection, TemporalWorker
from twc.spec.crds import (
    TemporalWorkerStatus,
    all_crds,
    cluster_connection_crd,
    connection_crd,
    structural,
    temporal_worker_crd,
    worker_deployment_crd,
    worker_resource_template_crd,
)

METADATA = {"name", "namespace"}


def _root(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def _spec(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(_root(crd)["properties"]["spec"])


def _models_in(annotation: Any) -> Iterator[tuple[str, type[BaseModel]]]:
    """(how to step into the schema, model) for each model inside a field annotation."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield "", annotation
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _models_in(arg)
    elif origin in (tuple, list):
        for step, model in _models_in(typing.get_args(annotation)[0]):
            yield "items" + step, model
    elif origin is dict:
        for step, model in _models_in(typing.get_args(annotation)[1]):
            yield "additionalProperties" + step, model


def _walk(
    model: type[BaseModel], schema: dict[str, Any], path: str, skip: set[str]
) -> Iterator[tuple[str, dict[str, Any] | None, str | None]]:
    """(path, schema node or None, field docstring) for every field, recursively."""
    properties = schema.get("properties", {})
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in skip:
            continue
        node = properties.get(key)
        yield f"{path}.{key}", node, field.description
        if node is None:
            continue
        for step, inner in _models_in(field.annotation):
            sub = node
            if step:
                sub = node[step]
            yield from _walk(inner, sub, f"{path}.{key}", set())


CASES = [
    pytest.param(temporal_worker_crd, TemporalWorker, METADATA, id="TemporalWorker"),
    pytest.param(connection_crd, Connection, {*METADATA, "twcCredentials"}, id="Connection"),
    pytest.param(
        cluster_connection_crd,
        ClusterConnection,
        {"name", "secretSource", "allowedNamespaces", "twcCredentials"},  # annotations
        id="ClusterConnection",
    ),
]


@pytest.mark.parametrize(("build", "model", "skip"), CASES)
def test_every_model_field_is_in_the_crd_with_its_description(
    build: Any, model: type[BaseModel], skip: set[str]
) -> None:
    fields = list(_walk(model, _spec(build()), "spec", skip))
    assert len(fields) > 5
    missing = [path for path, node, _ in fields if node is None]
    assert missing == []
    undocumented = [
        path for path, node, doc in fields if doc and node and node.get("description") != doc
    ]
    assert undocumented == []


@pytest.mark.parametrize(("build", "model", "skip"), CASES)
def test_metadata_fields_are_not_in_the_spec(
    build: Any, model: type[BaseModel], skip: set[str]
) -> None:
    spec = _spec(build())
    assert not skip & set(spec["properties"])
    assert not skip & set(spec.get("required", []))


def test_required_fields_follow_the_models() -> None:
    assert _spec(connection_crd())["required"] == ["hostPort"]
    assert "required" not in _spec(temporal_worker_crd())  # every worker field may inherit
    worker = _spec(temporal_worker_crd())["properties"]
    assert worker["autoscaling"]["required"] == ["maxReplicas", "targetBacklogPerReplica"]
    assert worker["connectionRef"]["properties"]["objectRef"]["required"] == [
        "apiGroup",
        "kind",
        "name",
    ]


def _nodes(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node (not keyword values) under ``schema``."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key, value in schema.get("properties", {}).items():
        yield from _nodes(value, f"{path}.{key}")
    for keyword in ("items", "additionalProperties"):
        yield from _nodes(schema.get(keyword), f"{path}[{keyword}]")
    for keyword in ("anyOf", "oneOf", "allOf"):
        for i, branch in enumerate(schema.get(keyword, [])):
            yield from _nodes(branch, f"{path}.{keyword}[{i}]")


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["spec"]["names"]["kind"])
def test_the_schema_is_structural(crd: dict[str, Any]) -> None:
    text = yaml.safe_dump(crd)
    assert "$ref" not in text
    assert "$defs" not in text
    for path, node in _nodes(_root(crd)):
        escapes = node.get("x-kubernetes-int-or-string") or node.get(
            "x-kubernetes-preserve-unknown-fields"
        )
        assert "type" in node or escapes, f"{path} has no type"
        assert node.get("type") != "null", path
        for keyword in ("anyOf", "oneOf", "allOf", "not", "const", "title"):
            assert keyword not in node, f"{path} has {keyword}"
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert "default" not in node or node["default"] is not None, path


def test_optional_fields_are_nullable_and_quantities_int_or_string() -> None:
    worker = _spec(temporal_worker_crd())["properties"]
    assert worker["image"] == {
        "type": "string",
        "description": TemporalWorker.model_fields["image"].description,
        "nullable": True,
    }
    assert worker["connectionRef"]["nullable"] is True
    assert worker["connectionRef"]["type"] == "object"
    requests = worker["resources"]["properties"]["requests"]["additionalProperties"]
    assert requests == {"x-kubernetes-int-or-string": True}
    node_affinity = worker["affinity"]["properties"]["nodeAffinity"]
    assert node_affinity["x-kubernetes-preserve-unknown-fields"] is True
    assert node_affinity["type"] == "object"


def test_model_defaults_are_kept_and_null_defaults_dropped() -> None:
    worker = _spec(temporal_worker_crd())["properties"]
    assert worker["autoscaling"]["properties"]["minReplicas"]["default"] == 1
    assert "default" not in worker["image"]
    key = _spec(connection_crd())["properties"]["apiKeySecretRef"]["properties"]["key"]
    assert key["default"] == "api-key"


def _rules(node: dict[str, Any]) -> dict[str, str]:
    return {r["message"]: r["rule"] for r in node.get("x-kubernetes-validations", [])}


def test_cel_rules_restate_the_model_validators() -> None:
    worker = _spec(temporal_worker_crd())
    ref = worker["properties"]["connectionRef"]
    assert _rules(ref) == {
        "exactly one of name or objectRef must be set": "has(self.name) != has(self.objectRef)"
    }
    assert _rules(ref["properties"]["objectRef"]) == {
        "apiGroup must be temporal.io": "self.apiGroup == 'temporal.io'"
    }
    assert "set queueRef or taskQueueName: the worker needs a task queue" in _rules(worker)
    exclusive = "mutualTLSSecretRef and apiKeySecretRef are mutually exclusive"
    assert exclusive in _rules(_spec(connection_crd()))
    cluster = _rules(_spec(cluster_connection_crd()))
    assert exclusive in cluster
    # No rule about twc's annotations, which are no fields of the official schema.
    assert not any("secretSource" in message for message in cluster)


def test_rules_follow_the_model_wherever_it_is_used() -> None:
    # A ConnectionRef nested under defaults would carry the same rule: rules attach to the
    # model's $defs entry, not to a hand-picked path.
    from twc.spec import Defaults
    from twc.spec.crds import openapi_schema

    defaults = openapi_schema(Defaults)
    assert "exactly one of name or objectRef must be set" in _rules(
        defaults["properties"]["connectionRef"]
    )


def test_names_scopes_and_groups() -> None:
    by_kind = {c["spec"]["names"]["kind"]: c for c in all_crds()}
    assert set(by_kind) == {
        *("TemporalWorker", "Connection", "ClusterConnection"),
        *("WorkerDeployment", "WorkerResourceTemplate"),
    }
    worker, conn, cluster = (
        by_kind["TemporalWorker"],
        by_kind["Connection"],
        by_kind["ClusterConnection"],
    )
    assert worker["metadata"]["name"] == "temporalworkers.temporal.kmsvc.io"
    assert (worker["spec"]["group"], worker["spec"]["scope"]) == ("temporal.kmsvc.io", "Namespaced")
    assert (conn["spec"]["group"], conn["spec"]["scope"]) == ("temporal.io", "Namespaced")
    assert (cluster["spec"]["group"], cluster["spec"]["scope"]) == ("temporal.io", "Cluster")
    # The connection kinds at the official worker controller's version, the worker at twc's.
    expected = {"TemporalWorker": "v1", "Connection": "v1alpha1", "ClusterConnection": "v1alpha1"}
    expected["WorkerDeployment"] = expected["WorkerResourceTemplate"] = "v1alpha1"
    for crd in all_crds():
        (version,) = crd["spec"]["versions"]
        want = expected[crd["spec"]["names"]["kind"]]
        assert (version["name"], version["served"], version["storage"]) == (want, True, True)


def test_the_worker_resource_template_crd_has_the_official_fields() -> None:
    crd = worker_resource_template_crd()
    assert crd["metadata"]["name"] == "workerresourcetemplates.temporal.io"
    assert crd["spec"]["names"]["shortNames"] == ["wrt"]
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == {
        "workerDeploymentRef",
        "temporalWorkerDeploymentRef",
        "template",
    }
    # An empty `scaleTargetRef: {}` inside the template must survive pruning.
    assert spec["properties"]["template"]["x-kubernetes-preserve-unknown-fields"] is True
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Worker", "Kind", "Age"]


def test_the_official_worker_deployment_crd_has_the_official_fields_only() -> None:
    crd = worker_deployment_crd()
    assert crd["metadata"]["name"] == "workerdeployments.temporal.io"
    assert crd["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "twc"}
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == {
        *("replicas", "template", "minReadySeconds", "progressDeadlineSeconds"),
        *("rollout", "sunset", "workerOptions"),
    }
    assert spec["required"] == ["rollout", "sunset", "template", "workerOptions"]
    assert set(spec["properties"]["rollout"]["properties"]) == {"strategy", "steps", "gate"}
    options = spec["properties"]["workerOptions"]
    assert set(options["properties"]) == {
        "connectionRef",
        "temporalNamespace",
        "unsafeCustomBuildID",
    }
    assert options["required"] == ["connectionRef", "temporalNamespace"]
    columns = [(c["name"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]
    assert columns == [("Current", 0), ("Target", 0), ("Ramp %", 0), ("Age", 0)]
    assert version["subresources"] == {"status": {}}


def test_worker_printer_columns_and_status_subresource() -> None:
    (version,) = temporal_worker_crd()["spec"]["versions"]
    columns = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Phase", ".status.phase"),
        ("Replicas", ".status.replicas"),
        ("Ready", ".status.readyReplicas"),
        ("TaskQueue", ".status.taskQueue"),
        ("From", ".metadata.labels.twc\\.temporal\\.io/derived-from"),
        ("Current", ".status.currentVersion.buildID"),
        ("Target", ".status.targetVersion.buildID"),
        ("Ramp %", ".status.targetVersion.rampPercentage"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert set(status["properties"]) == {
        "phase",
        "replicas",
        "readyReplicas",
        "observedGeneration",
        "observedConnectionRef",
        "taskQueue",
        "conditions",
        "scalingReason",  # autoscaled workers
        # Versioned workers: the official controller's version records.
        "deploymentName",
        "targetVersion",
        "currentVersion",
        "rampingVersion",
        "deprecatedVersions",
        "rollout",
    }
    assert status["properties"]["targetVersion"]["properties"]["status"]["enum"] == [
        "NotRegistered",
        "Inactive",
        "Ramping",
        "Current",
        "Draining",
        "Drained",
    ]
    assert status["properties"]["phase"]["enum"] == ["Pending", "Ready", "Failed"]
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    condition = conditions["items"]
    assert set(condition["required"]) >= {"type", "status"}
    assert {"reason", "message", "lastTransitionTime"} <= set(condition["properties"])
    missing = [p for p, node, _ in _walk(TemporalWorkerStatus, status, "status", set()) if not node]
    assert missing == []


def test_status_model_reads_what_the_daemon_writes() -> None:
    status = TemporalWorkerStatus.model_validate(
        {
            "phase": "Ready",
            "replicas": 2,
            "readyReplicas": 2,
            "observedGeneration": 3,
            "observedConnectionRef": {"apiGroup": "temporal.io", "kind": "Connection", "name": "x"},
            "conditions": [{"type": "WorkerDeploymentReady", "status": "True"}],
            "someoneElses": 1,
        }
    )
    assert status.ready_replicas == 2
    dumped = status.model_dump(mode="json", exclude_none=True)
    assert dumped["readyReplicas"] == 2
    assert dumped["observedConnectionRef"]["apiGroup"] == "temporal.io"


def test_converter_refuses_what_a_structural_schema_cannot_say() -> None:
    class Node(BaseModel):
        child: Node | None = None

    with pytest.raises(ValueError, match="recursive"):
        structural(Node.model_json_schema())

    class A(BaseModel):
        a: int

    class B(BaseModel):
        b: int

    class Either(BaseModel):
        value: A | B

    with pytest.raises(ValueError, match="anyOf"):
        structural(Either.model_json_schema())


def test_free_form_json_is_preserved() -> None:
    class Free(BaseModel):
        spec: dict[str, JsonValue]
        anything: JsonValue = None

    schema = structural(Free.model_json_schema())
    assert schema["properties"]["spec"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert schema["properties"]["anything"] == {"x-kubernetes-preserve-unknown-fields": True}


def test_twc_crds_prints_a_yaml_stream_of_every_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["crds"]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    assert printed == all_crds()


def test_twc_local_up_installs_them_next_to_the_queue_crd() -> None:
    names = [c["metadata"]["name"] for c in local_crds.all_crds()]
    assert names == [
        "queues.kmsvc.io",
        "temporalworkers.temporal.kmsvc.io",
        "connections.temporal.io",
        "clusterconnections.temporal.io",
        "workerdeployments.temporal.io",
        "workerresourcetemplates.temporal.io",
    ]
