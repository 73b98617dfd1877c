"""A refresh runs niced, through the very wrapper the Automation API runs: the CLI and
the plugins it starts give way to an ``up`` and to the daemon's loops when the CPU is
contended (at 20 shards a refresh runs nearly all the time); an ``up`` keeps the
caller's priority. Under ``twc run``'s channel every engine run is niced by
``engine.niceness`` as well, so the daemon's own loops get a core before an ``up``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import guarded_cli
from twc.loop.settings import DaemonSettings
from twc.stackrun.guard import BACKGROUND_NICENESS, NICENESS_ENV, GuardChannel

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


def _niceness(wrapper: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, int]:
    done = subprocess.run(
        [str(wrapper), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, **(env or {})},
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


def test_under_the_daemons_channel_every_run_gives_way_to_its_loops(
    wrapper: Path, tmp_path: Path
) -> None:
    own = os.nice(0)
    channel = GuardChannel(tmp_path / "guard", niceness=DaemonSettings().engine.niceness)
    # The channel's variables as `twc run` hands them to the engine, without the
    # channel itself (whose parent check wants the daemon's own pid as the caller).
    env = {k: v for k, v in channel.env().items() if k == NICENESS_ENV}

    up = _niceness(wrapper, "up", "--yes", "--stack", "s", env=env)
    refresh = _niceness(wrapper, "refresh", "--yes", "--stack", "s", env=env)

    assert DaemonSettings().engine.niceness == 5
    assert up == {"cli": min(19, own + 5), "plugin": min(19, own + 5)}
    want = min(19, own + 5 + BACKGROUND_NICENESS)
    assert refresh == {"cli": want, "plugin": want}


@pytest.mark.parametrize("value", ["-5", "20", "five", ""])
def test_a_stray_niceness_never_changes_an_engines_priority(wrapper: Path, value: str) -> None:
    own = os.nice(0)

    seen = _niceness(wrapper, "up", "--yes", "--stack", "s", env={NICENESS_ENV: value})

    assert seen == {"cli": own, "plugin": own}


def test_a_channel_without_niceness_hands_none_down(tmp_path: Path) -> None:
    assert NICENESS_ENV not in GuardChannel(tmp_path / "guard").env()
    assert GuardChannel(tmp_path / "g2", niceness=3).env()[NICENESS_ENV] == "3"
