"""The engine guard, on real processes: a stand-in CLI that starts a "plugin" in a session
of its own (as the Pulumi CLI starts its plugins), and the guard around it through the
very wrapper the Automation API runs. Whatever ends the run — the CLI exiting, a passed
deadline, the end of the caller's Lease term, the caller killed with SIGKILL — no
process of the run is left, and the journal says why it ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import assert_eventually, guarded_cli
from twc.engine.supervisor import (
    CHANNEL_ENV,
    PARENT_ENV,
    Control,
    GuardAction,
    GuardChannel,
    Stop,
    next_action,
    stop_reason,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

FAKE_CLI = f"""#!{sys.executable}
import json, os, signal, subprocess, sys, time
marker, *modes = sys.argv[1:]
if "ignore-int" in modes:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
plugin = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
with open(marker + ".tmp", "w") as out:
    json.dump({{"cli": os.getpid(), "plugin": plugin.pid}}, out)
os.replace(marker + ".tmp", marker)
if "exit" in modes:
    sys.exit(3)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.fixture
def wrapper(tmp_path: Path) -> Path:
    return guarded_cli(tmp_path, FAKE_CLI)


def _pids(marker: Path) -> dict[str, int]:
    found = assert_eventually(marker.exists, timeout=30, interval=0.05, message="never started")
    assert found
    return dict(json.loads(marker.read_text()))


def test_a_cli_that_exits_leaves_no_plugin_behind(wrapper: Path, tmp_path: Path) -> None:
    marker = tmp_path / "run.json"

    done = subprocess.run([str(wrapper), str(marker), "exit"], capture_output=True, timeout=60)

    assert done.returncode == 3  # the CLI's own exit code
    pids = _pids(marker)
    assert _gone(pids["cli"])
    assert _gone(pids["plugin"]), "the orphaned plugin outlived the run"


def test_a_passed_deadline_interrupts_the_cli_and_kills_every_process_of_the_run(
    wrapper: Path, tmp_path: Path
) -> None:
    channel = GuardChannel(tmp_path / "channel", grace=0.5)
    marker = tmp_path / "run.json"
    env = {**os.environ, **channel.env()}

    with channel.run(1.0) as started:
        done = subprocess.run(
            [str(wrapper), str(marker), "ignore-int"], env=env, capture_output=True, timeout=60
        )

    assert done.returncode != 0
    assert b"deadline of 1 s passed" in done.stderr
    pids = _pids(marker)
    assert _gone(pids["cli"])
    assert _gone(pids["plugin"])
    [entry] = channel.journal(since=started)
    assert entry.cause == "deadline"
    assert entry.pid == pids["cli"]
    assert entry.killed >= 2  # it ignored SIGINT: the CLI and its plugin were killed
    assert channel.live_guards() == []


def test_a_preemptible_run_told_to_give_way_is_interrupted_and_journalled_as_preempted(
    wrapper: Path, tmp_path: Path
) -> None:
    channel = GuardChannel(tmp_path / "channel", grace=0.5)
    marker = tmp_path / "run.json"
    env = {**os.environ, **channel.env()}
    assert not channel.preempt("nothing runs"), "no run: nothing to stop"
    assert channel.preempted is None

    with channel.run(600.0, preemptible=True) as started:
        proc = subprocess.Popen([str(wrapper), str(marker)], env=env, stderr=subprocess.PIPE)
        pids = _pids(marker)
        assert channel.preempt("a change to orders")
        assert channel.preempted == "a change to orders"
        _, stderr = proc.communicate(timeout=60)

    assert proc.returncode != 0
    assert b"a change to orders" in stderr
    assert _gone(pids["cli"])
    assert _gone(pids["plugin"])
    [entry] = channel.journal(since=started)
    assert entry.cause == "preempt"
    assert entry.killed <= 1  # the CLI ended on its SIGINT; only its plugin was left
    # The request ended with the run it stopped.
    assert channel.preempted is None
    assert channel.control.preemptible is False


