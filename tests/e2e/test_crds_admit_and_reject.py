"""The generated CRDs on a real kube-apiserver.

The session's local environment installs every CRD of ``twc.local.cluster.all_crds()``, so
the API server has already accepted the generated schemas as structural (it refuses
anything else). These tests create objects through it: valid ones are admitted, and the
rules the pydantic validators enforce are enforced by the server's CEL rules too, with
the same messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.helpers import delete_twc_objects
from twc.errors import SpecError
from twc.spec import API_GROUP, TemporalWorker, load_worker_object
from twc.spec.crds import CONNECTION_VERSION, CRD_VERSION, WORKER_GROUP, all_crds

pytestmark = pytest.mark.e2e

CLUSTER_CONNECTION_REF = {
    "objectRef": {"apiGroup": API_GROUP, "kind": "ClusterConnection", "name": "prod"}
}


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def crd_namespace(kube: Any) -> Iterator[str]:
    name = _name("crds")
    kube.ensure_namespace(name)
    yield name
    # Daemons in later tests list these kinds cluster-wide.
    delete_twc_objects(kube, name)


@pytest.fixture
def cluster_objects(kube: Any) -> Iterator[list[str]]:
    """Names of ClusterConnections a test created; deleted afterwards."""
    created: list[str] = []
    yield created
    for name in created:
        try:
            kube.custom.delete_cluster_custom_object(
                API_GROUP, CONNECTION_VERSION, "clusterconnections", name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


def _worker(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{WORKER_GROUP}/{CRD_VERSION}",
        "kind": "TemporalWorker",
        "metadata": {"name": name},
        "spec": spec,
    }


def _connection(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{API_GROUP}/{CONNECTION_VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def _create_worker(kube: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return dict(
        kube.custom.create_namespaced_custom_object(
            WORKER_GROUP, CRD_VERSION, namespace, "temporalworkers", body
        )
    )


def _create_connection(kube: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return dict(
        kube.custom.create_namespaced_custom_object(
            API_GROUP, CONNECTION_VERSION, namespace, "connections", body
        )
    )


def _create_cluster_connection(
    kube: Any, created: list[str], body: dict[str, Any]
) -> dict[str, Any]:
    obj = kube.custom.create_cluster_custom_object(
        API_GROUP, CONNECTION_VERSION, "clusterconnections", body
    )
    created.append(body["metadata"]["name"])
    return dict(obj)


def _worker_model(obj: dict[str, Any]) -> TemporalWorker:
    """The admitted object read back as the fleet file's worker model."""
    meta = obj["metadata"]
    return TemporalWorker.model_validate(
        {**obj["spec"], "name": meta["name"], "namespace": meta["namespace"]}
    )


def _rejected(call: Any, message: str) -> None:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    assert message in (info.value.body or ""), info.value.body


def test_the_api_server_serves_every_generated_crd(kube: Any) -> None:
    for crd in all_crds():
        served = kube.ext.read_custom_resource_definition(crd["metadata"]["name"])
        established = {c.type: c.status for c in served.status.conditions or []}
        assert established.get("Established") == "True", crd["metadata"]["name"]
        assert established.get("NonStructuralSchema") in (None, "False")
        assert served.spec.scope == crd["spec"]["scope"]


def test_printer_columns_show_phase_replicas_ready_task_queue_source_versions_age(
    kube: Any,
) -> None:
    served = kube.ext.read_custom_resource_definition("temporalworkers.temporal.kmsvc.io")
    columns = {c.name: c.json_path for c in served.spec.versions[0].additional_printer_columns}
    assert columns == {
        "Phase": ".status.phase",
        "Replicas": ".status.replicas",
        "Ready": ".status.readyReplicas",
        "TaskQueue": ".status.taskQueue",
        "From": ".metadata.labels.twc\\.temporal\\.io/derived-from",
        "Current": ".status.currentVersion.buildID",
        "Target": ".status.targetVersion.buildID",
        "Ramp %": ".status.targetVersion.rampPercentage",
        "Age": ".metadata.creationTimestamp",
    }


