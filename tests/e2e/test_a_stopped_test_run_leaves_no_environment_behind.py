"""A test run stopped by SIGTERM (what `make` passes on) or Ctrl-C leaves no embedded
environment process running: each xdist worker's etcd, kube-apiserver, controllers,
KWOK and Temporal end with the run.

The test starts a pytest run of its own (one xdist worker, the project's fixtures) whose
only test holds the session's environment, stops it, and looks for every process that
inherited the run's mark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, TEST_BED_TOOLS, require_tools
from tests.helpers import assert_eventually

pytestmark = pytest.mark.e2e

MARK_ENV = "TWC_STOPPED_RUN_MARK"
HOLDING_TEST = """
import os, signal
from pathlib import Path

def test_holds_the_sessions_environment(local_env):
    Path(os.environ["TWC_STOPPED_RUN_READY"]).write_text(str(local_env.dir))
    signal.pause()
"""
# Ctrl-C reaches a run whose SIGINT is not ignored (a background job's is): reset it.
WITH_DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def marked_processes(mark: str) -> dict[int, str]:
    """Live processes whose environment carries ``mark``: pid → command name."""
    found = {}
    needle = f"{MARK_ENV}={mark}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, state = stat.split("(", 1)[1].rsplit(")", 1)
        if state.split()[0] != "Z":
            found[int(entry.name)] = name
    return found


class HoldingRun:
    """A pytest run (one xdist worker, the project's fixtures) whose only test holds the
    session's embedded environment until the run is stopped."""

    def __init__(self, directory: Path) -> None:
        self.mark = uuid.uuid4().hex
        self.dir = directory
        self.ready = directory / "ready"
        test_file = directory / "holding" / "test_holding.py"
        test_file.parent.mkdir()
        test_file.write_text(HOLDING_TEST)
        argv = [
            *("-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "tests.conftest"),
            *("-p", "no:randomly", "-p", "no:cacheprovider", "-n", "1", "-q"),
            f"--basetemp={directory / 'run'}",
            str(test_file),
        ]
        env = {**os.environ, MARK_ENV: self.mark, "TWC_STOPPED_RUN_READY": str(self.ready)}
        env.pop("PYTEST_XDIST_WORKER", None)
        with open(directory / "run.log", "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", WITH_DEFAULT_SIGINT, *argv],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def remaining(self) -> dict[int, str]:
        return marked_processes(self.mark)

    def stop(self, signum: signal.Signals) -> dict[int, str]:
        """Wait for the environment, then signal the run as ``make test`` would be.

        Returns:
            The run's processes just before the signal.
        """
        assert_eventually(
            lambda: self.ready.exists() or self.proc.poll() is not None,
            timeout=300,
            message="the holding run never started its environment",
        )
        assert self.ready.exists(), (self.dir / "run.log").read_text()
        running = self.remaining()
        if signum == signal.SIGINT:
            os.killpg(self.proc.pid, signum)  # Ctrl-C: the terminal signals the whole group
        else:
            os.kill(self.proc.pid, signum)  # `make` passes SIGTERM on to its child only
        return running

    def kill(self) -> None:
        for pid in self.remaining():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def holding_run(tmp_path: Path) -> Iterator[HoldingRun]:
    run = HoldingRun(tmp_path)
    try:
        yield run
    finally:
        run.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stopped_run_leaves_no_environment_process(
    real_tool: Callable[[str], str], holding_run: HoldingRun, signum: signal.Signals
) -> None:
    require_tools(*TEST_BED_TOOLS)
    running = holding_run.stop(signum)
    # The run held a whole environment, so the check below has something to miss.
    parts = {"etcd", "kube-apiserver", "kube-controller", "kube-scheduler", "kwok", "temporal"}
    assert parts <= set(running.values()), running
    assert_eventually(
        lambda: not holding_run.remaining(),
        timeout=90,
        message="processes of the stopped run still run",
    )
