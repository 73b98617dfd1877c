"""``twc run`` as a real subprocess for the end-to-end daemon tests.

Each daemon runs in its own session (process group). Its engine runs under twc's engine
guard, which leaves that group, so neither ``kill_9`` (of the daemon alone, or of its
whole group) nor anything else leaves an engine, language-host or plugin process
behind: :meth:`DaemonProcess.engine_processes` finds every process the daemon started,
orphaned or not, by a mark in its environment. Metrics are read over HTTP; a metric
name that the daemon does not expose fails the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import FleetStack
from tests.helpers import assert_eventually
from twc.engine.supervisor import JournalEntry
from twc.local.environment import free_port, project_root
from twc.reconcile.health import sample_names

ROOT = project_root()

FAST: dict[str, Any] = {
    "reconcile_interval": 1.0,
    "refresh_interval": 3600.0,
    "sampling": {"interval": 1.0},
    "backoff": {"base": 0.5, "max_delay": 5.0, "concurrent_update_delay": 2.0},
}
"""Settings for tests: iterate and sample backlogs every second, never refresh on its
own."""


@dataclass
class DaemonProcess:
    """One ``python -m twc run`` process."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    name: str
    tmpdir: Path
    """The daemon's TMPDIR: its state directory, the guard's channel and journal."""
    mark: str
    """The value of :data:`DAEMON_MARK_ENV` every process it starts inherits."""
    exit_code: int | None = field(default=None)
    status_port: int = 0
    """Port of ``/status`` (its own loopback listener)."""

    def metrics(self) -> tuple[dict[str, list[tuple[dict[str, str], float]]], dict[str, str]]:
        """Samples by name, read from ``/metrics``, and every sample name the exposed
        metrics can have (with the metric's type), sampled yet or not."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        families = []
        for family in text_string_to_metric_families(text):
            families.append((family.name, family.type))
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out, sample_names(families)

    def value(self, name: str, **labels: str) -> float | None:
        """Sum of the samples of ``name`` whose labels include ``labels``; ``None`` when
        none has them (not sampled yet, or dropped). An unknown name fails the test."""
        samples, known = self.metrics()
        assert name in known, f"{self.name} exposes no metric sample {name!r}"
        found = [v for sample_labels, v in samples.get(name, []) if _match(sample_labels, labels)]
        return sum(found) if found else None

    def count(self, name: str, **labels: str) -> float:
        """A counter's value for ``labels``: 0 when it has not counted yet. A name that
        is not a counter's fails the test."""
        samples, known = self.metrics()
        assert known.get(name) == "counter", f"{self.name} exposes no counter {name!r}"
        return sum(v for sample_labels, v in samples.get(name, []) if _match(sample_labels, labels))

    def ups(self) -> float:
        """Engine ``up`` runs started so far."""
        return self.count("twc_engine_runs_total", operation="up")

    def successes(self) -> float:
        """Successful iterations so far."""
        return self.count("twc_reconcile_total", result="success")

    def status(self) -> dict[str, Any]:
        """The loop's state from ``/status``."""
        url = f"http://127.0.0.1:{self.status_port}/status"
        with urllib.request.urlopen(url, timeout=5) as r:
            return dict(json.loads(r.read()))

    def probe(self, path: str) -> int:
        """HTTP status of ``path``."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    def answer(self, path: str) -> tuple[int, str]:
        """HTTP status and body of ``path``."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status), r.read().decode(errors="replace")
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode(errors="replace")

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.proc.poll() is None

    def text(self) -> str:
        """Everything the daemon logged so far."""
        return self.log.read_text(errors="replace")

    def terminate(self, timeout: float = 120) -> int:
        """SIGTERM, then wait for the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        self.exit_code = self.proc.wait(timeout=timeout)
        return self.exit_code

    def kill_9(self, *, group: bool = True) -> None:
        """SIGKILL the daemon (with ``group``, its whole process group, as a killed pod's
        process tree); the engine guard then takes its engine down."""
        if group:
            os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            self.proc.kill()
        self.exit_code = self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP the daemon process alone (its engine's processes run on)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        os.kill(self.proc.pid, signal.SIGCONT)

    def engine_processes(self) -> list[tuple[int, str]]:
        """Live processes the daemon started (guards, CLIs, language hosts, plugins,
        the program), orphaned or not: ``(pid, command line)``."""
        return [(pid, line) for pid, line in marked_processes(self.mark) if pid != self.proc.pid]

    def journal(self) -> list[JournalEntry]:
        """Every engine command the daemon's guards ran, by start time."""
        entries = []
        for path in self.tmpdir.glob("twc-daemon-*/guard/journal/*.json"):
            entries.append(JournalEntry.from_json(json.loads(path.read_text())))
        return sorted(entries, key=lambda e: e.started)


