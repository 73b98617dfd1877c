"""A ``twc`` command that asked Temporal exits with its own code, every time.

temporalio's native client threads outlive the event loop that used them and can abort
the interpreter's teardown (SIGABRT, ``PyGILState_Release``), which turned a ``twc
status`` that had printed its answer into exit -6 about once in twenty runs. Each run
here asks a real Temporal dev server about three task queues, as ``twc status`` does,
as the command that the ``twc`` entry point runs, and returns 3.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

RUNS = 40
_SCRIPT = """
import sys
import twc.cli
from providers.taskqueue import check_task_queue


def command():
    for queue in ("a", "b", "c"):
        props = {"taskQueue": queue, "address": sys.argv[1], "namespace": "default"}
        check = check_task_queue(props)
        assert "pollers" in check, check
    print("asked Temporal")
    return 3


twc.cli.main = command
twc.cli.console()
"""


def test_a_command_that_asked_temporal_exits_with_its_code_and_whole_output(
    local_env: LocalEnvironment,
) -> None:
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-c", _SCRIPT, local_env.temporal_address()]
    ends = []
    for _ in range(RUNS):
        done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=120)
        ends.append((done.returncode, done.stdout == "asked Temporal\n", done.stderr))
    assert [(code, whole) for code, whole, _ in ends] == [(3, True)] * RUNS, [
        err for code, _, err in ends if code != 3
    ][:2]
