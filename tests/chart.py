"""The daemon's chart (deploy/chart) as the real ``helm template`` renders it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT, require_tools
from twc.local.environment import find_tool

CHART = ROOT / "deploy" / "chart"
WRITE = {"get", "list", "watch", "create", "update", "patch", "delete"}
READ = {"get", "list", "watch"}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the pinned helm; a failure shows helm's own output."""
    require_tools("helm")
    done = subprocess.run([find_tool("helm"), *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def template_args(
    *sets: str,
    release: str = "twc",
    namespace: str = "twc-system",
    fleet_file: Path | None = None,
    include_crds: bool = False,
) -> list[str]:
    """``helm template`` arguments: ``sets`` are ``--set`` expressions."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for expression in sets:
        args += ["--set", expression]
    if fleet_file is not None:
        args += ["--set-file", f"fleet.file={fleet_file}"]
    if include_crds:
        args.append("--include-crds")
    return args


def render_text(*sets: str, **kwargs: Any) -> str:
    """The rendered YAML stream."""
    return helm(*template_args(*sets, **kwargs)).stdout


def render(*sets: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
    """The rendered objects keyed ``Kind/name`` (``Kind/namespace/name`` for Roles)."""
    out: dict[str, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(render_text(*sets, **kwargs)):
        if not doc:
            continue
        meta = doc["metadata"]
        key = f"{doc['kind']}/{meta['name']}"
        if doc["kind"] in ("Role", "RoleBinding"):
            key = f"{doc['kind']}/{meta['namespace']}/{meta['name']}"
        assert key not in out, f"rendered twice: {key}"
        out[key] = doc
    return out


def grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """``{(apiGroup, resource): verbs}`` of a Role or ClusterRole."""
    found: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found.setdefault((group, resource), set()).update(rule["verbs"])
    return found
