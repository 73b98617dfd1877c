"""The Pulumi program's resource graph under mocks (real dynamic providers run inside)."""

from __future__ import annotations

import base64
from typing import Any

import pulumi
import pytest

from tests.unit.pulumi_mocks import SECRET_SIG, RecordingMocks, pulumi_test
from twc.connections import CONNECTION_SPEC_HASH_ANNOTATION, default_registry
from twc.desired import DesiredFleet, DesiredInputs, desired_fleet
from twc.spec import load_fleet

SECRET_VALUE_SIG = "1b47061264138c4ac30d75fd1eb44270"

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"

FLEET: dict[str, Any] = {
    "apiVersion": "twc.temporal.io/v1",
    "kind": "Fleet",
    "defaults": {
        "image": "registry.example/worker:1.4.2",
        "connectionRef": {
            "objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": "prod"}
        },
    },
    "clusterConnections": [
        {
            "name": "prod",
            "hostPort": "temporal-frontend.temporal.svc:7233",
            "tls": {"serverName": "temporal.example"},
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": "temporal"},
            "allowedNamespaces": ["sqs", "billing"],
        }
    ],
    "connections": [{"name": "orders", "namespace": "sqs", "hostPort": "10.0.0.5:7233"}],
    "queues": [
        {
            "name": "orders-fifo",
            "namespace": "sqs",
            "fifo": True,
            "partitions": 3,
            "workerEnabled": True,
        },
        {"name": "billing", "namespace": "billing", "partitions": 2, "createObject": True},
    ],
    "workers": [
        {
            "name": "worker-billing",
            "namespace": "billing",
            "queueRef": {"name": "billing"},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 20, "targetBacklogPerReplica": 5},
            "dlq": {"enabled": True},
        },
        {
            "name": "worker-orders-direct",
            "namespace": "sqs",
            "taskQueueName": "orders-direct",
            "connectionRef": {"name": "orders"},
            "image": "registry.example/orders:2.0.0",
            "replicas": 2,
        },
    ],
}

SECRETS = {("temporal", "temporal-mtls"): {"tls.crt": CA, "tls.key": KEY, "ca.crt": CA}}


def _build(
    mocks: RecordingMocks, fleet: dict[str, Any] = FLEET, replicas: dict[str, int] | None = None
) -> dict[str, pulumi.Output[Any]]:
    from twc.program import ProgramOptions, build

    pulumi.runtime.set_mocks(mocks, preview=False)
    return build(
        _desired(fleet, replicas),
        file="stacks/test.yaml",
        options=ProgramOptions(),
        read_secret=lambda ns, name: SECRETS.get((ns, name)),
    )


def _desired(fleet: dict[str, Any], replicas: dict[str, int] | None = None) -> DesiredFleet:
    """The desired state the program builds from (the fleet file alone, no cluster)."""
    return desired_fleet(
        load_fleet(fleet, "stacks/test.yaml"),
        DesiredInputs(replicas=replicas or {}),
        registry=default_registry(),
        file="stacks/test.yaml",
    )


