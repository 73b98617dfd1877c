"""The daemon's chart (deploy/chart), rendered by the real ``helm template``, grants exactly
what the daemon and the program use, nothing wider, in both RBAC scopes; and it runs the
daemon as ``twc run --leader-elect`` with its probes and the fleet file from a ConfigMap.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import CHART, READ, WRITE, grants, helm, render, render_text, template_args

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _helm(real_tool: Callable[[str], str]) -> None:
    """Every test here renders the chart with the pinned helm."""
    real_tool("helm")


NAMESPACED = {
    ("apps", "deployments"): WRITE,
    ("apps", "deployments/scale"): {"get", "patch"},
    ("apps", "statefulsets"): WRITE,
    ("", "serviceaccounts"): WRITE,
    ("", "services"): WRITE,
    # Copies by server-side apply (patch), never a PUT.
    ("", "secrets"): WRITE - {"update"},
    ("policy", "poddisruptionbudgets"): WRITE,
    # Each version's copies of its resource templates.
    ("autoscaling", "horizontalpodautoscalers"): WRITE,
    ("keda.sh", "scaledobjects"): WRITE,
    ("apps", "replicasets"): READ,
    ("", "pods"): READ,
    ("", "persistentvolumeclaims"): READ,
    ("", "endpoints"): READ,
    ("temporal.kmsvc.io", "temporalworkers/status"): {"patch"},
    # The status of the official WorkerDeployments twc serves (their objects are only read).
    ("temporal.io", "workerdeployments/status"): {"patch"},
    ("temporal.io", "workerresourcetemplates/status"): {"patch"},
    # The generated TemporalWorker views of Queue and fleet-file workers.
    ("temporal.kmsvc.io", "temporalworkers"): {"create", "patch", "delete"},
    ("temporal.io", "connections"): {"patch"},
    ("", "events"): {"create"},
    ("", "configmaps"): {"get"},
}
CLUSTER_WIDE = {
    ("apps", "deployments"): {"list", "watch"},
    ("kmsvc.io", "queues"): READ,
    ("temporal.kmsvc.io", "temporalworkers"): READ,
    ("temporal.io", "workerdeployments"): READ,
    ("temporal.io", "workerresourcetemplates"): READ,
    ("temporal.io", "connections"): READ,
    ("temporal.io", "clusterconnections"): READ | {"patch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get"},
}


def _union(*parts: dict[tuple[str, str], set[str]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for part in parts:
        for key, verbs in part.items():
            out.setdefault(key, set()).update(verbs)
    return out


def test_the_cluster_role_has_no_wildcards_and_only_the_resources_twc_uses() -> None:
    role = render()["ClusterRole/twc"]

    for rule in role["rules"]:
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert "*" not in rule["apiGroups"]
        assert "nonResourceURLs" not in rule
    assert grants(role) == _union(NAMESPACED, CLUSTER_WIDE)
    [crds] = [r for r in role["rules"] if "customresourcedefinitions" in r["resources"]]
    # Only the CRDs of the kinds the daemon lists, by name.
    assert sorted(crds["resourceNames"]) == [
        "clusterconnections.temporal.io",
        "connections.temporal.io",
        "queues.kmsvc.io",
        "temporalworkers.temporal.kmsvc.io",
        "workerdeployments.temporal.io",
        "workerresourcetemplates.temporal.io",
    ]


def test_the_namespaced_scope_writes_and_reads_secrets_only_in_the_given_namespaces() -> None:
    docs = render("rbac.scope=namespaced", "rbac.namespaces={apps,temporal}")

    for namespace in ("apps", "temporal"):
        assert grants(docs[f"Role/{namespace}/twc"]) == NAMESPACED, namespace
        binding = docs[f"RoleBinding/{namespace}/twc"]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "twc",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "twc", "namespace": "twc-system"}
        ]
    cluster = grants(docs["ClusterRole/twc"])
    assert cluster == CLUSTER_WIDE
    # Cluster-wide, nothing is written but the ClusterConnection finalizer.
    assert {v for verbs in cluster.values() for v in verbs} <= READ | {"patch"}
    assert [k for k, verbs in cluster.items() if "patch" in verbs] == [
        ("temporal.io", "clusterconnections")
    ]
    assert ("", "secrets") not in cluster
    assert not [k for k in docs if k.startswith("Role/") and "/default/" in k]
    # So the daemon is told not to list Secrets cluster-wide (and the cluster scope is not).
    assert "--rbac-scope=namespaced" in _container(docs)["args"]
    assert not [a for a in _container(render())["args"] if a.startswith("--rbac-scope")]


def test_the_native_kinds_the_daemon_watches_are_granted_in_both_scopes() -> None:
    from twc.connections import Registry

    for sets in ((), ("rbac.scope=namespaced", "rbac.namespaces={apps}")):
        docs = render(*sets)
        cluster = grants(docs["ClusterRole/twc"])
        everything = _union(cluster, *(grants(d) for k, d in docs.items() if k.startswith("Role/")))
        for kind in Registry.with_builtins().watched_kinds():
            # The daemon lists every watched kind across all namespaces: a ClusterRole.
            assert cluster[(kind.api_group, kind.plural)] >= READ, (sets, kind)
            assert "patch" in everything[(kind.api_group, kind.plural)], (sets, kind)
        # TemporalWorkers people made are never written, only their status; the daemon
        # writes only the views it generates, in the workers' namespaces.
        assert everything[("temporal.kmsvc.io", "temporalworkers")] == READ | {
            "create",
            "patch",
            "delete",
        }
        assert cluster[("temporal.kmsvc.io", "temporalworkers")] == (
            READ if sets else READ | {"create", "patch", "delete"}
        ), sets


def test_a_rule_changes_in_one_place_for_every_scope() -> None:
    sets = (
        "rbac.rules.namespaced.secrets.verbs={get}",
        "rbac.rules.namespaced.secrets.resourceNames={temporal-mtls}",
        "rbac.rules.namespaced.disruptionBudgets=null",
    )
    for scope in ((), ("rbac.scope=namespaced", "rbac.namespaces={apps}")):
        docs = render(*scope, *sets)
        role = docs["Role/apps/twc"] if scope else docs["ClusterRole/twc"]
        secrets = [r for r in role["rules"] if r["resources"] == ["secrets"]]
        assert secrets == [
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get"],
                "resourceNames": ["temporal-mtls"],
            }
        ], scope
        assert ("policy", "poddisruptionbudgets") not in grants(role), scope


def test_the_stack_record_is_granted_only_in_the_daemons_namespace() -> None:
    for sets in ((), ("leaderElection.enabled=false", "replicas=1")):
        docs = render(*sets)
        role = docs["Role/twc-system/twc-record"]
        assert grants(role) == {("", "configmaps"): {"get", "create", "patch", "delete"}}
        binding = docs["RoleBinding/twc-system/twc-record"]
        assert binding["roleRef"]["name"] == "twc-record"
        # Cluster-wide, ConfigMaps are only read (gate inputs), never written or listed.
        assert grants(docs["ClusterRole/twc"])[("", "configmaps")] == {"get"}


def test_leases_are_granted_only_in_the_daemons_namespace() -> None:
    docs = render()
    role = docs["Role/twc-system/twc-leader-election"]

    assert grants(role) == {
        ("coordination.k8s.io", "leases"): {"get", "list", "create", "update", "patch", "delete"},
        # A sharded stack's assignment of namespaces to shards.
        ("", "configmaps"): {"get", "create", "update"},
    }
    assert ("coordination.k8s.io", "leases") not in grants(docs["ClusterRole/twc"])
    without = render("leaderElection.enabled=false", "replicas=1")
    assert "Role/twc-system/twc-leader-election" not in without
    assert "--leader-elect" not in _container(without)["args"]


def test_bindings_tie_the_roles_to_the_daemons_service_account() -> None:
    docs = render()
    for binding, kind, role in (
        ("ClusterRoleBinding/twc", "ClusterRole", "twc"),
        ("RoleBinding/twc-system/twc-leader-election", "Role", "twc-leader-election"),
    ):
        doc = docs[binding]
        assert (doc["roleRef"]["kind"], doc["roleRef"]["name"]) == (kind, role)
        assert [(s["kind"], s["name"], s["namespace"]) for s in doc["subjects"]] == [
            ("ServiceAccount", "twc", "twc-system")
        ]
    assert docs["ServiceAccount/twc"]["metadata"]["namespace"] == "twc-system"


def _container(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = docs["Deployment/twc"]["spec"]["template"]["spec"]["containers"][0]
    return container


def test_the_deployment_runs_the_daemon_with_leader_election_and_probes() -> None:
    docs = render("stack=prod", "image.repository=registry.example/twc", "image.tag=1.2.3")
    dep = docs["Deployment/twc"]
    pod = dep["spec"]["template"]["spec"]
    container = _container(docs)

    assert dep["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == "twc"
    assert container["image"] == "registry.example/twc:1.2.3"
    assert container["command"] == ["twc"]
    assert container["args"][:2] == ["run", "--stack=prod"]
    assert "--leader-elect" in container["args"]
    assert "--fleet-file=/etc/twc/fleet.yaml" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["PULUMI_BACKEND_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "twc-pulumi",
        "key": "backend-url",
    }
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    # SIGTERM lets a running `up` finish: the grace period must allow for one.
    assert pod["terminationGracePeriodSeconds"] >= 300


def test_the_default_image_tag_is_twcs_version() -> None:
    import twc

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == twc.__version__
    assert _container(render())["image"] == f"twc:{twc.__version__}"


def test_the_fleet_file_comes_from_the_charts_config_map(tmp_path: Path) -> None:
    from twc.spec import load_fleet_file

    fleet = Path(__file__).resolve().parents[2] / "stacks" / "prod.yaml"
    docs = render(fleet_file=fleet)
    config_map = docs["ConfigMap/twc-fleet"]
    volumes = {v["name"]: v for v in docs["Deployment/twc"]["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m for m in _container(docs)["volumeMounts"]}

    assert config_map["data"]["fleet.yaml"] == fleet.read_text()
    assert volumes["fleet"]["configMap"]["name"] == "twc-fleet"
    assert mounts["fleet"]["mountPath"] == "/etc/twc"
    # The default fleet is empty but valid, so a bare install runs.
    (tmp_path / "fleet.yaml").write_text(render()["ConfigMap/twc-fleet"]["data"]["fleet.yaml"])
    assert not load_fleet_file(tmp_path / "fleet.yaml").resolved_workers()
    own = render("fleet.existingConfigMap=my-fleet")
    assert "ConfigMap/twc-fleet" not in own
    assert own["Deployment/twc"]["spec"]["template"]["spec"]["volumes"][0]["configMap"] == {
        "name": "my-fleet"
    }


def test_the_queue_crd_is_shipped_only_when_asked_and_kept_on_uninstall() -> None:
    assert not [k for k in render() if k.startswith("CustomResourceDefinition/")]
    crd = render("queueCRD.install=true")["CustomResourceDefinition/queues.kmsvc.io"]
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["spec"]["group"] == "kmsvc.io"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["rbac.scope=namespaced"], "rbac.scope=namespaced needs rbac.namespaces"),
        (["leaderElection.enabled=false"], "replicas > 1 needs leaderElection.enabled"),
    ],
)
def test_settings_that_cannot_work_fail_the_render(sets: list[str], message: str) -> None:
    done = helm(*template_args(*sets), check=False)
    assert done.returncode != 0
    assert message in done.stderr


def test_helm_lint_passes_in_both_scopes() -> None:
    for sets in ([], ["rbac.scope=namespaced", "rbac.namespaces={apps}"]):
        args = ["lint", "--strict", str(CHART)]
        for expression in sets:
            args += ["--set", expression]
        done = helm(*args)
        assert "0 chart(s) failed" in done.stdout, done.stdout


def test_the_rendered_stream_has_no_empty_documents_or_unrendered_actions() -> None:
    text = render_text("rbac.scope=namespaced", "rbac.namespaces={a,b}", "queueCRD.install=true")
    assert "{{" not in text
    assert all(doc for doc in yaml.safe_load_all(text))
