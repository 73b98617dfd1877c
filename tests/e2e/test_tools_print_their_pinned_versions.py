"""The tools `make setup` provides are the pinned versions (tools/versions.env)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

VERSIONS = dict(
    line.split("=", 1)
    for line in (Path(__file__).parents[2] / "tools" / "versions.env").read_text().splitlines()
    if line and not line.startswith("#")
)


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("pulumi", ["version"], "v" + VERSIONS["PULUMI_VERSION"]),
        ("temporal", ["--version"], "temporal version " + VERSIONS["TEMPORAL_CLI_VERSION"]),
        ("kube-apiserver", ["--version"], "Kubernetes v" + VERSIONS["KUBERNETES_VERSION"]),
        ("etcd", ["--version"], "etcd Version: " + VERSIONS["ETCD_VERSION"]),
        ("kubectl", ["version", "--client"], "Client Version: v" + VERSIONS["KUBERNETES_VERSION"]),
        ("helm", ["version", "--template", "{{.Version}}"], "v" + VERSIONS["HELM_VERSION"]),
        ("actionlint", ["--version"], "v" + VERSIONS["ACTIONLINT_VERSION"] + "\n"),
        (
            "kube-controller-manager",
            ["--version"],
            "Kubernetes v" + VERSIONS["KUBERNETES_VERSION"],
        ),
        ("kube-scheduler", ["--version"], "Kubernetes v" + VERSIONS["KUBERNETES_VERSION"]),
        ("kwok", ["--version"], "kwok version v" + VERSIONS["KWOK_VERSION"]),
    ],
)
def test_tool_prints_pinned_version(
    real_tool: Callable[[str], str], tool: str, args: list[str], expected: str
) -> None:
    out = subprocess.run(
        [real_tool(tool), *args], capture_output=True, text=True, check=True
    ).stdout
    assert expected in out, out
