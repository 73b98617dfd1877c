"""Fixtures for end-to-end runs of the twc program itself on the local environment."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from twc.cli import preview
from twc.engine import engine
from twc.local.environment import LocalEnvironment


@dataclass
class FleetStack:
    """One stack of the real twc program, with its fleet file in a temp dir."""

    name: str
    fleet_file: Path
    env: dict[str, str]
    extra_config: dict[str, str] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)

    def write(self, fleet: dict[str, Any]) -> FleetStack:
        self.fleet_file.write_text(yaml.safe_dump(fleet, sort_keys=False))
        return self

    @property
    def ref(self) -> engine.StackRef:
        return engine.StackRef(
            name=self.name,
            config={"fleetFile": str(self.fleet_file), **self.extra_config},
            env=self.env,
        )

    def stack(self) -> auto.Stack:
        return engine.select_stack(self.ref)

    def up(self) -> auto.UpResult:
        self.events = []
        return engine.up(self.ref, on_output=print, on_event=self.events.append)

    def preview(self) -> auto.PreviewResult:
        self.events = []
        return engine.preview(self.ref, on_event=self.events.append)

    def plain_up(self) -> subprocess.CompletedProcess[str]:
        """Pulumi's own CLI (``pulumi up``) on the project, as from a laptop's shell."""
        return self._shell("pulumi", "up", "--yes", "--skip-preview", "--non-interactive")

    def approve(self) -> subprocess.CompletedProcess[str]:
        """``twc approve`` of this stack, as an operator runs it."""
        return self._shell(sys.executable, "-m", "twc", "approve")

    def _shell(self, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "--stack", self.name],
            cwd=engine.ROOT,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def refresh(self) -> auto.RefreshResult:
        return engine.select_stack(self.ref).refresh(on_output=print, color="never")

    def destroy(self) -> auto.DestroyResult:
        return engine.select_stack(self.ref).destroy(on_output=print, color="never")

    def changed(self) -> dict[str, str]:
        """``{urn name: op}`` of the last up/preview's steps that were not ``same``."""
        out = {}
        for ev in self.events:
            pre = ev.resource_pre_event
            if pre and pre.metadata.op.value not in ("same", "read"):
                out[pre.metadata.urn.split("::")[-1]] = pre.metadata.op.value
        return out

    def resource_outputs(self, suffix: str) -> dict[str, Any]:
        """Outputs in the state of the resource whose name ends with ``suffix``."""
        state = (self.stack().export_stack().deployment or {})["resources"]
        matches = [r for r in state if r["urn"].endswith(suffix)]
        assert matches, f"no resource ending {suffix!r}"
        return dict(matches[0].get("outputs", {}))


@pytest.fixture
def operator_shell(pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's shell: the engine's environment, and no pod's namespace."""
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.delenv("TWC_CONTROL_NAMESPACE", raising=False)


@pytest.fixture
def fleet_stack(
    local_env: LocalEnvironment, pulumi_env: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., FleetStack]]:
    """Make stacks of the real program; each is destroyed and removed at teardown."""
    made: list[FleetStack] = []

    def make(fleet: dict[str, Any], **config: str) -> FleetStack:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        fs = FleetStack(name, tmp_path / f"{name}.yaml", dict(pulumi_env), dict(config))
        made.append(fs.write(fleet))
        return fs

    yield make
    for fs in made:
        try:
            fs.destroy()
        finally:
            fs.stack().workspace.remove_stack(fs.name, force=True)


def plain_workers(namespace: str, names: Iterable[str]) -> list[dict[str, Any]]:
    """Workers of the fleet file with nothing but a name and a task queue of their own."""
    return [
        {"name": name, "namespace": namespace, "taskQueueName": f"tq-{namespace}-{name}"}
        for name in names
    ]


def fleet_doc(
    namespace: str,
    *,
    host_port: str,
    workers: list[dict[str, Any]] | None = None,
    queues: list[dict[str, Any]] | None = None,
    connection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A fleet with one ClusterConnection ``local`` that every worker uses by default."""
    conn = {"name": "local", "hostPort": host_port, **(connection or {})}
    doc: dict[str, Any] = {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {
            "image": "registry.example/worker:1.4.2",
            "connectionRef": {
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": "local",
                }
            },
        },
        "clusterConnections": [conn],
        "queues": queues or [],
        "workers": workers or [],
    }
    _ = namespace
    return doc


def queue_object(namespace: str, name: str, partitions: int = 1) -> dict[str, Any]:
    """A kmsvc Queue object labelled for a worker."""
    return {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"temporal.io/worker-enabled": "true"},
        },
        "spec": {"partitions": partitions},
    }


def create_queue(kube: Any, namespace: str, name: str, partitions: int = 1) -> None:
    """Create a labelled Queue object in the cluster."""
    body = queue_object(namespace, name, partitions)
    kube.custom.create_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", body)


def create_tls_secret(
    kube: Any, namespace: str, *, crt: str = "crt", key: str = "key", name: str = "temporal-mtls"
) -> None:
    """Create a ``kubernetes.io/tls`` Secret (the mTLS credentials of a connection)."""
    kube.core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": name},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": crt, "tls.key": key},
        },
    )


@pytest.fixture
def daemons(tmp_path: Path, pulumi_env: dict[str, str]) -> Iterator[Any]:
    """Runs ``twc run`` processes (``tests.e2e.daemon_process.Daemons``); stops them and
    removes their stacks at teardown."""
    from tests.e2e.daemon_process import run_daemons

    yield from run_daemons(tmp_path, pulumi_env)


def credentialed_fleet(namespace: str, address: str, source: str) -> dict[str, Any]:
    """Two workers in ``namespace``: ``mtls`` on the ClusterConnection ``local`` (mTLS,
    secret ``temporal-mtls`` copied from ``source``) and ``keyed`` on the Connection
    ``cloud`` (API key from secret ``temporal-api-key``, key ``api-key``)."""
    fleet = fleet_doc(
        namespace,
        host_port=address,
        connection={
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": source},
            "allowedNamespaces": [namespace],
        },
        workers=[
            {"name": "mtls", "namespace": namespace, "taskQueueName": f"tq-{namespace}-m"},
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
            "apiKeySecretRef": {"name": "temporal-api-key", "key": "api-key"},
        }
    ]
    return fleet


def sharded_preview(stack: str, fleet_file: str) -> tuple[int, str, str]:
    """``twc preview`` of a sharded stack, JSON with detailed exit codes: (code, out, err)."""
    out, err = io.StringIO(), io.StringIO()
    code = preview.run_preview(
        stack, sharded=True, fmt="json", detailed=True, fleet_file=fleet_file, out=out, err=err
    )
    return code, out.getvalue(), err.getvalue()
