"""The daemon's chart, installed with the real ``helm install`` into the embedded cluster,
gives the daemon every right it uses and no more, in both RBAC scopes.

The daemon runs here as a local ``twc run`` process (no container runs in the test bed),
with the arguments and environment of the installed Deployment's container and a token
the API server issued for the installed ServiceAccount (TokenRequest), so the daemon's
own client and the engine's Kubernetes provider both act as that ServiceAccount. A
TemporalWorker's and a Queue's workers must be provisioned and their statuses written
with no request forbidden.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import CHART
from tests.e2e.conftest import create_queue, fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from tests.e2e.native import Kubectl, cluster_connection, object_ref, temporal_worker
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

# What the chart passes that Daemons.start passes itself (a local fleet file and port).
OWN_ARGS = ("run", "--stack", "--fleet-file", "--port")


class Release:
    """One ``helm install`` of the chart into the embedded cluster."""

    def __init__(self, helm: str, local_env: LocalEnvironment, namespace: str, home: Path) -> None:
        self.name = f"twc-{uuid.uuid4().hex[:6]}"
        self.namespace = namespace
        self._helm = helm
        self._env = {
            **os.environ,
            "KUBECONFIG": str(local_env.kubeconfig),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [self._helm, *args, "--namespace", self.namespace],
            capture_output=True,
            text=True,
            env=self._env,
            check=False,
        )
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def install(self, fleet_file: Path, *sets: str) -> None:
        args = ["install", self.name, str(CHART), "--set-file", f"fleet.file={fleet_file}"]
        for expression in sets:
            args += ["--set", expression]
        self(*args)


@pytest.fixture
def release(
    real_tool: Callable[[str], str], local_env: LocalEnvironment, namespace: str, tmp_path: Path
) -> Iterator[Release]:
    made = Release(real_tool("helm"), local_env, namespace, tmp_path / "helm")
    yield made
    made("uninstall", made.name, "--ignore-not-found")


def _kubeconfig_as(local_env: LocalEnvironment, kube: Any, release: Release, path: Path) -> Path:
    """A kubeconfig with a token the API server issued for the release's ServiceAccount."""
    token = kube.core.create_namespaced_service_account_token(
        release.name, release.namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    config = yaml.safe_load(Path(local_env.kubeconfig).read_text())
    config["users"] = [{"name": release.name, "user": {"token": token}}]
    config["contexts"][0]["context"]["user"] = release.name
    path.write_text(yaml.safe_dump(config))
    return path


def _daemon_container(kube: Any, release: Release) -> dict[str, Any]:
    deployment = kube.get_deployment(release.namespace, release.name)
    assert deployment is not None, "helm install created no Deployment"
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _status(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.custom.get_namespaced_custom_object(
        "temporal.kmsvc.io", "v1", namespace, "temporalworkers", name
    )
    return dict(obj.get("status") or {})


@pytest.mark.parametrize("scope", ["cluster", "namespaced"])
def test_the_daemon_provisions_workers_as_the_installed_charts_service_account(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    daemons: Daemons,
    release: Release,
    tmp_path: Path,
    scope: str,
) -> None:
    address = local_env.temporal_address()
    fs = daemons.stack(fleet_doc(namespace, host_port=address))
    sets = [f"stack={fs.name}", f"rbac.scope={scope}"]
    if scope == "namespaced":
        sets.append(f"rbac.namespaces={{{namespace}}}")
    release.install(fs.fleet_file, *sets)

    container = _daemon_container(kube, release)
    args = [a for a in container["args"] if not a.startswith(OWN_ARGS)]
    assert ("--rbac-scope=namespaced" in args) == (scope == "namespaced"), args
    fs.env["KUBECONFIG"] = str(_kubeconfig_as(local_env, kube, release, tmp_path / "sa.yaml"))
    fs.env["POD_NAMESPACE"] = namespace  # the Lease's and the stack record's namespace
    fs.env["POD_NAME"] = f"{release.name}-0"

    conn = f"cc-{uuid.uuid4().hex[:6]}"
    Kubectl(local_env).apply(
        cluster_connection(conn, address),
        temporal_worker(namespace, "orders", "tq-orders", object_ref("ClusterConnection", conn)),
    )
    create_queue(kube, namespace, "events")
    daemon = daemons.start(fs, args=args)
    wait_for_success(daemon, timeout=180)

    for name in ("orders", "worker-events"):
        eventually(
            lambda name=name: kube.get_deployment(namespace, name),
            timeout=120,
            message=f"no Deployment for {name}",
        )
        eventually(
            lambda name=name: (
                (s := _status(kube, namespace, name)).get("phase") and s.get("conditions")
            ),
            timeout=120,
            message=f"no status written on TemporalWorker {name}",
        )
    log = daemon.text()
    assert "forbidden" not in log.lower(), log[-6000:]
    assert " 403" not in log, log[-6000:]
