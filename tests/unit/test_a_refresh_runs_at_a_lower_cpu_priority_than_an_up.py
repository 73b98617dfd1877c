"""A refresh runs niced, through the very wrapper the Automation API runs: the CLI and
the plugins it starts give way to an ``up`` and to the daemon's loops when the CPU is
contended (at 20 shards a refresh runs nearly all the time); an ``up`` keeps the
caller's priority."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import guarded_cli
from twc.stackrun.guard import BACKGROUND_NICENESS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs fork")

# Prints its own niceness and that of a "plugin" it starts (as the CLI starts its plugins).
NICENESS_CLI = f"""#!{sys.executable}
import json, os, subprocess, sys
plugin = subprocess.run(
    [sys.executable, "-c", "import os; print(os.nice(0))"],
    capture_output=True, text=True, check=True, start_new_session=True,
)
print(json.dumps({{"cli": os.nice(0), "plugin": int(plugin.stdout)}}))
"""


@pytest.fixture
def wrapper(tmp_path: Path) -> Path:
    return guarded_cli(tmp_path, NICENESS_CLI)


def _niceness(wrapper: Path, *args: str) -> dict[str, int]:
    done = subprocess.run(
        [str(wrapper), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_refresh_and_its_plugins_run_niced(wrapper: Path) -> None:
    own = os.nice(0)

    seen = _niceness(wrapper, "--non-interactive", "refresh", "--yes", "--stack", "s")

    want = min(19, own + BACKGROUND_NICENESS)
    assert seen == {"cli": want, "plugin": want}


def test_an_up_keeps_the_callers_priority(wrapper: Path) -> None:
    own = os.nice(0)

    seen = _niceness(wrapper, "up", "--yes", "--stack", "s")

    assert seen == {"cli": own, "plugin": own}
