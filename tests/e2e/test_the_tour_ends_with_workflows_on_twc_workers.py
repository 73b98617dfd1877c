"""The first run, as a user meets it: ``make tour`` (``make run`` after its set-up) and
the example worker of one's own.

On a copy of the project with an embedded environment of its own in the copy's
``.twc`` (started without pod workers, as a user may have it), exactly the user's
commands run with the copy's defaults (stack ``local``, ``.twc/env.json``):

- ``make tour``: every worker of ``stacks/local.yaml`` completes its smoke workflow and
  ``twc status`` lists at least one poller for it;
- ``examples/greeting``: ``twc up`` with its fleet file, then ``temporal workflow
  execute`` of its own workflow type completes on its own code, run as a local process
  from the pod's command; then a versioned rollout (AllAtOnce) of it, twice, each
  version's pods polling as that version;
- and the smoke says failed, not completed, for a task queue nobody polls.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, TEST_BED_TOOLS, require_tools
from twc.local.cli import run_smoke
from twc.spec import load_fleet_file

pytestmark = pytest.mark.e2e

COPIED = (
    "twc",
    "providers",
    "stacks",
    "examples",
    "tools",
    "__main__.py",
    "Pulumi.yaml",
    "Makefile",
)
"""What the tour needs of the project (the virtualenv and the tools are linked)."""
SHELL_ONLY = ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "KUBECONFIG", "TEMPORAL_")
"""A shell's variables that would point the commands elsewhere than the copy's own."""


def _run(project: Path, env: dict[str, str], *argv: str) -> str:
    done = subprocess.run(
        argv, cwd=project, env=env, capture_output=True, text=True, timeout=800, check=False
    )
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A copy of the project and a shell's environment for it; its embedded environment
    runs (``twc local up``, no pod workers) until the module ends."""
    require_tools(*TEST_BED_TOOLS, "temporal")
    copy = tmp_path_factory.mktemp("project")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / name)
    (copy / ".venv").symlink_to((ROOT / ".venv").resolve())
    (copy / ".twc").mkdir()
    (copy / ".twc" / "bin").symlink_to((ROOT / ".twc" / "bin").resolve())
    env = {k: v for k, v in os.environ.items() if not k.startswith(SHELL_ONLY)}
    env["PYTHONPATH"] = str(copy)
    twc = (str(copy / ".venv" / "bin" / "python"), "-m", "twc")
    try:
        _run(copy, env, *twc, "local", "up")
        yield copy, env
    finally:
        _run(copy, env, *twc, "local", "down")


def test_make_tour_completes_a_workflow_on_every_worker_of_the_local_stack(
    project: tuple[Path, dict[str, str]], real_tool: Callable[[str], str]
) -> None:
    copy, env = project
    out = _run(copy, env, "make", "--no-print-directory", "tour")
    workers = load_fleet_file(str(copy / "stacks" / "local.yaml")).resolved_workers()
    assert workers
    smoke = {line.split()[0]: line for line in out.splitlines() if "completed:" in line}
    python = str(copy / ".venv" / "bin" / "python")
    status = json.loads(
        _run(copy, env, python, "-m", "twc", "status", "--stack", "local", "--output", "json")
    )["workers"]
    for worker in workers:
        key = f"{worker.namespace}/{worker.name}"
        assert f"completed: smoke (from {worker.name}" in smoke.get(key, ""), out
        assert status[key]["pollers"] >= 1, json.dumps(status[key])


def _greeting_fleet(copy: Path, tag: str, rollout: dict[str, Any] | None) -> Path:
    fleet = yaml.safe_load((copy / "examples" / "greeting" / "fleet.yaml").read_text())
    worker = fleet["workers"][0]
    worker["template"]["spec"]["containers"][0]["image"] = f"registry.example/greeting:{tag}"
    if rollout:
        worker["rollout"] = rollout
    path = copy / f"greeting-{tag}.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path


def test_your_own_worker_completes_its_workflow_through_twc_up_and_a_versioned_rollout(
    project: tuple[Path, dict[str, str]], real_tool: Callable[[str], str]
) -> None:
    copy, env = project
    temporal = real_tool("temporal")
    twc = (str(copy / ".venv" / "bin" / "python"), "-m", "twc")
    address = json.loads((copy / ".twc" / "env.json").read_text())["TEMPORAL_ADDRESS"]

    def greet(name: str) -> str:
        out = _run(
            copy,
            env,
            *(temporal, "workflow", "execute", "--address", address, "--task-queue"),
            *("greetings", "--type", "GreetingWorkflow", "--input", json.dumps(name)),
            *("--workflow-id", f"greet-{uuid.uuid4().hex[:8]}", "--execution-timeout", "120s"),
            *("--output", "json"),
        )
        result: str = json.loads(out)["result"]
        return result

    _run(copy, env, *twc, "local", "up", "--run-workers")
    fleet = "examples/greeting/fleet.yaml"
    _run(copy, env, *twc, "up", "--stack", "local", "--fleet-file", fleet, "--yes")
    assert greet("Ada") == "Hello, Ada! (build unversioned)"

    for tag in ("1.0", "2.0"):
        path = _greeting_fleet(copy, tag, {"strategy": "AllAtOnce"})
        out = _run(copy, env, *twc, "up", "--stack", "local", "--fleet-file", str(path))
        greeting = greet("Grace")
        build = greeting.removeprefix("Hello, Grace! (build ").removesuffix(")")
        assert build.startswith(f"{tag}-"), greeting
        assert f"rollout of default/greeter: {build} → Current" in out, out


def test_the_smoke_fails_for_a_worker_whose_queue_nobody_polls(
    project: tuple[Path, dict[str, str]], real_tool: Callable[[str], str]
) -> None:
    copy, _ = project
    real_tool("temporal")
    fleet = yaml.safe_load((copy / "stacks" / "local.yaml").read_text())
    fleet["queues"] = []
    fleet["workers"][0]["taskQueueName"] = f"nobody-{uuid.uuid4().hex[:8]}"
    path = copy / "unapplied.yaml"
    path.write_text(yaml.safe_dump(fleet))
    address = json.loads((copy / ".twc" / "env.json").read_text())["TEMPORAL_ADDRESS"]
    out = io.StringIO()
    assert run_smoke(address, str(path), out, timeout=2) == 1
    assert "default/echo" in out.getvalue()
    assert "failed: " in out.getvalue()
    assert "completed" not in out.getvalue()