class Daemons:
    """Starts daemons; stops whatever is left at teardown."""

    def __init__(self, tmp_path: Path, pulumi_env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.pulumi_env = pulumi_env
        self.started: list[DaemonProcess] = []
        self.stacks: list[FleetStack] = []

    def stack(self, fleet: dict[str, Any], **config: str) -> FleetStack:
        """A new stack of the real program with this fleet file (and ``twc:`` config)."""
        name = f"e2e-d-{uuid.uuid4().hex[:8]}"
        fs = FleetStack(name, self.tmp_path / f"{name}.yaml", dict(self.pulumi_env), dict(config))
        fs.write(fleet)
        if config:
            fs.stack()  # select it once so the extra config lands in the stack's settings
        self.stacks.append(fs)
        return fs

    def start(
        self,
        fs: FleetStack,
        *,
        settings: dict[str, Any] | None = None,
        args: list[str] | None = None,
        name: str | None = None,
        wrapper: list[str] | None = None,
    ) -> DaemonProcess:
        """Run ``twc run`` on the stack and wait until it serves ``/healthz``.

        ``wrapper`` is put in front of the command (e.g. ``setpriv`` dropping
        capabilities), so a fault test can change what the daemon may do.
        """
        name = name or f"daemon-{len(self.started) + 1}"
        port = free_port()
        status_port = free_port()
        settings_file = self.tmp_path / f"{name}-settings.json"
        written = dict(settings if settings is not None else FAST)
        written.setdefault("status_port", status_port)
        status_port = int(written["status_port"])
        settings_file.write_text(json.dumps(written))
        log = self.tmp_path / f"{name}.log"
        command = [
            *(wrapper or []),
            sys.executable,
            "-m",
            "twc",
            "run",
            "--stack",
            fs.name,
            "--fleet-file",
            str(fs.fleet_file),
            "--port",
            str(port),
            "--settings",
            str(settings_file),
            *(args or []),
        ]
        tmpdir = self.tmp_path / f"{name}-tmp"
        tmpdir.mkdir(exist_ok=True)
        mark = f"{name}-{uuid.uuid4().hex[:8]}"
        env = {
            **os.environ,
            **fs.env,
            "TWC_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(tmpdir),
            DAEMON_MARK_ENV: mark,
        }
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        daemon = DaemonProcess(proc, port, log, name, tmpdir, mark, status_port=status_port)
        self.started.append(daemon)

        def serving() -> bool:
            assert daemon.alive(), f"{name} exited early:\n{daemon.text()[-3000:]}"
            try:
                return daemon.probe("/healthz") == 200
            except OSError:
                return False

        assert_eventually(serving, timeout=30, interval=0.2, message=f"{name} never served")
        return daemon

    def stop_all(self) -> None:
        for daemon in self.started:
            if not daemon.alive():
                continue
            try:
                daemon.terminate(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill_9()


DAEMON_MARK_ENV = "TWC_TEST_DAEMON"
"""Names the daemon a process was started by (inherited down to every plugin)."""


def marked_processes(mark: str) -> list[tuple[int, str]]:
    """Live (not zombie) processes whose :data:`DAEMON_MARK_ENV` is ``mark``."""
    wanted = f"{DAEMON_MARK_ENV}={mark}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if state != "Z":
            found.append((int(entry.name), argv.decode(errors="replace")[:200]))
    return found


def _match(sample_labels: dict[str, str], wanted: dict[str, str]) -> bool:
    return all(sample_labels.get(k) == v for k, v in wanted.items())


def run_daemons(tmp_path: Path, pulumi_env: dict[str, str]) -> Iterator[Daemons]:
    """Body of each test module's ``daemons`` fixture.

    The stacks it makes (:meth:`Daemons.stack`) are removed at teardown without a
    ``destroy``: their objects live in the test's own namespace of a cluster that only
    this test session uses, and skipping ten seconds of engine per test keeps the
    daemon tests' total runtime within budget.
    """
    made = Daemons(tmp_path, pulumi_env)
    yield made
    made.stop_all()
    for daemon in made.started:
        # Shown on failure: what each daemon did.
        print(f"----- {daemon.name} (exit {daemon.exit_code}) -----")
        print(daemon.text()[-6000:])
    for fs in made.stacks:
        fs.stack().workspace.remove_stack(fs.name, force=True)


def eventually(
    probe: Any, *, timeout: float, message: str | Callable[[], str], interval: float = 0.25
) -> Any:
    """``assert_eventually`` with the daemons' usual polling interval."""
    return assert_eventually(probe, timeout=timeout, interval=interval, message=message)


def wait_for_success(daemon: DaemonProcess, *, after: float = 0, timeout: float = 90) -> float:
    """Wait until the daemon has more than ``after`` successful iterations."""

    def done() -> float:
        assert daemon.alive(), f"{daemon.name} died:\n{daemon.text()[-3000:]}"
        value = daemon.successes()
        return value if value > after else 0

    return float(eventually(done, timeout=timeout, message=f"{daemon.name} never succeeded"))


def settle(seconds: float) -> None:
    """Let the daemons iterate for a while (their interval is one second)."""
    time.sleep(seconds)


def wait_until_settled(daemon: DaemonProcess) -> None:
    """Until the daemon settles: its up (if any) finished, and the next two iterations
    start no engine run."""
    eventually(
        lambda: daemon.value("twc_engine_in_progress") == 0,
        timeout=120,
        message="an up never finished",
    )
    wait_for_success(daemon, after=daemon.successes(), timeout=120)
    ups = daemon.ups()
    wait_for_success(daemon, after=daemon.successes() + 2, timeout=60)
    assert daemon.ups() == ups, daemon.text()[-3000:]
