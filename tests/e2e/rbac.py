"""The daemon acting as the chart's ServiceAccount, with exactly the chart's RBAC.

The chart (deploy/chart) is rendered by the real ``helm template`` for a release of its
own, and its ServiceAccount, ClusterRole, Roles and bindings are created. The kubeconfig
carries a token the API server issued for the ServiceAccount (TokenRequest), so both
the daemon's own Python client and the engine's Kubernetes provider act as it. (A
kubeconfig ``as:`` impersonation would do the same for the provider, but the Python
client ignores it.)
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.chart import render
from twc.local.environment import LocalEnvironment


@dataclass
class DaemonIdentity:
    """The ServiceAccount, its ClusterRole as created, and a kubeconfig acting as it."""

    kubeconfig: Path
    cluster_role: dict[str, Any]
    """The chart's ClusterRole as created (under the release's name)."""

    def replace_rules(self, kube: Any, rules: list[dict[str, Any]]) -> None:
        """Change what the ClusterRole grants (RBAC applies to the next request)."""
        body = copy.deepcopy(self.cluster_role)
        body["rules"] = rules
        kube.rbac.replace_cluster_role(body["metadata"]["name"], body)


def daemon_identity(
    local_env: LocalEnvironment, kube: Any, tmp_path: Path, namespace: str
) -> DaemonIdentity:
    """The chart's RBAC for a release in ``namespace`` (the daemon's own: its Lease and
    the stack's record live there), and a kubeconfig acting as its ServiceAccount."""
    release = f"twc-{uuid.uuid4().hex[:6]}"
    docs = render(release=release, namespace=namespace)
    account = docs[f"ServiceAccount/{release}"]
    kube.core.create_namespaced_service_account(namespace, account)
    role = docs[f"ClusterRole/{release}"]
    kube.rbac.create_cluster_role(role)
    kube.rbac.create_cluster_role_binding(docs[f"ClusterRoleBinding/{release}"])
    for key, doc in docs.items():
        if key.startswith("Role/"):
            kube.rbac.create_namespaced_role(namespace, doc)
        elif key.startswith("RoleBinding/"):
            kube.rbac.create_namespaced_role_binding(namespace, doc)
    token = kube.core.create_namespaced_service_account_token(
        release, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(local_env.kubeconfig).read_text())
    config["users"] = [{"name": release, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = release
    path = tmp_path / f"kubeconfig-{release}"
    path.write_text(yaml.safe_dump(config))
    return DaemonIdentity(path, role)
