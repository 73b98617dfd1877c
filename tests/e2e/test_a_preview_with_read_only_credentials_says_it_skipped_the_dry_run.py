"""What the pull-request preview's credentials need (.github/workflows/preview.yml):
the API server authorizes a server-side dry run as the real request, so an identity
that may only read the cluster gets no dry run. ``twc preview`` then says so in one
line and still shows the engine's preview."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import fleet_doc
from twc.cli import preview as preview_cmd
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

READ_ONLY = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}]


@pytest.fixture
def read_only_kubeconfig(
    local_env: LocalEnvironment, kube: Any, namespace: str, tmp_path: Path
) -> Iterator[Path]:
    """A kubeconfig for a ServiceAccount that may read everything and write nothing."""
    name = f"ro-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    kube.rbac.create_cluster_role({"metadata": {"name": name}, "rules": READ_ONLY})
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    kube.rbac.create_cluster_role_binding(
        {"metadata": {"name": name}, "roleRef": role, "subjects": [subject]}
    )
    token = kube.core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(local_env.kubeconfig).read_text())
    config["users"] = [{"name": name, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = name
    path = tmp_path / "read-only.yaml"
    path.write_text(yaml.safe_dump(config))
    yield path
    kube.rbac.delete_cluster_role_binding(name)
    kube.rbac.delete_cluster_role(name)


def test_a_read_only_preview_skips_the_dry_run_and_says_why(
    local_env: LocalEnvironment,
    pulumi_env: dict[str, str],
    namespace: str,
    fleet_stack: Any,
    read_only_kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workers = [{"name": "orders", "namespace": namespace, "taskQueueName": f"tq-{namespace}"}]
    fs = fleet_stack(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=workers))
    for key, value in {**pulumi_env, "KUBECONFIG": str(read_only_kubeconfig)}.items():
        monkeypatch.setenv(key, value)

    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        fs.name, fleet_file=str(fs.fleet_file), out=out, err=err, cluster_objects=False
    )

    skipped = [
        line
        for line in err.getvalue().splitlines()
        if "the API server's dry run of the Deployments did not run" in line
    ]
    assert len(skipped) == 1, err.getvalue()
    assert "403" in skipped[0], skipped
    assert code == 0, out.getvalue() + err.getvalue()
    assert f"+ create TemporalWorker {namespace}/orders" in out.getvalue(), out.getvalue()
