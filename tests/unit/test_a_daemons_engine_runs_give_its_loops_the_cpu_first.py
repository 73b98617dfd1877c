"""A daemon's engine runs give its loops the CPU first, on real processes.

The guard starts the CLI at the channel's niceness (a refresh at 10 more), and the CLI's
plugins inherit it; a channel without one (``twc up`` from a shell) runs the engine at the
caller's own priority.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import guarded_cli
from twc.cli.run import ENGINE_NICENESS
from twc.engine.supervisor import GuardChannel

FAKE_CLI = f"""#!{sys.executable}
import json, os, subprocess, sys
plugin = subprocess.check_output([sys.executable, "-c", "import os; print(os.nice(0))"])
with open(os.environ["NICENESS_OUT"], "w") as out:
    json.dump({{"cli": os.nice(0), "plugin": int(plugin)}}, out)
"""


@pytest.mark.parametrize(
    ("niceness", "command", "added"),
    [
        (0, ["up", "--yes"], 0),
        (0, ["refresh", "--yes"], 0),
        (ENGINE_NICENESS, ["up", "--yes"], ENGINE_NICENESS),
        (ENGINE_NICENESS, ["--non-interactive", "refresh", "--yes"], ENGINE_NICENESS + 10),
        (ENGINE_NICENESS, ["stack", "export"], ENGINE_NICENESS),
    ],
)
def test_the_cli_and_its_plugins_run_at_the_channels_niceness_a_refresh_at_ten_more(
    tmp_path: Path, niceness: int, command: list[str], added: int
) -> None:
    wrapper = guarded_cli(tmp_path, FAKE_CLI)
    channel = GuardChannel(tmp_path / "channel", grace=0.5, niceness=niceness)
    out = tmp_path / "niceness.json"
    env = {**os.environ, **channel.env(), "NICENESS_OUT": str(out)}

    done = subprocess.run([str(wrapper), *command], env=env, capture_output=True, timeout=60)

    assert done.returncode == 0, done.stderr
    expected = min(os.nice(0) + added, 19)
    assert json.loads(out.read_text()) == {"cli": expected, "plugin": expected}
