"""``python -m twc run`` as its own process, as in production, with its HTTP endpoint."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


class DaemonProcess:
    """One ``twc run`` of a stack (sharded or not)."""

    def __init__(
        self,
        stack: str,
        fleet_file: Path,
        env: dict[str, str],
        workdir: Path,
        *,
        settings: dict[str, Any],
        tag: str = "",
    ) -> None:
        self.stack = stack
        self.port, self.status_port = _free_port(), _free_port()
        name = f"daemon-{stack}{tag}"
        self.settings_file = workdir / f"{name}.json"
        ports = {"metrics_port": self.port, "status_port": self.status_port}
        self.settings_file.write_text(json.dumps({**settings, **ports}))
        self.log_file = workdir / f"{name}.log"
        self._log = self.log_file.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "twc",
                "run",
                "--stack",
                stack,
                "--fleet-file",
                str(fleet_file),
                "--settings",
                str(self.settings_file),
            ],
            cwd=ROOT,
            env={**os.environ, **env, "TWC_LOG_LEVEL": os.environ.get("TWC_LOG_LEVEL", "INFO")},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Samples by name from ``/metrics``."""
        _, text = _get(f"http://127.0.0.1:{self.port}/metrics")
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return out

    def value(self, name: str, **labels: str) -> float | None:
        """A metric's value summed over every sample whose labels include ``labels``."""
        found = [
            v
            for sample_labels, v in self.metrics().get(name, [])
            if all(sample_labels.get(k) == want for k, want in labels.items())
        ]
        return sum(found) if found else None

    def engine_runs(self, operation: str | None = None) -> float:
        """Engine runs started so far, every shard: of one ``operation`` or of any.

        The counter is labelled, so an operation that never ran has no sample yet: that
        reads as none started, the counter's own meaning.
        """
        labels = {"operation": operation} if operation else {}
        return self.value("twc_engine_runs_total", **labels) or 0.0

    def status(self) -> dict[str, Any]:
        """``/status`` (its own listener); raises when it does not answer."""
        code, text = _get(f"http://127.0.0.1:{self.status_port}/status")
        if code != 200 or not text:
            raise RuntimeError(f"/status answered {code}; see {self.log_file}")
        return dict(json.loads(text))

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"twc run exited {self.proc.returncode}; see {self.log_file}")
            if _get(f"http://127.0.0.1:{self.port}/readyz")[0] == 200:
                return
            time.sleep(0.5)
        raise TimeoutError(f"twc run not ready after {timeout:.0f} s; see {self.log_file}")

    def wait_idle(self, timeout: float, quiet: int = 3) -> None:
        """Until no ``up`` (or recovery) is in progress in any shard (``quiet`` reads in a
        row). Refreshes are left out: with refresh on, a large sharded stack is almost
        always refreshing some shard, and a refresh never holds up a change."""
        deadline = time.monotonic() + timeout
        calm = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"twc run exited {self.proc.returncode}; see {self.log_file}")
            ups = self.value("twc_engine_in_progress", operation="up")
            recoveries = self.value("twc_engine_in_progress", operation="recover")
            busy = None if ups is None or recoveries is None else ups + recoveries
            calm = calm + 1 if busy == 0 else 0
            if calm >= quiet:
                return
            time.sleep(0.5)
        raise TimeoutError(f"twc run still busy after {timeout:.0f} s; see {self.log_file}")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: each shard finishes its step, then exits
            try:
                self.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
