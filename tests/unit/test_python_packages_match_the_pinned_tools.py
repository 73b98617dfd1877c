"""The pulumi and pulumi-kubernetes Python packages match the pinned engine and provider."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

VERSIONS = dict(
    line.split("=", 1)
    for line in (Path(__file__).parents[2] / "tools" / "versions.env").read_text().splitlines()
    if line and not line.startswith("#")
)


def test_kubernetes_provider_matches_the_python_package() -> None:
    assert version("pulumi-kubernetes") == VERSIONS["PULUMI_KUBERNETES_VERSION"]
    assert version("pulumi") == VERSIONS["PULUMI_VERSION"]
