"""``deploy/daemon`` grants exactly what the daemon and the program use, nothing wider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "daemon"
WRITE = {"get", "list", "watch", "create", "update", "patch", "delete"}
READ = {"get", "list", "watch"}


def _docs() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    out: dict[str, dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((DEPLOY / name).read_text()):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    grants: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def test_the_cluster_role_has_no_wildcards_and_only_the_resources_twc_uses() -> None:
    role = _docs()["ClusterRole/twc-daemon"]
    grants = _grants(role)

    for rule in role["rules"]:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
        assert "nonResourceURLs" not in rule
    assert grants == {
        ("apps", "deployments"): WRITE,
        ("apps", "statefulsets"): WRITE,
        ("", "serviceaccounts"): WRITE,
        ("", "services"): WRITE,
        ("", "secrets"): WRITE,
        ("policy", "poddisruptionbudgets"): WRITE,
        ("apps", "replicasets"): READ,
        ("", "pods"): READ,
        ("", "persistentvolumeclaims"): READ,
        ("", "endpoints"): READ,
        ("kmsvc.io", "queues"): READ,
        ("temporal.kmsvc.io", "temporalworkers"): READ,
        ("temporal.kmsvc.io", "temporalworkers/status"): {"patch"},
        ("temporal.io", "connections"): READ | {"patch"},
        ("temporal.io", "clusterconnections"): READ | {"patch"},
        ("", "events"): {"create"},
    }


def test_the_native_kinds_the_daemon_watches_are_all_granted_cluster_wide() -> None:
    from twc.connections import Registry

    grants = _grants(_docs()["ClusterRole/twc-daemon"])
    for kind in Registry.with_builtins().watched_kinds():
        # ClusterConnection is cluster-scoped: only a ClusterRole can grant it.
        assert grants[(kind.api_group, kind.plural)] >= READ, kind
        assert "patch" in grants[(kind.api_group, kind.plural)], kind
    assert "patch" not in grants[("temporal.kmsvc.io", "temporalworkers")]


def test_leases_are_granted_only_in_the_daemons_namespace() -> None:
    docs = _docs()
    role = docs["Role/twc-daemon-leader-election"]

    assert _grants(role) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    assert ("coordination.k8s.io", "leases") not in _grants(docs["ClusterRole/twc-daemon"])


def test_bindings_tie_the_roles_to_the_daemons_service_account() -> None:
    docs = _docs()
    for binding, role in (
        ("ClusterRoleBinding/twc-daemon", "twc-daemon"),
        ("RoleBinding/twc-daemon-leader-election", "twc-daemon-leader-election"),
    ):
        doc = docs[binding]
        assert doc["roleRef"]["name"] == role
        assert [(s["kind"], s["name"]) for s in doc["subjects"]] == [
            ("ServiceAccount", "twc-daemon")
        ]


def test_the_deployment_runs_the_daemon_with_leader_election_and_probes() -> None:
    dep = _docs()["Deployment/twc-daemon"]
    assert "namespace" not in dep["metadata"]
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]

    assert pod["serviceAccountName"] == "twc-daemon"
    assert container["command"] + container["args"][:1] == ["python", "-m", "twc", "run"]
    assert "--leader-elect" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    # SIGTERM lets a running `up` finish: the grace period must allow for one.
    assert pod["terminationGracePeriodSeconds"] >= 300
