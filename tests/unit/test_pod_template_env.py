"""The worker pod template and the objects built around it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.fleet_data import valid_fleet
from twc import builders
from twc.connections import (
    CONNECTION_ENV_NAMES,
    CONNECTION_SPEC_HASH_ANNOTATION,
    ConnectionIdentity,
    PodSpecOptions,
    Registry,
    ResolvedConnection,
    SecretKeySelector,
    TLSSettings,
)
from twc.spec import RESERVED_ENV_NAMES, AuthMode, ResolvedWorker, load_fleet

FP = "f" * 64
PLAIN = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "Connection", "orders", "sqs"),
    host_port="10.0.0.5:7233",
    tls=TLSSettings(enabled=False),
)
MTLS = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "ClusterConnection", "prod", None),
    host_port="temporal.example:7233",
    tls=TLSSettings(enabled=True, server_name="temporal.internal"),
    auth_mode=AuthMode.MTLS,
    mtls_secret_name="temporal-mtls",
)
API_KEY = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "ClusterConnection", "cloud", None),
    host_port="ns.acct.tmprl.cloud:7233",
    tls=TLSSettings(enabled=True),
    auth_mode=AuthMode.API_KEY,
    api_key_secret=SecretKeySelector("temporal-api-key", "api-key"),
)


def _workers(**changes: Any) -> dict[str, ResolvedWorker]:
    data = valid_fleet()
    data["workers"][0].update(changes)
    return {w.name: w for w in load_fleet(data, "f.yaml").resolved_workers()}


BILLING = _workers()["billing"]


def _env(template: dict[str, Any], container: int = 0) -> dict[str, Any]:
    items = template["spec"]["containers"][container]["env"]
    names = [e["name"] for e in items]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in items}


def test_the_worker_container_gets_address_namespace_task_queue_and_downward_api() -> None:
    env = _env(builders.worker_pod_template(BILLING, PLAIN, FP))

    assert env == {
        "TEMPORAL_ADDRESS": "10.0.0.5:7233",
        "TEMPORAL_FRONTEND_ADDRESS": "10.0.0.5:7233",
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TASK_QUEUE": "billing",
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
    }


def test_mtls_mounts_the_secret_and_points_the_env_at_it() -> None:
    options = PodSpecOptions(secret_keys=frozenset({"tls.crt", "tls.key", "ca.crt"}))
    template = builders.worker_pod_template(BILLING, MTLS, FP, options)
    env = _env(template)
    container = template["spec"]["containers"][0]

    assert env["TEMPORAL_TLS"] == "true"
    assert env["TEMPORAL_TLS_CLIENT_CERT_PATH"] == "/etc/temporal/tls/tls.crt"
    assert env["TEMPORAL_TLS_CLIENT_KEY_PATH"] == "/etc/temporal/tls/tls.key"
    assert env["TEMPORAL_TLS_SERVER_CA_CERT_PATH"] == "/etc/temporal/tls/ca.crt"
    assert env["TEMPORAL_TLS_SERVER_NAME"] == "temporal.internal"
    assert container["volumeMounts"] == [
        {"name": "temporal-tls", "mountPath": "/etc/temporal/tls", "readOnly": True}
    ]
    assert template["spec"]["volumes"] == [
        {"name": "temporal-tls", "secret": {"secretName": "temporal-mtls"}}
    ]


def test_the_ca_path_is_set_only_when_the_secret_has_a_ca() -> None:
    without = PodSpecOptions(secret_keys=frozenset({"tls.crt", "tls.key"}))

    assert "TEMPORAL_TLS_SERVER_CA_CERT_PATH" not in _env(
        builders.worker_pod_template(BILLING, MTLS, FP, without)
    )
    assert "TEMPORAL_TLS_SERVER_CA_CERT_PATH" not in _env(
        builders.worker_pod_template(BILLING, MTLS, FP)
    )


def test_an_api_key_comes_from_a_secret_key_ref_over_tls() -> None:
    template = builders.worker_pod_template(BILLING, API_KEY, FP)
    env = _env(template)

    assert env["TEMPORAL_API_KEY"] == {
        "secretKeyRef": {"name": "temporal-api-key", "key": "api-key"}
    }
    assert env["TEMPORAL_TLS"] == "true"
    assert "TEMPORAL_TLS_CLIENT_CERT_PATH" not in env
    assert "volumes" not in template["spec"]


def test_plain_connections_set_no_tls_env() -> None:
    env = _env(builders.worker_pod_template(BILLING, PLAIN, FP))

    assert not any(name.startswith("TEMPORAL_TLS") for name in env)
    assert "TEMPORAL_API_KEY" not in env


def test_user_env_follows_twc_env() -> None:
    worker = _workers(env={"LOG_LEVEL": "debug", "A_FIRST": "1"})["billing"]

    names = [
        e["name"]
        for e in builders.worker_pod_template(worker, PLAIN, FP)["spec"]["containers"][0]["env"]
    ]

    assert names[-2:] == ["A_FIRST", "LOG_LEVEL"]


def test_every_env_name_twc_writes_is_reserved_in_the_spec() -> None:
    written = set(CONNECTION_ENV_NAMES) | set(builders.WORKER_ENV_NAMES)

    assert written == set(RESERVED_ENV_NAMES)


def test_the_fingerprint_annotation_and_labels_are_set() -> None:
    template = builders.worker_pod_template(BILLING, MTLS, FP)

    assert template["metadata"]["annotations"] == {CONNECTION_SPEC_HASH_ANNOTATION: FP}
    assert template["metadata"]["labels"] == {
        "app.kubernetes.io/name": "billing",
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/managed-by": "twc",
        "temporal.io/task-queue": "billing",
        "twc.temporal.io/worker": "billing",
    }


def _with(worker: ResolvedWorker, **changes: Any) -> ResolvedWorker:
    return worker.model_copy(update=changes)


def test_task_queue_labels_are_valid_label_values() -> None:
    worker = _with(BILLING, task_queue_name="orders/priority high" + "x" * 80)

    label = builders.worker_labels(worker)["temporal.io/task-queue"]

    assert len(label) <= 63
    assert label.startswith("orders-priority-high")
    assert (
        label
        != builders.worker_labels(
            _with(BILLING, task_queue_name="orders/priority high" + "y" * 80)
        )["temporal.io/task-queue"]
    )


def test_the_init_container_waits_for_the_frontend() -> None:
    template = builders.worker_pod_template(BILLING, MTLS, FP)
    (init,) = template["spec"]["initContainers"]

    assert init["name"] == "wait-for-temporal"
    assert init["image"] == builders.DEFAULT_WAIT_IMAGE
    assert init["command"] == ["sh", "-c", builders.WAIT_SCRIPT]
    assert {e["name"]: e["value"] for e in init["env"]} == {
        "TEMPORAL_ADDRESS": "temporal.example:7233",
        "TEMPORAL_FRONTEND_ADDRESS": "temporal.example:7233",
    }
    assert "volumeMounts" not in init


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("temporal.example:7233", "temporal.example 7233"),
        ("10.0.0.5:7233", "10.0.0.5 7233"),
        ("[fd00::1]:7233", "fd00::1 7233"),
    ],
)
def test_the_wait_script_splits_host_and_port(tmp_path: Path, address: str, expected: str) -> None:
    # A stand-in `nc` records its arguments and refuses once, then accepts.
    calls = tmp_path / "calls"
    nc = tmp_path / "nc"
    nc.write_text(f'#!/bin/sh\necho "$4 $5" >> {calls}\n[ "$(wc -l < {calls})" -ge 2 ]\n')
    nc.chmod(0o755)
    sleep = tmp_path / "sleep"
    sleep.write_text("#!/bin/sh\nexit 0\n")
    sleep.chmod(0o755)

    result = subprocess.run(
        ["sh", "-c", builders.WAIT_SCRIPT],
        env={"PATH": f"{tmp_path}:{os.environ['PATH']}", "TEMPORAL_FRONTEND_ADDRESS": address},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == [expected, expected]
    assert "accepts connections" in result.stdout


def test_the_wait_script_fails_without_an_address() -> None:
    result = subprocess.run(
        ["sh", "-c", builders.WAIT_SCRIPT],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode != 0
    assert "TEMPORAL_FRONTEND_ADDRESS is not set" in result.stderr


def test_resources_lifecycle_and_placement_are_rendered() -> None:
    spec = builders.worker_pod_template(BILLING, PLAIN, FP)["spec"]
    container = spec["containers"][0]

    assert container["resources"] == {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }
    assert container["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "5"]}}}
    assert container["image"] == "registry.example/billing:2.0.0"
    assert container["imagePullPolicy"] == "Always"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "temporal", "effect": "NoSchedule"}
    ]
    assert "affinity" not in spec


def test_affinity_is_passed_through() -> None:
    affinity = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
            ]
        }
    }
    worker = _workers(affinity=affinity)["billing"]

    assert builders.worker_pod_template(worker, PLAIN, FP)["spec"]["affinity"] == affinity


def test_the_service_account_token_is_not_mounted_unless_asked() -> None:
    spec = builders.worker_pod_template(BILLING, PLAIN, FP)["spec"]
    asked = _workers(serviceAccount={"automountToken": True})["billing"]

    assert spec["serviceAccountName"] == "billing"
    assert spec["automountServiceAccountToken"] is False
    assert builders.worker_pod_template(asked, PLAIN, FP)["spec"]["automountServiceAccountToken"]


def test_the_worker_container_comes_first_and_is_hardened() -> None:
    spec = builders.worker_pod_template(BILLING, PLAIN, FP)["spec"]

    assert spec["containers"][0]["name"] == "worker"
    assert spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["terminationGracePeriodSeconds"] == 60


def test_apply_pod_spec_is_idempotent_and_can_switch_connections() -> None:
    base = builders.worker_pod_template(BILLING, MTLS, FP)
    options = PodSpecOptions(fingerprint="0" * 64)

    again = MTLS.apply_pod_spec(base, PodSpecOptions(fingerprint=FP))
    switched = PLAIN.apply_pod_spec(base, options)

    assert again == base
    assert "volumes" not in switched["spec"]
    assert "volumeMounts" not in switched["spec"]["containers"][0]
    assert not any(n.startswith("TEMPORAL_TLS") for n in _env(switched))
    assert _env(switched)["TEMPORAL_ADDRESS"] == "10.0.0.5:7233"
    assert switched["metadata"]["annotations"][CONNECTION_SPEC_HASH_ANNOTATION] == "0" * 64
    assert _env(base)["TEMPORAL_TLS"] == "true"  # the input was not modified


def test_apply_pod_spec_computes_the_fingerprint_from_the_secret_digest() -> None:
    template = MTLS.apply_pod_spec(
        {"spec": {"containers": [{"name": "w"}]}}, PodSpecOptions(secret_digest="abc")
    )

    assert template["metadata"]["annotations"][CONNECTION_SPEC_HASH_ANNOTATION] == MTLS.fingerprint(
        "abc"
    )


def test_the_deployment_selects_its_pods_and_surges_first() -> None:
    spec = builders.deployment_spec(BILLING, PLAIN, FP)

    assert spec["selector"] == {
        "matchLabels": {
            "twc.temporal.io/worker": "billing",
            "app.kubernetes.io/component": "worker",
        }
    }
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": 0}
    # BILLING autoscales: its replicas are the daemon's (scale subresource), never the
    # program's, so the spec leaves the field out.
    assert "replicas" not in spec


def test_deployment_replicas_given_for_an_autoscaled_worker_stay_within_bounds() -> None:
    assert builders.deployment_spec(BILLING, PLAIN, FP, replicas=50)["replicas"] == 20
    assert builders.deployment_spec(BILLING, PLAIN, FP, replicas=0)["replicas"] == 1
    assert builders.deployment_spec(BILLING, PLAIN, FP, replicas=7)["replicas"] == 7


def test_the_dlq_statefulset_polls_the_dlq_task_queue() -> None:
    spec = builders.dlq_statefulset_spec(BILLING, MTLS, FP)

    assert spec is not None
    assert spec["serviceName"] == "billing-dlq" == builders.dlq_statefulset_name(BILLING)
    assert spec["selector"] == {
        "matchLabels": {
            "twc.temporal.io/worker": "billing",
            "app.kubernetes.io/component": "dlq-processor",
        }
    }
    env = _env(spec["template"])
    assert env["TEMPORAL_TASK_QUEUE"] == "billing-dlq"
    assert env["TEMPORAL_TLS_CLIENT_CERT_PATH"] == "/etc/temporal/tls/tls.crt"
    assert spec["template"]["metadata"]["labels"]["temporal.io/task-queue"] == "billing-dlq"
    assert spec["template"]["metadata"]["annotations"] == {CONNECTION_SPEC_HASH_ANNOTATION: FP}


def test_no_dlq_statefulset_without_dlq() -> None:
    reports = _workers()["reports"]

    assert builders.dlq_statefulset_spec(reports, PLAIN, FP) is None
    with pytest.raises(ValueError, match="has no DLQ enabled"):
        builders.worker_pod_template(reports, PLAIN, FP, component=builders.COMPONENT_DLQ)


def test_a_disruption_budget_only_for_more_than_one_replica() -> None:
    workers = _workers()

    assert builders.pod_disruption_budget_spec(workers["reports"]) is None
    assert builders.pod_disruption_budget_spec(workers["billing"]) == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": builders.selector_labels(workers["billing"])},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


def test_service_account_metadata_carries_annotations() -> None:
    annotated = _workers(serviceAccount={"annotations": {"eks.amazonaws.com/role-arn": "arn:x"}})

    metadata = builders.worker_service_account(annotated["billing"])["metadata"]

    assert metadata["name"] == "billing"
    assert metadata["namespace"] == "sqs"
    assert metadata["annotations"] == {"eks.amazonaws.com/role-arn": "arn:x"}


def test_a_resolved_fleet_renders_end_to_end() -> None:
    fleet = load_fleet(valid_fleet(), "f.yaml")
    registry = Registry.with_builtins()

    for worker in fleet.resolved_workers():
        connection = registry.resolve_worker(worker, fleet)
        spec = builders.deployment_spec(worker, connection, connection.fingerprint(None))
        env = _env(spec["template"])
        assert env["TEMPORAL_ADDRESS"] == connection.host_port
        assert env["TEMPORAL_TASK_QUEUE"] == worker.task_queue_name
