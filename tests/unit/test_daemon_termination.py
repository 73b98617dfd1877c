"""A stop request (SIGTERM) ends a sleeping loop at once and lets a running step finish."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.unit._daemon_fakes import FakeEngine, NoLimit, fleet_data
from twc.kube.watch import StaticQueues
from twc.reconcile.act import Effects
from twc.reconcile.daemon import Daemon
from twc.reconcile.observe import Sources
from twc.reconcile.settings import DaemonSettings
from twc.spec import load_fleet

ROOT = Path(__file__).resolve().parents[2]


def _daemon(engine: FakeEngine, settings: DaemonSettings) -> Daemon:
    doc = fleet_data()
    return Daemon(
        "unit",
        settings,
        Sources(fleet=lambda: load_fleet(doc, "fleet.yaml"), queues=StaticQueues(())),
        Effects(engine=engine),
        budgets=NoLimit(),
    )


def test_a_stop_request_ends_an_hour_long_sleep_within_a_second() -> None:
    engine = FakeEngine()
    daemon = _daemon(engine, DaemonSettings(reconcile_interval=3600, refresh_interval=7200))
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    deadline = time.monotonic() + 10
    while not engine.ups and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.ups, "the first iteration never ran"

    started = time.monotonic()
    daemon.request_stop()
    runner.join(timeout=5)

    assert not runner.is_alive()
    assert time.monotonic() - started < 1.0
    assert result == [0]


def test_a_stop_during_an_up_lets_the_up_finish_then_the_loop_exits() -> None:
    release = threading.Event()
    entered = threading.Event()
    engine = FakeEngine()

    def slow_up() -> None:
        entered.set()
        assert release.wait(10)

    engine.during_up = slow_up
    daemon = _daemon(engine, DaemonSettings(reconcile_interval=3600, refresh_interval=7200))
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(daemon.run()))
    runner.start()
    assert entered.wait(10)

    daemon.request_stop()
    time.sleep(0.2)
    assert runner.is_alive()  # the up in progress is not abandoned
    release.set()
    runner.join(timeout=5)

    assert result == [0]
    assert daemon.state is not None
    assert daemon.state.last_outcome is not None
    assert daemon.state.last_outcome.ok
    assert daemon.state.applied is not None
    assert len(engine.ups) == 1


def test_a_stop_requested_before_an_up_starts_prevents_that_up() -> None:
    engine = FakeEngine()
    daemon = _daemon(engine, DaemonSettings())
    daemon.request_stop()

    from twc.reconcile.state import LoopState

    state = daemon.iterate(LoopState(started_at=0))

    assert engine.ups == []
    assert state.applied is None


def test_sigterm_makes_twc_run_exit_zero(tmp_path: Path) -> None:
    # A real process: the signal handler, the HTTP server and the loop together. No
    # cluster and an empty fleet file's first up would need an engine, so the fleet is
    # invalid on purpose: the loop then idles, reporting, until SIGTERM.
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("apiVersion: twc.temporal.io/v1\nkind: Fleet\nworkers: [{name: Bad_Name}]\n")
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    env["HOME"] = str(tmp_path)  # no ~/.kube/config either
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "twc",
            "run",
            "--stack",
            "unit",
            "--fleet-file",
            str(fleet),
            "--port",
            "0",
            "--status-port",
            "0",
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "reconcile failed permanently" in line or not line:
                break
        assert any("reconcile failed permanently" in line for line in lines), lines

        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)

        assert code == 0
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
