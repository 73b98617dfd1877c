"""twc as a package, as a user's CI installs it (``pip install .``): the wheel holds the
``twc`` command, the program and the dynamic providers, and the installed ``twc
preview --format markdown`` previews a fleet repository outside this checkout (its
``Pulumi.yaml``, the two-line ``__main__.py`` and ``stacks/<stack>.yaml``) with a Pulumi
CLI from PATH and nothing of the test bed but the cluster it previews against.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, require_tools
from tests.e2e.conftest import fleet_doc
from twc.local.environment import LocalEnvironment, find_tool

pytestmark = pytest.mark.e2e


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install .`` of this checkout into a directory of its own (no dependencies:
    the project's virtualenv provides them)."""
    base = tmp_path_factory.mktemp("package")
    source = base / "source"  # a copy: the build writes into its source tree
    for name in ("twc", "providers"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "requirements.txt", "README.md"):
        shutil.copy(ROOT / name, source / name)
    _pip("wheel", "--no-deps", "-q", "-w", str(base / "dist"), str(source))
    [wheel] = (base / "dist").glob("twc-*.whl")
    _pip("install", "--no-deps", "-q", "--target", str(base / "site"), str(wheel))
    return base


def test_the_wheel_holds_the_command_the_program_and_the_providers(
    real_tool: object, installed: Path
) -> None:
    [wheel] = (installed / "dist").glob("twc-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert "twc = twc.cli:console" in scripts
    assert {"twc/program/__init__.py", "twc/cli/__init__.py", "providers/__init__.py"} <= names
    assert (installed / "site" / "bin" / "twc").is_file()


def test_the_installed_twc_previews_a_fleet_repository_as_markdown(
    local_env: LocalEnvironment, pulumi_env: dict[str, str], namespace: str, installed: Path
) -> None:
    require_tools("pulumi")
    site = installed / "site"
    repo = installed / f"fleet-{uuid.uuid4().hex[:6]}"
    (repo / "stacks").mkdir(parents=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(ROOT / name, repo / name)
    (repo / ".venv").symlink_to(ROOT / ".venv")  # Pulumi.yaml's virtualenv
    stack = f"pkg-{uuid.uuid4().hex[:6]}"
    workers = [{"name": "orders", "namespace": namespace, "taskQueueName": f"tq-{stack}"}]
    fleet = fleet_doc(namespace, host_port=local_env.temporal_address(), workers=workers)
    (repo / "stacks" / f"{stack}.yaml").write_text(yaml.safe_dump(fleet))
    env = {**os.environ, **pulumi_env, "PYTHONPATH": str(site)}
    env["PATH"] = os.pathsep.join([str(Path(find_tool("pulumi")).parent), "/usr/bin", "/bin"])

    where = subprocess.run(
        [sys.executable, "-c", "import twc; print(twc.__file__)"],
        capture_output=True,
        text=True,
        cwd=repo,
        env=env,
        check=True,
    )
    assert where.stdout.startswith(str(site)), where.stdout
    try:
        done = subprocess.run(
            [str(site / "bin" / "twc"), "preview", "--stack", stack, "--format", "markdown"],
            capture_output=True,
            text=True,
            cwd=repo,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "| Change | Kind | Name | Why |" in done.stdout, done.stdout
        rows = [r for r in done.stdout.splitlines() if r.startswith("| ") and "create" in r]
        assert [r for r in rows if "TemporalWorker" in r and f"{namespace}/orders" in r], rows
    finally:
        subprocess.run(
            [find_tool("pulumi"), "stack", "rm", "--yes", "--force", "--stack", stack],
            capture_output=True,
            cwd=repo,
            env=env,
            check=False,
        )