def test_valid_worker_and_connections_are_admitted(
    kube: Any, crd_namespace: str, cluster_objects: list[str]
) -> None:
    conn = _create_connection(
        kube,
        crd_namespace,
        _connection(
            "Connection",
            "orders",
            hostPort="10.0.0.5:7233",
            apiKeySecretRef={"name": "temporal-api-key"},
        ),
    )
    assert conn["spec"]["apiKeySecretRef"] == {"name": "temporal-api-key", "key": "api-key"}

    cluster_name = _name("prod")
    cluster = _create_cluster_connection(
        kube,
        cluster_objects,
        _connection(
            "ClusterConnection",
            cluster_name,
            hostPort="temporal-frontend.temporal.svc.cluster.local:7233",
            tls={"serverName": "temporal.example"},
            mutualTLSSecretRef={"name": "temporal-mtls"},
            # Not fields of the official schema (twc reads them from annotations): pruned.
            secretSource={"namespace": "temporal"},
            allowedNamespaces=["temporal"],
        ),
    )
    assert "namespace" not in cluster["metadata"]
    assert cluster["spec"]["mutualTLSSecretRef"] == {"name": "temporal-mtls"}
    assert not {"secretSource", "allowedNamespaces"} & set(cluster["spec"])

    by_name = _create_worker(
        kube,
        crd_namespace,
        _worker(
            "worker-orders",
            queueRef={"name": "orders", "namespace": "sqs"},
            taskQueueName="orders",
            connectionRef={"name": "orders"},
            image="registry.example/worker:1.4.2",
            imagePullPolicy="IfNotPresent",
            replicas=2,
            autoscaling={"maxReplicas": 20, "targetBacklogPerReplica": 5},
            resources={"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": 2}},
            nodeSelector={"pool": "workers"},
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
            tolerations=[{"key": "dedicated", "value": "temporal", "effect": "NoSchedule"}],
            lifecycle={"preStopCommand": ["sleep", "5"]},
            dlq={"enabled": True},
            env={"LOG_LEVEL": "debug"},
        ),
    )
    # Structural schemas prune unknown fields; nothing the fleet file allows is lost.
    assert by_name["spec"]["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {}
    }
    assert by_name["spec"]["resources"]["limits"] == {"cpu": 2}
    assert by_name["spec"]["autoscaling"]["minReplicas"] == 1  # the model's default
    assert _worker_model(by_name).resources is not None

    by_object_ref = _create_worker(
        kube,
        crd_namespace,
        _worker("worker-cluster", taskQueueName="cluster", connectionRef=CLUSTER_CONNECTION_REF),
    )
    assert by_object_ref["spec"]["connectionRef"] == CLUSTER_CONNECTION_REF
    _worker_model(by_object_ref)

    # The status subresource takes the daemon's fields.
    status = {
        "status": {
            "phase": "Ready",
            "replicas": 2,
            "readyReplicas": 2,
            "observedGeneration": 1,
            "observedConnectionRef": {"apiGroup": API_GROUP, "kind": "Connection", "name": "x"},
            "conditions": [
                {
                    "type": "WorkerDeploymentReady",
                    "status": "True",
                    "reason": "MinimumReplicasAvailable",
                    "message": "2/2 ready",
                    "lastTransitionTime": "2024-01-01T00:00:00Z",
                }
            ],
        }
    }
    patched = kube.custom.patch_namespaced_custom_object_status(
        WORKER_GROUP, CRD_VERSION, crd_namespace, "temporalworkers", "worker-orders", status
    )
    assert patched["status"]["phase"] == "Ready"
    assert patched["status"]["conditions"][0]["type"] == "WorkerDeploymentReady"


def test_connection_ref_with_both_name_and_object_ref_is_rejected(
    kube: Any, crd_namespace: str
) -> None:
    body = _worker(
        "worker-both",
        taskQueueName="both",
        connectionRef={"name": "orders", **CLUSTER_CONNECTION_REF},
    )
    _rejected(
        lambda: _create_worker(kube, crd_namespace, body),
        "exactly one of name or objectRef must be set",
    )


def test_connection_ref_with_neither_name_nor_object_ref_is_rejected(
    kube: Any, crd_namespace: str
) -> None:
    body = _worker("worker-neither", taskQueueName="neither", connectionRef={"name": None})
    _rejected(
        lambda: _create_worker(kube, crd_namespace, body),
        "exactly one of name or objectRef must be set",
    )


def test_object_ref_outside_temporal_io_is_rejected(kube: Any, crd_namespace: str) -> None:
    body = _worker(
        "worker-group",
        taskQueueName="group",
        connectionRef={
            "objectRef": {"apiGroup": "example.com", "kind": "ClusterConnection", "name": "x"}
        },
    )
    _rejected(lambda: _create_worker(kube, crd_namespace, body), "apiGroup must be temporal.io")


def test_worker_without_a_task_queue_is_rejected(kube: Any, crd_namespace: str) -> None:
    body = _worker("worker-no-queue", image="registry.example/worker:1")
    _rejected(
        lambda: _create_worker(kube, crd_namespace, body),
        "set queueRef or taskQueueName: the worker needs a task queue",
    )


def test_connection_with_mtls_and_api_key_is_rejected(
    kube: Any, crd_namespace: str, cluster_objects: list[str]
) -> None:
    both = {
        "hostPort": "10.0.0.5:7233",
        "mutualTLSSecretRef": {"name": "temporal-mtls"},
        "apiKeySecretRef": {"name": "temporal-api-key"},
    }
    message = "mutualTLSSecretRef and apiKeySecretRef are mutually exclusive"
    _rejected(
        lambda: _create_connection(kube, crd_namespace, _connection("Connection", "both", **both)),
        message,
    )
    _rejected(
        lambda: _create_cluster_connection(
            kube, cluster_objects, _connection("ClusterConnection", _name("both"), **both)
        ),
        message,
    )


def test_an_explicit_null_counts_as_unset(kube: Any, crd_namespace: str) -> None:
    body = _worker(
        "worker-null-name",
        taskQueueName="null-name",
        connectionRef={"name": None, **CLUSTER_CONNECTION_REF},
    )
    admitted = _create_worker(kube, crd_namespace, body)
    assert admitted["spec"]["connectionRef"]["name"] is None  # nullable: kept, not pruned
    _worker_model(admitted)


