"""The daemon's chart, as the real ``helm template`` renders it, is accepted by the real
API server: ``helm template ... | kubectl apply --dry-run=server -f -`` against the
embedded environment, in both RBAC scopes, CRDs included; and nothing is created.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.chart import render_text
from tests.conftest import ROOT, require_tools
from twc.local.environment import LocalEnvironment, find_tool

pytestmark = pytest.mark.e2e


def _dry_run(local_env: LocalEnvironment, stream: str) -> str:
    require_tools("kubectl")
    done = subprocess.run(
        [find_tool("kubectl"), "apply", "--dry-run=server", "-f", "-"],
        input=stream,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(local_env.kubeconfig)},
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="cluster"),
        pytest.param(("rbac.scope=namespaced", "queueCRD.install=true"), id="namespaced"),
    ],
)
def test_the_rendered_chart_is_accepted_by_the_api_server(
    local_env: LocalEnvironment, kube: Any, namespace: str, sets: tuple[str, ...]
) -> None:
    release = f"twc-{uuid.uuid4().hex[:6]}"
    if "rbac.scope=namespaced" in sets:
        sets = (*sets, f"rbac.namespaces={{{namespace}}}")
    stream = render_text(
        *sets,
        release=release,
        namespace=namespace,
        fleet_file=ROOT / "stacks" / "prod.yaml",
        include_crds=True,
    )
    kinds = [d["kind"] for d in yaml.safe_load_all(stream) if d]

    out = _dry_run(local_env, stream)

    # Every object was checked by the server, none created.
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == len(kinds), out
    assert all(line.endswith("(server dry run)") for line in lines), out
    assert f"deployment.apps/{release}" in out
    assert f"configmap/{release}-fleet" in out
    assert kinds.count("CustomResourceDefinition") >= 3
    with pytest.raises(ApiException) as missing:
        kube.rbac.read_cluster_role(release)
    assert missing.value.status == 404
    assert kube.get_deployment(namespace, release) is None
