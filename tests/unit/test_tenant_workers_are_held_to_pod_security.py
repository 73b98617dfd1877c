"""Workers from tenants' objects get tenant-safe pods: a TemporalWorker or Queue object
whose pods set more than the Pod Security Standards' ``restricted`` profile is refused
alone (``InvalidSpec``, naming the field) unless the fleet file's ``podSecurity`` allows
more; and a ClusterConnection copies its credential only into namespaces it names."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit._daemon_fakes import queue_object
from tests.unit._native_objects import worker_obj
from twc.connections import Registry
from twc.desired import QUEUE_KIND_KEY, WORKER_KIND_KEY, DesiredInputs, ObjectList, desired_fleet
from twc.errors import SpecError
from twc.spec import load_fleet, pod_security_problems

REGISTRY = Registry.with_builtins()


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "worker"}], **spec}}


def _context(**ctx: Any) -> dict[str, Any]:
    return _pod({"containers": [{"name": "worker", "securityContext": ctx}]})


@pytest.mark.parametrize(
    ("template", "level", "field"),
    [
        (_context(privileged=True), "baseline", "spec.containers[0].securityContext.privileged"),
        (_pod({"hostNetwork": True}), "baseline", "spec.hostNetwork"),
        (_pod({"hostPID": True}), "restricted", "spec.hostPID"),
        (_pod({"hostIPC": True}), "restricted", "spec.hostIPC"),
        (
            _pod({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
            "baseline",
            "spec.volumes[0].hostPath",
        ),
        (_pod({"volumes": [{"name": "n", "nfs": {}}]}), "restricted", "spec.volumes[0].nfs"),
        (
            _context(capabilities={"add": ["NET_ADMIN"]}),
            "baseline",
            "spec.containers[0].securityContext.capabilities.add",
        ),
        (
            _context(capabilities={"add": ["CHOWN"]}),
            "restricted",
            "spec.containers[0].securityContext.capabilities.add",
        ),
        (
            _context(allowPrivilegeEscalation=True),
            "restricted",
            "spec.containers[0].securityContext.allowPrivilegeEscalation",
        ),
        (_context(runAsUser=0), "restricted", "spec.containers[0].securityContext.runAsUser"),
        (
            _pod({"securityContext": {"runAsNonRoot": False}}),
            "restricted",
            "spec.securityContext.runAsNonRoot",
        ),
        (
            _pod({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
            "baseline",
            "spec.securityContext.seccompProfile.type",
        ),
        (
            _pod({"containers": [{"name": "worker", "ports": [{"hostPort": 80}]}]}),
            "baseline",
            "spec.containers[0].ports[0].hostPort",
        ),
        (
            _pod({"initContainers": [{"name": "i", "securityContext": {"privileged": True}}]}),
            "restricted",
            "spec.initContainers[0].securityContext.privileged",
        ),
        (
            _pod({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}),
            "baseline",
            "spec.securityContext.sysctls[0]",
        ),
    ],
)
def test_a_template_setting_more_than_the_profile_is_named_by_field(
    template: dict[str, Any], level: Any, field: str
) -> None:
    problems = pod_security_problems(template, level)
    assert [p.split(":")[0] for p in problems] == [field]


@pytest.mark.parametrize(
    ("template", "level"),
    [
        (_context(capabilities={"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}), "restricted"),
        (_context(runAsNonRoot=True, allowPrivilegeEscalation=False), "restricted"),
        (_pod({"volumes": [{"name": "c", "configMap": {"name": "x"}}]}), "restricted"),
        (_context(capabilities={"add": ["CHOWN"]}), "baseline"),
        (_pod({"volumes": [{"name": "n", "nfs": {}}]}), "baseline"),
        (_context(privileged=True), "privileged"),
        (_pod({"hostNetwork": True}), "privileged"),
    ],
)
def test_a_template_within_the_profile_passes(template: dict[str, Any], level: Any) -> None:
    assert pod_security_problems(template, level) == []


def _fleet(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {"image": "registry.example/worker:1.0.0"},
        "connections": [
            {"name": "local", "namespace": ns, "hostPort": "t.example:7233"}
            for ns in ("team-a", "team-b")
        ],
        **extra,
    }


def _desired(doc: dict[str, Any], workers: list[dict[str, Any]], queues: Any = ()) -> Any:
    cluster = {
        WORKER_KIND_KEY: ObjectList.known(workers),
        QUEUE_KIND_KEY: ObjectList.known(queues),
        "ClusterConnection.temporal.io": ObjectList.known(()),
        "Connection.temporal.io": ObjectList.known(()),
    }
    return desired_fleet(
        load_fleet(doc, "f.yaml"),
        DesiredInputs(fleet=doc, cluster=cluster),
        registry=REGISTRY,
        file="f.yaml",
    )


PRIVILEGED = {"spec": {"containers": [{"name": "worker", "securityContext": {"privileged": True}}]}}


def _worker(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return worker_obj(name, namespace=namespace, ref={"name": "local"}, **spec)


def test_a_privileged_temporal_worker_is_refused_alone_naming_the_field() -> None:
    desired = _desired(
        _fleet(),
        [_worker("evil", "team-a", template=PRIVILEGED), _worker("fine", "team-b")],
    )
    assert set(desired.workers) == {"team-b/fine"}
    [rejected] = desired.rejected
    assert (rejected.key, rejected.reason, rejected.kept) == ("team-a/evil", "InvalidSpec", False)
    assert "spec.template.spec.containers[0].securityContext.privileged" in rejected.message


@pytest.mark.parametrize("allowance", ["team-a", "team-a/evil"])
def test_the_fleet_file_may_allow_more_per_namespace_or_worker(allowance: str) -> None:
    desired = _desired(
        _fleet(podSecurity={allowance: "privileged"}),
        [_worker("evil", "team-a", template=PRIVILEGED)],
    )
    assert set(desired.workers) == {"team-a/evil"}
    assert desired.rejected == ()


def test_a_queue_objects_worker_is_held_to_the_profile_with_the_defaults_template() -> None:
    doc = _fleet()
    doc["defaults"] = {**doc["defaults"], "connectionRef": {"name": "local"}}
    doc["defaults"]["template"] = {"spec": {"hostNetwork": True}}
    desired = _desired(doc, [], [queue_object("orders", namespace="team-a")])
    assert desired.workers == {}
    [rejected] = desired.rejected
    assert rejected.reason == "InvalidSpec"
    assert "defaults.template.spec.hostNetwork" in rejected.message


def test_fleet_file_workers_are_the_platform_teams_and_not_held() -> None:
    doc = _fleet(
        workers=[
            {"name": "agent", "namespace": "team-a", "taskQueueName": "a", "template": PRIVILEGED}
        ]
    )
    doc["defaults"]["connectionRef"] = {"name": "local"}
    assert set(_desired(doc, []).workers) == {"team-a/agent"}


def test_a_credential_is_copied_only_where_the_connection_names() -> None:
    doc = _fleet(
        clusterConnections=[
            {
                "name": "prod",
                "hostPort": "t.example:7233",
                "mutualTLSSecretRef": {"name": "mtls"},
                "secretSource": {"namespace": "temporal"},
            }
        ]
    )
    with pytest.raises(SpecError, match="secretSource needs allowedNamespaces"):
        load_fleet(doc, "f.yaml")
    doc["clusterConnections"][0]["allowedNamespaces"] = ["team-a"]
    assert load_fleet(doc, "f.yaml").cluster_connections[0].allowed_namespaces == ("team-a",)