def test_a_run_that_may_not_give_way_ignores_the_request(wrapper: Path, tmp_path: Path) -> None:
    channel = GuardChannel(tmp_path / "channel", grace=0.5)
    marker = tmp_path / "run.json"

    with channel.run(600.0) as started:
        assert not channel.preempt("a change")
        done = subprocess.run(
            [str(wrapper), str(marker), "exit"],
            env={**os.environ, **channel.env()},
            capture_output=True,
            timeout=60,
        )

    assert done.returncode == 3  # it ran to its own end
    [entry] = channel.journal(since=started)
    assert entry.interrupted is None


def test_the_end_of_the_lease_term_stops_the_run(wrapper: Path, tmp_path: Path) -> None:
    channel = GuardChannel(tmp_path / "channel", grace=0.5, leased=True)
    channel.lease_renewed(time.monotonic() + 600, ())
    marker = tmp_path / "run.json"
    proc = subprocess.Popen(
        [str(wrapper), str(marker)], env={**os.environ, **channel.env()}, stderr=subprocess.PIPE
    )
    # Under a Lease the CLI waits until its pid is recorded.
    announced = assert_eventually(channel.announced, timeout=30, message="never announced")
    assert not marker.exists()
    channel.lease_renewed(time.monotonic() + 600, announced)
    pids = _pids(marker)
    assert pids["cli"] == announced[0]

    channel.lease_ended()

    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert b"Lease term" in stderr
    assert _gone(pids["cli"])
    assert _gone(pids["plugin"])
    assert [e.cause for e in channel.journal()] == ["lease"]


def test_a_cli_whose_pid_the_lease_never_records_never_starts(
    wrapper: Path, tmp_path: Path
) -> None:
    channel = GuardChannel(tmp_path / "channel", grace=0.5, leased=True)
    channel.lease_renewed(time.monotonic() + 1.0, ())  # a term, but nothing recorded
    marker = tmp_path / "run.json"

    done = subprocess.run(
        [str(wrapper), str(marker)],
        env={**os.environ, **channel.env()},
        capture_output=True,
        timeout=60,
    )

    assert done.returncode != 0
    assert b"not starting the engine" in done.stderr
    assert not marker.exists()
    assert [e.cause for e in channel.journal()] == ["lease"]


def test_no_engine_starts_without_a_term(wrapper: Path, tmp_path: Path) -> None:
    channel = GuardChannel(tmp_path / "channel", leased=True)  # no term granted yet
    marker = tmp_path / "run.json"

    done = subprocess.run(
        [str(wrapper), str(marker)],
        env={**os.environ, **channel.env()},
        capture_output=True,
        timeout=60,
    )

    assert done.returncode == 1
    assert b"Lease term" in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize("whole_group", [False, True], ids=["the caller", "its process group"])
def test_a_caller_killed_with_sigkill_takes_its_run_down(
    wrapper: Path, tmp_path: Path, whole_group: bool
) -> None:
    channel = GuardChannel(tmp_path / "channel", grace=0.5)
    marker = tmp_path / "run.json"
    caller = (
        "import os, subprocess, sys, time\n"
        f"os.environ[{PARENT_ENV!r}] = str(os.getpid())\n"
        f"os.environ[{CHANNEL_ENV!r}] = {str(channel.directory)!r}\n"
        f"subprocess.Popen([{str(wrapper)!r}, {str(marker)!r}, 'ignore-int'])\n"
        "time.sleep(600)\n"
    )
    daemon = subprocess.Popen([sys.executable, "-c", caller], start_new_session=True)
    pids = _pids(marker)

    if whole_group:
        os.killpg(daemon.pid, signal.SIGKILL)
    else:
        daemon.kill()
    daemon.wait(timeout=10)

    entries = assert_eventually(
        channel.journal, timeout=60, interval=0.1, message="the guard never ended the run"
    )
    assert [e.cause for e in entries] == ["parent"]
    assert _gone(pids["cli"])
    assert _gone(pids["plugin"])
    assert channel.live_guards() == []