def _env(deployment_inputs: dict[str, Any]) -> dict[str, Any]:
    container = deployment_inputs["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pulumi_test
def test_every_worker_gets_sa_deployment_and_task_queue_check() -> Any:
    mocks = RecordingMocks(
        fake_dynamic={
            "TaskQueueCheck": {
                "pollers": 0,
                "approximateBacklog": 0,
                "condition": {
                    "type": "TemporalTaskQueueRegistered",
                    "status": "False",
                    "reason": "WaitingForPollers",
                },
            }
        }
    )
    statuses = _build(mocks)

    def check(_: Any) -> None:
        names = {r.name for r in mocks.resources}
        for worker in (
            "sqs/worker-orders-fifo",
            "billing/worker-billing",
            "sqs/worker-orders-direct",
        ):
            for suffix in ("-sa", "-deployment", "-check"):
                assert worker + suffix in names
        # Only the worker that can have more than one replica gets a PDB; the DLQ too.
        assert "billing/worker-billing-pdb" in names
        assert "billing/worker-billing-dlq" in names
        assert "sqs/worker-orders-direct-dlq" not in names
        # Only the queue that asks for it gets a kmsvc Queue object owned by twc.
        queue_objects = mocks.of_type("kubernetes:kmsvc.io/v1:Queue")
        assert [q.name for q in queue_objects] == ["billing/billing-queue"]
        assert queue_objects[0].inputs["spec"] == {"fifo": False, "partitions": 2}
        types = {r.type for r in mocks.resources}
        assert {
            "twc:temporal:TemporalWorker",
            "twc:temporal:ClusterConnection",
            "twc:temporal:Connection",
            "twc:kmsvc:Queue",
        } <= types

    return pulumi.Output.all(*statuses.values()).apply(check)


@pulumi_test
def test_deployment_env_labels_and_fingerprint_annotation() -> Any:
    mocks = RecordingMocks(
        fake_dynamic={
            "TaskQueueCheck": {
                "pollers": 1,
                "approximateBacklog": 0,
                "condition": {
                    "type": "TemporalTaskQueueRegistered",
                    "status": "True",
                    "reason": "PollersRegistered",
                },
            }
        }
    )
    statuses = _build(mocks)

    def check(_: Any) -> None:
        dep = mocks.named("sqs/worker-orders-fifo-deployment").inputs
        env = _env(dep)
        assert env["TEMPORAL_ADDRESS"] == "temporal-frontend.temporal.svc:7233"
        assert env["TEMPORAL_TASK_QUEUE"] == "orders-fifo"
        assert env["TEMPORAL_TLS"] == "true"
        assert env["TEMPORAL_TLS_SERVER_NAME"] == "temporal.example"
        assert "TEMPORAL_TLS_SERVER_CA_CERT_PATH" in env  # the secret has ca.crt
        assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "twc"
        assert labels["temporal.io/task-queue"] == "orders-fifo"
        assert labels["twc.temporal.io/worker"] == "worker-orders-fifo"
        # Derived from a 3-partition queue: one replica per partition.
        assert dep["spec"]["replicas"] == 3
        # The annotation equals what the ConnectionFingerprint resource computed.
        fp = mocks.named("prod-fingerprint").outputs["fingerprint"]
        assert (
            dep["spec"]["template"]["metadata"]["annotations"][CONNECTION_SPEC_HASH_ANNOTATION]
            == fp
        )
        # The credential secret is copied into each namespace that uses it, as data.
        copy = mocks.named("prod-secret-sqs").inputs
        assert copy["metadata"]["namespace"] == "sqs"
        # ...and the data stays a Pulumi secret (it arrives in its secret envelope).
        assert copy["data"][SECRET_SIG] == SECRET_VALUE_SIG
        assert base64.b64decode(copy["data"]["value"]["tls.key"]) == KEY
        # The direct worker uses the namespaced Connection, without TLS.
        direct = _env(mocks.named("sqs/worker-orders-direct-deployment").inputs)
        assert direct["TEMPORAL_ADDRESS"] == "10.0.0.5:7233"
        assert "TEMPORAL_TLS" not in direct

    return pulumi.Output.all(*statuses.values()).apply(check)


@pulumi_test
def test_status_is_ready_when_replicas_ready_and_pollers_present() -> Any:
    mocks = RecordingMocks(
        fake_dynamic={
            "TaskQueueCheck": {
                "pollers": 2,
                "approximateBacklog": 7,
                "condition": {
                    "type": "TemporalTaskQueueRegistered",
                    "status": "True",
                    "reason": "PollersRegistered",
                },
            }
        }
    )
    statuses = _build(mocks)

    def check(values: list[dict[str, Any]]) -> None:
        by_phase = {v["phase"] for v in values}
        assert by_phase == {"Ready"}
        first = values[0]
        assert [c["type"] for c in first["conditions"]] == [
            "WorkerDeploymentReady",
            "TemporalTaskQueueRegistered",
        ]

    return pulumi.Output.all(*statuses.values()).apply(check)


@pulumi_test
def test_the_program_never_sets_an_autoscaled_workers_replicas() -> Any:
    mocks = RecordingMocks(
        fake_dynamic={"TaskQueueCheck": {"pollers": 0, "approximateBacklog": 0, "condition": {}}}
    )
    # Even when the inputs carry the autoscaler's counts, the program leaves them to the
    # daemon (the Deployment's scale subresource).
    statuses = _build(mocks, replicas={"billing/worker-billing": 7, "sqs/worker-orders-direct": 9})

    def check(_: Any) -> None:
        assert "replicas" not in mocks.named("billing/worker-billing-deployment").inputs["spec"]
        assert mocks.named("sqs/worker-orders-direct-deployment").inputs["spec"]["replicas"] == 2
        dep = mocks.named("billing/worker-billing-deployment").inputs
        assert dep["metadata"]["annotations"]["twc.temporal.io/replicas-source"] == "autoscaling"

    return pulumi.Output.all(*statuses.values()).apply(check)


def test_missing_credential_secret_is_a_clear_error_naming_the_source() -> None:
    from twc.errors import TwcConnectionError
    from twc.program import ProgramOptions, build

    pulumi.runtime.set_mocks(RecordingMocks(), preview=True)
    with pytest.raises(TwcConnectionError) as err:
        build(
            _desired(FLEET),
            file="stacks/test.yaml",
            options=ProgramOptions(),
            read_secret=lambda ns, name: None,
        )
    assert err.value.reason == "AuthSecretInvalid"
    assert "temporal/temporal-mtls not found" in str(err.value)
    assert "stacks/test.yaml" in str(err.value)


OWNED_TYPES = (
    "kubernetes:apps/v1:Deployment",
    "kubernetes:apps/v1:StatefulSet",
    "kubernetes:core/v1:ServiceAccount",
    "kubernetes:core/v1:Service",
    "kubernetes:core/v1:Secret",
    "kubernetes:policy/v1:PodDisruptionBudget",
    "kubernetes:kmsvc.io/v1:Queue",
)


@pulumi_test
def test_the_ownership_check_names_every_object_the_program_creates() -> Any:
    mocks = RecordingMocks(fake_dynamic={"TaskQueueCheck": {"pollers": 1}})
    fleet = {
        **FLEET,
        "workers": [
            *FLEET["workers"],
            {
                "name": "worker-versioned",
                "namespace": "billing",
                "taskQueueName": "versioned",
                "rollout": {"strategy": "AllAtOnce"},
            },
        ],
    }
    statuses = _build(mocks, fleet)

    def check(_: Any) -> None:
        [ownership] = [r for r in mocks.resources if r.type.endswith(":ObjectOwnership")]
        created = {
            f"{r.type.rsplit(':', 1)[1]} {r.inputs['metadata']['namespace']}/"
            f"{r.inputs['metadata']['name']}"
            for r in mocks.resources
            if r.type in OWNED_TYPES
        }
        # Every kind twc creates, the copied credential and the Queue object among them.
        assert {k.split(" ")[0] for k in created} == {t.rsplit(":", 1)[1] for t in OWNED_TYPES}
        by_worker = ownership.inputs["objects"]
        assert sorted(created) == sorted(o for group in by_worker.values() for o in group)
        # Grouped by owner: the Queue under "", the credential copy under its users in
        # its namespace ("<connection> <namespace>"), each worker's objects under it.
        assert {o.split(" ")[0] for o in by_worker[""]} == {"Queue"}
        copies = [o for owner, group in by_worker.items() if " " in owner for o in group]
        assert copies
        assert all(o.startswith("Secret ") for o in copies)
        assert by_worker["billing/worker-versioned"]

    return pulumi.Output.all(*statuses.values()).apply(check)