def test_worker_name_longer_than_a_dns_label_is_rejected(kube: Any, crd_namespace: str) -> None:
    body = _worker("w" * 64, taskQueueName="long")
    _rejected(
        lambda: _create_worker(kube, crd_namespace, body),
        "metadata.name must be at most 63 characters",
    )


TEMPLATE = {
    "metadata": {"labels": {"team": "payments"}},
    "spec": {
        "containers": [
            {
                "name": "worker",
                "image": "registry.example/worker:1.4.2",
                "command": ["python", "-m", "app"],
                "env": [
                    {"name": "DB", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}}
                ],
                "readinessProbe": {"exec": {"command": ["true"]}},
                "futureField": {"kept": True},
            },
            {"name": "proxy", "image": "envoy"},
        ],
        "initContainers": [{"name": "mesh", "image": "mesh", "restartPolicy": "Always"}],
    },
}
PROGRESSIVE = {
    "strategy": "Progressive",
    "steps": [
        {"rampPercentage": 10, "pauseDuration": "5m"},
        {"rampPercentage": 50, "pauseDuration": "1h"},
    ],
    "gate": {"workflowType": "SmokeTest", "input": {"thresholds": {"errorRate": 0.01}}},
}


def test_template_rollout_and_sunset_are_admitted_and_kept_whole(
    kube: Any, crd_namespace: str
) -> None:
    obj = _create_worker(
        kube,
        crd_namespace,
        _worker(
            "templated",
            taskQueueName="q",
            connectionRef={"name": "orders"},
            template=TEMPLATE,
            rollout=PROGRESSIVE,
            sunset={"scaledownDelay": "30m"},
        ),
    )
    # The pod template is the API server's to validate at the Deployment: kept as written.
    assert obj["spec"]["template"] == TEMPLATE
    assert obj["spec"]["rollout"]["gate"]["input"] == {"thresholds": {"errorRate": 0.01}}
    assert obj["spec"]["sunset"] == {"scaledownDelay": "30m", "deleteDelay": "24h"}
    model = _worker_model(obj)
    assert model.rollout is not None
    assert len(model.rollout.steps) == 2


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        pytest.param(
            {"strategy": "Progressive"}, "steps are required for Progressive rollout", id="no steps"
        ),
        pytest.param(
            {
                "strategy": "Progressive",
                "steps": [
                    {"rampPercentage": 50, "pauseDuration": "1m"},
                    {"rampPercentage": 10, "pauseDuration": "1m"},
                ],
            },
            "rampPercentage must increase between each step",
            id="decreasing",
        ),
        pytest.param(
            {
                "strategy": "Progressive",
                "steps": [
                    {"rampPercentage": 10, "pauseDuration": "1m"},
                    {"rampPercentage": 10, "pauseDuration": "1m"},
                ],
            },
            "rampPercentage must increase between each step",
            id="repeated",
        ),
        pytest.param(
            {"strategy": "Progressive", "steps": [{"rampPercentage": 10, "pauseDuration": "10s"}]},
            "pause duration must be at least 30s",
            id="short pause",
        ),
        pytest.param(
            {"strategy": "Progressive", "steps": [{"rampPercentage": 100, "pauseDuration": "1m"}]},
            "should be less than or equal to 99",
            id="ramp 100",
        ),
        pytest.param({"strategy": "Sometimes"}, "Unsupported value", id="unknown strategy"),
        pytest.param(
            {
                "strategy": "AllAtOnce",
                "gate": {
                    "workflowType": "T",
                    "inputFrom": {
                        "configMapKeyRef": {"name": "g", "key": "k"},
                        "secretKeyRef": {"name": "g", "key": "k"},
                    },
                },
            },
            "exactly one of configMapKeyRef or secretKeyRef must be set",
            id="gate input from two places",
        ),
    ],
)
def test_rollout_rules_are_enforced_by_the_api_server(
    kube: Any, crd_namespace: str, rollout: dict[str, Any], message: str
) -> None:
    body = _worker(_name("r"), taskQueueName="q", connectionRef={"name": "x"}, rollout=rollout)
    _rejected(lambda: _create_worker(kube, crd_namespace, body), message)


def test_a_gate_with_both_inputs_passes_the_crd_but_not_the_model(
    kube: Any, crd_namespace: str
) -> None:
    # Free-form `input` is invisible to CEL (as in the official CRD, whose webhook checks
    # it); the model, which every object goes through, refuses it.
    rollout = {
        "strategy": "AllAtOnce",
        "gate": {
            "workflowType": "T",
            "input": {"a": 1},
            "inputFrom": {"configMapKeyRef": {"name": "g", "key": "k"}},
        },
    }
    obj = _create_worker(
        kube,
        crd_namespace,
        _worker(_name("g"), taskQueueName="q", connectionRef={"name": "x"}, rollout=rollout),
    )
    with pytest.raises(SpecError) as info:
        load_worker_object(obj)
    assert "rollout.gate: only one of input or inputFrom may be set" in str(info.value)
