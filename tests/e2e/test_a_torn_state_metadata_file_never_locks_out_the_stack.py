"""A Pulumi CLI killed while it rewrote a state file's metadata sidecar (``.attrs``) left
the stack unreadable for good ("failed to load checkpoint: EOF"), and a daemon retrying
forever. On the real CLI: the engine's writes leave no sidecar to tear, and a torn one a
plain CLI left is removed before the next select, with the state as it was."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from twc.engine import engine

pytestmark = pytest.mark.e2e

PASSPHRASE = "twc-test"


def _project(tmp_path: Path) -> engine.StackRef:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: demo\nruntime: python\n")
    (tmp_path / "state").mkdir()
    return engine.StackRef(
        name="a",
        work_dir=project,
        env={
            "PULUMI_HOME": str(tmp_path / "home"),
            "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        },
    )


def _plain_cli(pulumi: str, ref: engine.StackRef, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, on the backend URL as the user wrote it."""
    env = {**os.environ, **(ref.env or {}), "PULUMI_SKIP_UPDATE_CHECK": "true"}
    return subprocess.run(
        [pulumi, *args, "--stack", ref.name, "--non-interactive"],
        cwd=ref.work_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _sidecars(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "state").rglob("*.attrs"))


def test_the_engine_writes_the_stack_state_without_sidecars(
    tmp_path: Path, real_tool: Callable[[str], str]
) -> None:
    real_tool("pulumi")
    ref = _project(tmp_path)
    stack = engine.select_stack(ref)  # creates the stack: its first state file
    deployment = stack.export_stack()
    stack.import_stack(deployment)  # writes the state again, and a backup of it

    state = tmp_path / "state" / ".pulumi" / "stacks" / "demo" / "a.json"
    assert state.exists(), "the CLI kept the stack somewhere else"
    assert state.with_name("a.json.bak").exists(), "the second write made no backup"
    assert _sidecars(tmp_path) == []


def test_a_torn_sidecar_is_removed_and_the_stack_read_as_it_was(
    tmp_path: Path, real_tool: Callable[[str], str]
) -> None:
    pulumi = real_tool("pulumi")
    ref = _project(tmp_path)
    created = _plain_cli(pulumi, ref, "stack", "init")
    assert created.returncode == 0, created.stderr
    sidecar = tmp_path / "state" / ".pulumi" / "stacks" / "demo" / "a.json.attrs"
    assert sidecar.exists(), f"the plain CLI wrote no sidecar: {_sidecars(tmp_path)}"
    before = _plain_cli(pulumi, ref, "stack", "export")
    assert before.returncode == 0, before.stderr

    sidecar.write_bytes(b"")  # what a CLI killed between truncating and writing it leaves
    locked_out = _plain_cli(pulumi, ref, "stack", "export")
    assert locked_out.returncode != 0
    assert "failed to load checkpoint: EOF" in locked_out.stderr

    exported = engine.select_stack(ref).export_stack()

    assert not sidecar.exists()
    assert exported.deployment is not None
    after = _plain_cli(pulumi, ref, "stack", "export")
    assert after.returncode == 0, after.stderr
    assert after.stdout == before.stdout  # the state is the one the stack had
