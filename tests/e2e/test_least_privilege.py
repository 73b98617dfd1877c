"""Least privilege.

Worker ServiceAccounts mount no API token unless the fleet asks; the daemon reconciles
a normal fleet with exactly the ClusterRole of ``deploy/daemon`` and nothing more. The
daemon runs as a ServiceAccount bound to that role: its kubeconfig carries a token the
API server issued for the ServiceAccount (TokenRequest), so both the daemon's own Python
client and the engine's Kubernetes provider act as
``system:serviceaccount:<ns>:twc-daemon``. (A kubeconfig ``as:`` impersonation would do
the same for the provider, but the Python client ignores ``as:``.)
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import create_queue, create_tls_secret, fleet_doc
from twc.local import LocalEnvironment
from twc.local.environment import free_port
from twc.stackrun.engine import ROOT

pytestmark = pytest.mark.e2e

DEPLOY = ROOT / "deploy" / "daemon"


@pytest.fixture(autouse=True)
def _engine_environment(pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)


def test_worker_service_accounts_mount_a_token_only_when_the_fleet_asks(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[
            {"name": "quiet", "namespace": namespace, "taskQueueName": "tq-q"},
            {
                "name": "asks",
                "namespace": namespace,
                "taskQueueName": "tq-a",
                "serviceAccount": {"automountToken": True},
            },
        ],
    )
    assert fleet_stack(fleet).up().summary.result == "succeeded"

    for name, expected in (("quiet", False), ("asks", True)):
        sa = kube.core.read_namespaced_service_account(name, namespace)
        pod = kube.get_deployment(namespace, name)["spec"]["template"]["spec"]
        assert sa.automount_service_account_token is expected, name
        assert pod.get("automountServiceAccountToken", expected) is expected, name


def _restricted_kubeconfig(
    local_env: LocalEnvironment, kube: Any, tmp_path: Path, sa_namespace: str
) -> Path:
    """A kubeconfig acting as a ServiceAccount bound to deploy/daemon's ClusterRole."""
    suffix = uuid.uuid4().hex[:6]
    role = yaml.safe_load((DEPLOY / "clusterrole.yaml").read_text())
    role["metadata"]["name"] = f"twc-daemon-{suffix}"
    kube.rbac.create_cluster_role(role)
    kube.core.create_namespaced_service_account(sa_namespace, {"metadata": {"name": "twc-daemon"}})
    binding = yaml.safe_load((DEPLOY / "clusterrolebinding.yaml").read_text())
    binding["metadata"]["name"] = f"twc-daemon-{suffix}"
    binding["roleRef"]["name"] = role["metadata"]["name"]
    binding["subjects"][0]["namespace"] = sa_namespace
    kube.rbac.create_cluster_role_binding(binding)
    token = kube.core.create_namespaced_service_account_token(
        "twc-daemon", sa_namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(local_env.kubeconfig).read_text())
    config["users"] = [{"name": "twc-daemon", "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = "twc-daemon"
    path = tmp_path / "kubeconfig-daemon"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_daemon_reconciles_a_fleet_with_exactly_the_deployed_cluster_role(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from twc.commands.run import RunOptions, run_daemon
    from twc.local.kube import Kube

    address = local_env.temporal_address()
    source = f"{namespace}-src"
    kube.ensure_namespace(source)
    create_tls_secret(kube, source)
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "api-key"}, "stringData": {"api-key": "k"}}
    )
    fleet = fleet_doc(
        namespace,
        host_port=address,
        connection={
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": source},
        },
        workers=[
            {
                "name": "alpha",
                "namespace": namespace,
                "taskQueueName": f"tq-{namespace}",
                "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "targetBacklogPerReplica": 5},
                "dlq": {"enabled": True},
            },
            {
                "name": "keyed",
                "namespace": namespace,
                "taskQueueName": f"tq-{namespace}-k",
                "connectionRef": {"name": "cloud"},
            },
        ],
    )
    fleet["connections"] = [
        {
            "name": "cloud",
            "namespace": namespace,
            "hostPort": address,
            "apiKeySecretRef": {"name": "api-key", "key": "api-key"},
        }
    ]
    create_queue(kube, namespace, "events", partitions=2)
    fs = fleet_stack(fleet)
    restricted = _restricted_kubeconfig(local_env, kube, tmp_path, namespace)
    as_daemon = Kube(restricted)
    # The role really is narrower than admin: it cannot read ConfigMaps or write RBAC.
    with pytest.raises(ApiException) as denied:
        as_daemon.core.list_namespaced_config_map(namespace)
    assert denied.value.status == 403

    monkeypatch.setenv("KUBECONFIG", str(restricted))
    fs.env["KUBECONFIG"] = str(restricted)
    try:
        with caplog.at_level(logging.INFO):
            code = run_daemon(
                RunOptions(
                    stack=fs.name, fleet_file=str(fs.fleet_file), port=free_port(), once=True
                )
            )
    finally:
        kube.custom.delete_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", "events")
        as_daemon.close()

    assert code == 0, caplog.text
    assert "forbidden" not in caplog.text.lower(), caplog.text
    for name in ("alpha", "keyed", "worker-events"):
        assert kube.get_deployment(namespace, name) is not None, name
    assert kube.apps.read_namespaced_stateful_set("alpha-dlq", namespace) is not None
    copied = kube.core.read_namespaced_secret("temporal-mtls", namespace)
    assert copied.metadata.labels["app.kubernetes.io/managed-by"] == "twc"
