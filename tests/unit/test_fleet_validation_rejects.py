"""A malformed fleet is rejected whole, naming the file, the field path and the reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.fleet_data import CLUSTER_REF, valid_fleet
from twc.errors import Reason, SpecError
from twc.spec import load_fleet

FILE = "stacks/test.yaml"
Mutation = Callable[[dict[str, Any]], object]


def _worker(i: int, **fields: Any) -> Mutation:
    return lambda f: f["workers"][i].update(fields)


def _drop(section: str, i: int, key: str) -> Mutation:
    return lambda f: f[section][i].pop(key)


def _cc(**fields: Any) -> Mutation:
    return lambda f: f["clusterConnections"][0].update(fields)


def _append(section: str, item: dict[str, Any]) -> Mutation:
    return lambda f: f.setdefault(section, []).append(item)


def _both(*mutations: Mutation) -> Mutation:
    def apply(f: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(f)

    return apply


def _no_default(key: str) -> Mutation:
    return lambda f: f["defaults"].pop(key)


def _bad_group(f: dict[str, Any]) -> None:
    f["workers"][1]["connectionRef"] = {
        "objectRef": {"apiGroup": "example.com", "kind": "ClusterConnection", "name": "prod"}
    }


def _group_in_defaults(f: dict[str, Any]) -> None:
    f["defaults"]["connectionRef"]["objectRef"]["apiGroup"] = "temporal.io.evil"


# (id, mutation of a valid fleet, expected field path, expected text in the reason)
CASES: list[tuple[str, Mutation, str, str]] = [
    ("api-version", lambda f: f.update(apiVersion="v2"), "apiVersion", "twc.temporal.io/v1"),
    ("kind", lambda f: f.update(kind="Fleets"), "kind", "'Fleet'"),
    (
        "unknown-top-level",
        lambda f: f.update(workerz=[]),
        "workerz",
        "unknown field (did you mean 'workers'?)",
    ),
    (
        "unknown-nested",
        _cc(hostport="x:1"),
        "clusterConnections[0].hostport",
        "unknown field (did you mean 'hostPort'?)",
    ),
    (
        "unknown-far-off",
        _worker(0, zzz=1),
        "workers[0].zzz",
        "unknown field (expected one of: affinity, autoscaling, connectionRef,",
    ),
    (
        "missing-hostport",
        _drop("connections", 0, "hostPort"),
        "connections[0].hostPort",
        "required field is missing",
    ),
    (
        "hostport-no-port",
        _cc(hostPort="temporal"),
        "clusterConnections[0].hostPort",
        "must be host:port",
    ),
    (
        "hostport-port-range",
        _cc(hostPort="temporal:70000"),
        "clusterConnections[0].hostPort",
        "port must be a number in 1-65535",
    ),
    (
        "hostport-bad-host",
        _cc(hostPort="bad_host:7233"),
        "clusterConnections[0].hostPort",
        "not a valid host name or IP address",
    ),
    (
        "hostport-bare-ipv6",
        _cc(hostPort="::1:7233"),
        "clusterConnections[0].hostPort",
        "write IPv6 addresses as [address]:port",
    ),
    (
        "mtls-and-api-key",
        _cc(apiKeySecretRef={"name": "k"}),
        "clusterConnections[0]",
        "mutualTLSSecretRef and apiKeySecretRef are mutually exclusive",
    ),
    (
        "secret-source-without-secret",
        lambda f: f["clusterConnections"][0].pop("mutualTLSSecretRef"),
        "clusterConnections[0]",
        "secretSource needs a secret",
    ),
    (
        "object-ref-api-group",
        _bad_group,
        "workers[1].connectionRef.objectRef",
        "apiGroup must be temporal.io",
    ),
    (
        "object-ref-api-group-defaults",
        _group_in_defaults,
        "defaults.connectionRef.objectRef",
        "apiGroup must be temporal.io",
    ),
    (
        "object-ref-kind-pattern",
        _worker(
            1,
            connectionRef={
                "objectRef": {"apiGroup": "temporal.io", "kind": "cluster", "name": "prod"}
            },
        ),
        "workers[1].connectionRef.objectRef.kind",
        "should match pattern",
    ),
    (
        "connection-ref-both",
        _worker(0, connectionRef={"name": "orders", **CLUSTER_REF}),
        "workers[0].connectionRef",
        "exactly one of name or objectRef",
    ),
    (
        "connection-ref-neither",
        _worker(0, connectionRef={}),
        "workers[0].connectionRef",
        "exactly one of name or objectRef",
    ),
    (
        "connection-missing",
        _worker(0, connectionRef={"name": "nope"}),
        "workers[0].connectionRef.name",
        "no Connection 'nope' in namespace 'sqs'",
    ),
    (
        "connection-other-namespace",
        _worker(1, connectionRef={"name": "orders"}),
        "workers[1].connectionRef.name",
        "a namespaced Connection can only be used by workers in its own namespace",
    ),
    (
        "cluster-connection-missing",
        _worker(
            1,
            connectionRef={
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": "staging",
                }
            },
        ),
        "workers[1].connectionRef.objectRef",
        "no ClusterConnection 'staging'",
    ),
    (
        "inherited-connection-missing",
        lambda f: f["defaults"]["connectionRef"]["objectRef"].update(name="gone"),
        "workers[1]",
        "connectionRef (from defaults.connectionRef.objectRef): no ClusterConnection 'gone'",
    ),
    (
        "derived-connection-missing",
        lambda f: f["defaults"]["connectionRef"]["objectRef"].update(name="gone"),
        "queues[0]",
        "derived worker 'worker-orders-fifo': connectionRef (from defaults.connectionRef.",
    ),
    (
        "queue-ref-missing",
        _worker(0, queueRef={"name": "nope"}),
        "workers[0].queueRef",
        "no queue 'nope' in namespace 'sqs'",
    ),
    (
        "queue-ref-namespace-hint",
        _worker(1, queueRef={"name": "billing"}),
        "workers[1].queueRef",
        "exists in namespace 'sqs': set queueRef.namespace",
    ),
    (
        "duplicate-cluster-connection",
        _append("clusterConnections", {"name": "prod", "hostPort": "other:7233"}),
        "clusterConnections[1].name",
        "duplicate ClusterConnection prod (first defined at clusterConnections[0])",
    ),
    (
        "duplicate-connection",
        _append("connections", {"name": "orders", "namespace": "sqs", "hostPort": "x:1"}),
        "connections[1].name",
        "duplicate Connection sqs/orders",
    ),
    (
        "duplicate-queue",
        _append("queues", {"name": "billing", "namespace": "sqs"}),
        "queues[2].name",
        "duplicate queue sqs/billing",
    ),
    (
        "duplicate-worker",
        _append("workers", {"name": "reports", "namespace": "temporal", "taskQueueName": "r"}),
        "workers[2].name",
        "duplicate worker temporal/reports",
    ),
    (
        "derived-name-clash",
        _append(
            "workers",
            {"name": "worker-orders-fifo", "namespace": "sqs", "queueRef": {"name": "billing"}},
        ),
        "queues[0].workerEnabled",
        "clashes with workers[2]",
    ),
    (
        "min-above-max",
        _worker(0, autoscaling={"minReplicas": 5, "maxReplicas": 2, "targetBacklogPerReplica": 1}),
        "workers[0].autoscaling",
        "minReplicas (5) must not exceed maxReplicas (2)",
    ),
    (
        "status-min-above-max",
        _worker(
            0,
            autoscaling={
                "maxReplicas": 2,
                "targetBacklogPerReplica": 1,
                "byStatus": {"draining": {"minReplicas": 3}},
            },
        ),
        "workers[0].autoscaling",
        "byStatus.draining: minReplicas (3) must not exceed maxReplicas (2)",
    ),
    (
        "unknown-status",
        _worker(
            0,
            autoscaling={
                "maxReplicas": 2,
                "targetBacklogPerReplica": 1,
                "byStatus": {"drained": {"minReplicas": 1}},
            },
        ),
        "workers[0].autoscaling.byStatus.drained",
        "unknown field (did you mean 'draining'?)",
    ),
    (
        "max-replicas-zero",
        _worker(0, autoscaling={"maxReplicas": 0, "targetBacklogPerReplica": 1}),
        "workers[0].autoscaling.maxReplicas",
        "greater than or equal to 1",
    ),
    (
        "target-backlog-missing",
        _worker(0, autoscaling={"maxReplicas": 3}),
        "workers[0].autoscaling.targetBacklogPerReplica",
        "required field is missing",
    ),
    ("worker-name-case", _worker(0, name="Billing"), "workers[0].name", "DNS-1123 label"),
    ("worker-name-length", _worker(1, name="w" * 64), "workers[1].name", "at most 63"),
    (
        "namespace-invalid",
        _worker(1, namespace="temporal_ns"),
        "workers[1].namespace",
        "DNS-1123 label",
    ),
    (
        "connection-name-invalid",
        lambda f: f["connections"][0].update(name="Orders!"),
        "connections[0].name",
        "DNS-1123 subdomain",
    ),
    (
        "secret-name-invalid",
        _cc(mutualTLSSecretRef={"name": "mtls_secret"}),
        "clusterConnections[0].mutualTLSSecretRef.name",
        "DNS-1123 subdomain",
    ),
    (
        "partitions-zero",
        lambda f: f["queues"][0].update(partitions=0),
        "queues[0].partitions",
        "greater than or equal to 1",
    ),
    (
        "replicas-negative",
        _worker(1, replicas=-1),
        "workers[1].replicas",
        "greater than or equal to 0",
    ),
    (
        "requests-above-limits",
        _worker(0, resources={"requests": {"cpu": 3}, "limits": {"cpu": "2"}}),
        "workers[0].resources",
        "requests.cpu (3) must not exceed limits.cpu (2)",
    ),
    (
        "bad-quantity",
        _worker(0, resources={"requests": {"cpu": "lots"}}),
        "workers[0].resources.requests.cpu",
        "not a Kubernetes quantity",
    ),
    (
        "pull-policy",
        _worker(0, imagePullPolicy="Sometimes"),
        "workers[0].imagePullPolicy",
        "'Always', 'IfNotPresent' or 'Never'",
    ),
    (
        "image-invalid",
        _worker(0, image="Bad Image"),
        "workers[0].image",
        "not a valid image reference",
    ),
    (
        "image-missing",
        _no_default("image"),
        "workers[1].image",
        "no image: set it here or in defaults.image",
    ),
    (
        "derived-image-missing",
        _no_default("image"),
        "queues[0]",
        "derived worker 'worker-orders-fifo': no image: set it in defaults.image",
    ),
    (
        "connection-ref-missing",
        _no_default("connectionRef"),
        "workers[1].connectionRef",
        "no connectionRef: set it here or in defaults.connectionRef",
    ),
    (
        "no-task-queue",
        lambda f: f["workers"][1].pop("taskQueueName"),
        "workers[1]",
        "set queueRef or taskQueueName",
    ),
    (
        "task-queue-reserved",
        _worker(1, taskQueueName="/_sys/reports"),
        "workers[1].taskQueueName",
        "reserved '/_sys/' prefix",
    ),
    (
        "task-queue-whitespace",
        _worker(1, taskQueueName="reports "),
        "workers[1].taskQueueName",
        "without surrounding whitespace",
    ),
    (
        "temporal-namespace",
        lambda f: f["defaults"].update(temporalNamespace="-bad"),
        "defaults.temporalNamespace",
        "not a valid Temporal namespace",
    ),
    (
        "env-reserved",
        _worker(0, env={"TEMPORAL_ADDRESS": "x:1"}),
        "workers[0]",
        "env may not set TEMPORAL_ADDRESS",
    ),
    (
        "env-name",
        _worker(0, env={"1BAD": "x"}),
        'workers[0].env["1BAD"]',
        "invalid key: '1BAD' is not a valid environment variable name",
    ),
    (
        "node-selector-value",
        _worker(0, nodeSelector={"kubernetes.io/os": "linux!"}),
        'workers[0].nodeSelector["kubernetes.io/os"]',
        "not a valid label value",
    ),
    (
        "node-selector-key",
        _worker(0, nodeSelector={"-bad": "x"}),
        'workers[0].nodeSelector["-bad"]',
        "invalid key",
    ),
    (
        "toleration-exists-value",
        _worker(0, tolerations=[{"key": "k", "operator": "Exists", "value": "v"}]),
        "workers[0].tolerations[0]",
        "value must be empty when operator is Exists",
    ),
    (
        "toleration-seconds",
        _worker(0, tolerations=[{"key": "k", "value": "v", "tolerationSeconds": 5}]),
        "workers[0].tolerations[0]",
        "tolerationSeconds only applies to effect NoExecute",
    ),
    (
        "dlq-name-length",
        _worker(0, name="b" * 49),
        "workers[0].name",
        "with dlq enabled the worker name must be at most 48 characters",
    ),
    (
        "derived-name-length",
        _append("queues", {"name": "q" * 57, "namespace": "sqs", "workerEnabled": True}),
        "queues[2].name",
        "exceeds 63 characters",
    ),
    (
        "affinity-unknown",
        _worker(0, affinity={"nodeAfinity": {}}),
        "workers[0].affinity.nodeAfinity",
        "unknown field",
    ),
    (
        "custom-builtin-kind",
        _append("customConnections", {"kind": "Connection", "name": "x", "namespace": "sqs"}),
        "customConnections[0]",
        "declare Connection objects under connections, not customConn",
    ),
    ("workers-not-list", lambda f: f.update(workers={"name": "x"}), "workers", "expected a list"),
    (
        "fifo-not-bool",
        lambda f: f["queues"][0].update(fifo="maybe"),
        "queues[0].fifo",
        "valid boolean",
    ),
    (
        "lifecycle-not-list",
        _worker(0, lifecycle={"preStopCommand": "sleep 5"}),
        "workers[0].lifecycle.preStopCommand",
        "expected a list",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "reason"),
    [pytest.param(m, p, r, id=i) for i, m, p, r in CASES],
)
def test_malformed_fleet_is_rejected_with_file_path_and_reason(
    mutate: Mutation, path: str, reason: str
) -> None:
    fleet = valid_fleet()
    mutate(fleet)

    with pytest.raises(SpecError) as caught:
        load_fleet(fleet, FILE)

    lines = caught.value.lines()
    prefix = f"{FILE}: {path}: "
    matching = [line for line in lines if line.startswith(prefix)]
    assert matching, f"no issue at {path!r}; got {lines}"
    assert any(reason in line for line in matching), f"{reason!r} not in {matching}"
    assert caught.value.reason is Reason.INVALID_SPEC


def test_table_has_at_least_thirty_distinct_malformations() -> None:
    assert len({case[0] for case in CASES}) == len(CASES) >= 30


def test_top_level_must_be_a_mapping() -> None:
    with pytest.raises(SpecError) as caught:
        load_fleet([valid_fleet()], FILE)

    assert caught.value.lines() == [f"{FILE}: expected a Fleet mapping, got a list"]


def test_every_problem_is_reported_in_one_error() -> None:
    fleet = valid_fleet()
    fleet["workers"][0]["name"] = "Bad"
    fleet["clusterConnections"][0]["hostPort"] = "nope"
    fleet["queues"][1]["partitions"] = 0

    with pytest.raises(SpecError) as caught:
        load_fleet(fleet, FILE)

    paths = {issue.path for issue in caught.value.issues}
    assert {"workers[0].name", "clusterConnections[0].hostPort", "queues[1].partitions"} <= paths
    assert str(caught.value).count("\n") == len(caught.value.issues) - 1


def test_every_cross_object_problem_is_reported_in_one_error() -> None:
    fleet = valid_fleet()
    fleet["workers"][0]["queueRef"] = {"name": "nope"}
    fleet["workers"][1]["connectionRef"] = {"name": "orders"}
    fleet["queues"].append({"name": "billing", "namespace": "sqs"})

    with pytest.raises(SpecError) as caught:
        load_fleet(fleet, FILE)

    paths = [issue.path for issue in caught.value.issues]
    assert paths == ["queues[2].name", "workers[0].queueRef", "workers[1].connectionRef.name"]