def test_the_exit_of_the_callers_thread_that_started_the_run_stops_nothing(
    wrapper: Path, tmp_path: Path
) -> None:
    # Linux sends the parent-death signal when the *thread* that forked the guard exits,
    # though the caller lives on; a daemon's engine thread may end so. Only a real death
    # (the caller's pid gone) stops the run.
    channel = GuardChannel(tmp_path / "channel", grace=0.5)
    marker = tmp_path / "run.json"
    thread_done = tmp_path / "thread-done"
    caller = (
        "import os, subprocess, threading, time\n"
        f"os.environ[{PARENT_ENV!r}] = str(os.getpid())\n"
        f"os.environ[{CHANNEL_ENV!r}] = {str(channel.directory)!r}\n"
        "def start():\n"
        f"    subprocess.Popen([{str(wrapper)!r}, {str(marker)!r}])\n"
        f"    while not os.path.exists({str(marker)!r}):\n"
        "        time.sleep(0.05)\n"
        "thread = threading.Thread(target=start)\n"
        "thread.start()\n"
        "thread.join()\n"
        f"open({str(thread_done)!r}, 'w').close()\n"
        "time.sleep(600)\n"
    )
    daemon = subprocess.Popen([sys.executable, "-c", caller], start_new_session=True)
    try:
        pids = _pids(marker)
        assert_eventually(thread_done.exists, timeout=30, message="the thread never ended")
        time.sleep(2.0)  # the signal, if it stopped the run, has long arrived

        assert not _gone(pids["cli"]), "the run stopped when the caller's thread ended"
        assert channel.journal() == []
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
    # The caller's real death still ends the run.
    entries = assert_eventually(
        channel.journal, timeout=60, interval=0.1, message="the guard never ended the run"
    )
    assert [e.cause for e in entries] == ["parent"]
    assert _gone(pids["cli"])
    assert _gone(pids["plugin"])


def test_a_guard_started_by_another_process_than_its_channels_refuses(
    wrapper: Path, tmp_path: Path
) -> None:
    channel = GuardChannel(tmp_path / "channel")
    env = {**os.environ, **channel.env(), PARENT_ENV: "1"}
    marker = tmp_path / "run.json"

    done = subprocess.run([str(wrapper), str(marker)], env=env, capture_output=True, timeout=60)

    assert done.returncode == 1
    assert b"is gone" in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("control", "now", "requested", "cause"),
    [
        (Control(), 100.0, None, None),
        (Control(lease_until=100.0), 99.9, None, None),
        (Control(lease_until=100.0), 100.0, None, "lease"),
        (Control(run_until=50.0, run_seconds=10), 50.0, None, "deadline"),
        (Control(interrupt="a thread died"), 0.0, None, "interrupt"),
        (Control(preemptible=True, preempt="a change"), 0.0, None, "preempt"),
        (Control(preempt="a change"), 0.0, None, None),
        (Control(lease_until=1e9), 0.0, Stop("parent", "gone"), "parent"),
    ],
)
def test_why_a_run_stops(
    control: Control, now: float, requested: Stop | None, cause: str | None
) -> None:
    found = stop_reason(control, now=now, requested=requested)

    assert (found.cause if found else None) == cause


def test_the_guard_interrupts_first_and_kills_after_the_grace_period() -> None:
    control = Control(lease_until=10.0, grace=3.0)

    def act(now: float, interrupted_at: float | None, exited: bool = False) -> GuardAction:
        action, _ = next_action(
            control, now=now, exited=exited, requested=None, interrupted_at=interrupted_at
        )
        return action

    assert act(9.99, None) is GuardAction.WAIT
    assert act(10.0, None) is GuardAction.INTERRUPT
    assert act(12.99, 10.0) is GuardAction.WAIT
    assert act(13.0, 10.0) is GuardAction.KILL
    assert act(11.0, 10.0, exited=True) is GuardAction.FINISH
