"""The build a restarted daemon compares (``twc.engine.build``) changes with what
renders a stack, and not with the daemon's own code: a twc release that changes only
how the daemon decides or runs the engine must not start a full ``up`` of every shard."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from twc.engine import build
from twc.engine.build import NOT_RENDERING
from twc.local.environment import project_root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = project_root()
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("__main__.py", "Pulumi.yaml", "requirements.txt"):
        shutil.copy(root / name, copy / name)
    for package in ("twc", "providers"):
        shutil.copytree(
            root / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return copy


def _build(root: Path) -> str:
    return build.build_id.__wrapped__(root)


@pytest.mark.parametrize(
    "edited",
    [
        "twc/reconcile/daemon.py",
        "twc/engine/automation.py",
        "twc/cli/run.py",
        "twc/cli/__init__.py",
    ],
)
def test_an_edit_of_the_daemon_or_the_engine_runs_keeps_the_build(tree: Path, edited: str) -> None:
    before = _build(tree)
    (tree / edited).write_text((tree / edited).read_text() + "\n# another release\n")

    assert _build(tree) == before


@pytest.mark.parametrize(
    "edited",
    [
        "twc/builders.py",
        "twc/program/__init__.py",
        "providers/__init__.py",
        "requirements.txt",
        "__main__.py",
    ],
)
def test_an_edit_of_what_renders_changes_the_build(tree: Path, edited: str) -> None:
    before = _build(tree)
    (tree / edited).write_text((tree / edited).read_text() + "\n# another release\n")

    assert _build(tree) != before


def test_what_is_left_out_is_what_the_layers_contract_keeps_from_the_program() -> None:
    config = tomllib.loads((project_root() / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = config["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    above = {p.strip() for layer in layers[: layers.index("program")] for p in layer.split("|")}
    test_bed = [
        c for c in contracts if c["type"] == "forbidden" and c["forbidden_modules"] == ["twc.local"]
    ]
    assert test_bed
    assert "twc.program" in test_bed[0]["source_modules"]

    assert set(NOT_RENDERING) == above
