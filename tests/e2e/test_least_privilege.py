"""Least privilege.

Worker ServiceAccounts mount no API token unless the fleet asks; the daemon reconciles
a normal fleet with exactly the RBAC of its chart (deploy/chart, rendered by the real
``helm template`` and applied with the real ``kubectl``) and nothing more, in both RBAC
scopes. The daemon runs as the chart's ServiceAccount: its kubeconfig carries a token
the API server issued for it (TokenRequest), so both the daemon's own Python client and
the engine's Kubernetes provider act as ``system:serviceaccount:<ns>:<release>``. (A
kubeconfig ``as:`` impersonation would do the same for the provider, but the Python
client ignores ``as:``.)
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.chart import render_text
from tests.conftest import require_tools
from tests.e2e.conftest import create_queue, create_tls_secret, fleet_doc
from twc.local.environment import LocalEnvironment, find_tool, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


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


def _kubectl(local_env: LocalEnvironment, *args: str, stdin: str) -> str:
    require_tools("kubectl")
    done = subprocess.run(
        [find_tool("kubectl"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(local_env.kubeconfig)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def chart_rbac(local_env: LocalEnvironment) -> Any:
    """Apply the chart's RBAC for a release of its own (unique names).

    It stays until the session's environment goes: the stacks made with the restricted
    kubeconfig are destroyed at teardown through providers that still hold its token.
    """

    def apply(namespace: str, *sets: str) -> str:
        release = f"twc-{uuid.uuid4().hex[:6]}"
        docs = yaml.safe_load_all(render_text(*sets, release=release, namespace=namespace))
        stream = yaml.safe_dump_all([d for d in docs if d and d["kind"] in RBAC_KINDS])
        out = _kubectl(local_env, "apply", "-f", "-", stdin=stream)
        assert f"clusterrole.rbac.authorization.k8s.io/{release} created" in out, out
        return release

    return apply


def _kubeconfig_as(
    local_env: LocalEnvironment, kube: Any, tmp_path: Path, namespace: str, account: str
) -> Path:
    """A kubeconfig acting as the ServiceAccount ``namespace/account``."""
    token = kube.core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(local_env.kubeconfig).read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = account
    path = tmp_path / f"kubeconfig-{account}"
    path.write_text(yaml.safe_dump(config))
    return path


def _fleet_with_every_grant(local_env: LocalEnvironment, kube: Any, namespace: str) -> Any:
    """A fleet that uses every grant: secretSource copy, API key, autoscaling, DLQ, Queue."""
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
            "allowedNamespaces": [namespace],
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
    return fleet


def _run_daemon_once(
    kube: Any,
    namespace: str,
    fs: Any,
    restricted: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    **options: Any,
) -> None:
    from twc.cli.run import RunOptions, run_daemon

    admin = fs.env.get("KUBECONFIG")
    monkeypatch.setenv("KUBECONFIG", str(restricted))
    # The release's namespace holds the stack's record (in a pod, POD_NAMESPACE says so).
    monkeypatch.setenv("TWC_CONTROL_NAMESPACE", namespace)
    fs.env["KUBECONFIG"] = str(restricted)
    try:
        with caplog.at_level(logging.INFO):
            code = run_daemon(
                RunOptions(
                    stack=fs.name,
                    fleet_file=str(fs.fleet_file),
                    port=free_port(),
                    status_port=free_port(),
                    once=True,
                    **options,
                )
            )
    finally:
        kube.custom.delete_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", "events")
        # The stack is destroyed at teardown as admin: the chart's RBAC is gone by then.
        if admin is None:
            fs.env.pop("KUBECONFIG", None)
        else:
            fs.env["KUBECONFIG"] = admin

    assert code == 0, caplog.text
    assert "forbidden" not in caplog.text.lower(), caplog.text
    for name in ("alpha", "keyed", "worker-events"):
        assert kube.get_deployment(namespace, name) is not None, name
    assert kube.apps.read_namespaced_stateful_set("alpha-dlq", namespace) is not None
    copied = kube.core.read_namespaced_secret("temporal-mtls", namespace)
    assert copied.metadata.labels["app.kubernetes.io/managed-by"] == "twc"
    # The fleet-file workers' generated TemporalWorker objects, within the same grants.
    for name in ("alpha", "keyed"):
        view = kube.custom.get_namespaced_custom_object(
            "temporal.kmsvc.io", "v1", namespace, "temporalworkers", name
        )
        assert view["metadata"]["labels"]["twc.temporal.io/derived-from"] == "Fleet", name
    assert copied.metadata.labels["twc.temporal.io/stack"] == fs.name
    # The daemon wrote the stack's record where the chart's Role lets it.
    record = kube.core.read_namespaced_config_map(f"twc-stack-{fs.name}", namespace)
    assert "record.json.gz" in (record.binary_data or {})


def test_the_daemon_reconciles_a_fleet_with_exactly_the_charts_cluster_role(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Any,
    chart_rbac: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from twc.local.cluster import Kube

    fs = fleet_stack(_fleet_with_every_grant(local_env, kube, namespace))
    account = chart_rbac(namespace)
    restricted = _kubeconfig_as(local_env, kube, tmp_path, namespace, account)
    as_daemon = Kube(restricted)
    try:
        # The role really is narrower than admin: it cannot read ConfigMaps.
        with pytest.raises(ApiException) as denied:
            as_daemon.core.list_namespaced_config_map(namespace)
        assert denied.value.status == 403
    finally:
        as_daemon.close()

    _run_daemon_once(kube, namespace, fs, restricted, monkeypatch, caplog)


def test_the_namespaced_scope_reconciles_with_roles_in_the_given_namespaces_only(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Any,
    chart_rbac: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from twc.local.cluster import Kube

    fs = fleet_stack(_fleet_with_every_grant(local_env, kube, namespace))
    other = f"{namespace}-other"
    kube.ensure_namespace(other)
    kube.core.create_namespaced_secret(
        other, {"metadata": {"name": "not-yours"}, "stringData": {"k": "v"}}
    )
    account = chart_rbac(
        namespace, "rbac.scope=namespaced", f"rbac.namespaces={{{namespace},{namespace}-src}}"
    )
    restricted = _kubeconfig_as(local_env, kube, tmp_path, namespace, account)
    as_daemon = Kube(restricted)
    try:
        # Secrets are readable only in the given namespaces, and never listed cluster-wide.
        denied_calls: list[Callable[[], object]] = [
            lambda: as_daemon.core.read_namespaced_secret("not-yours", other),
            lambda: as_daemon.core.list_secret_for_all_namespaces(),
            lambda: as_daemon.core.create_namespaced_service_account(
                other, {"metadata": {"name": "x"}}
            ),
        ]
        for call in denied_calls:
            with pytest.raises(ApiException) as denied:
                call()
            assert denied.value.status == 403
    finally:
        as_daemon.close()

    # With leader election, as the chart runs it: the Lease Role in the daemon's namespace.
    started = time.monotonic()
    _run_daemon_once(
        kube,
        namespace,
        fs,
        restricted,
        monkeypatch,
        caplog,
        leader_elect=True,
        lease_namespace=namespace,
        rbac_scope=_chart_rbac_scope(),
    )
    assert "leader election on lease" in caplog.text
    print(f"rbac.scope=namespaced: twc run --once converged in {time.monotonic() - started:.1f} s")


def _chart_rbac_scope() -> str:
    """The ``--rbac-scope`` the chart's Deployment passes under ``rbac.scope=namespaced``."""
    from tests.chart import render

    args = render("rbac.scope=namespaced", "rbac.namespaces={a}")["Deployment/twc"]["spec"][
        "template"
    ]["spec"]["containers"][0]["args"]
    [scope] = [str(a).removeprefix("--rbac-scope=") for a in args if a.startswith("--rbac-scope=")]
    return scope
