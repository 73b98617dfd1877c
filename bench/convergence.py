"""Item 3: a labelled kmsvc Queue created → its worker Deployment in the API server.

With the daemon in the tree, ``python -m twc run`` runs as its own process against the
N=100 stack (the Queue watch wakes it; a new worker means a full ``up``). Without it, a
stand-in loop polls the Queue objects and runs the same full ``up`` with the overlay.
The Pulumi Kubernetes Operator baseline is computed, not run: it re-runs ``pulumi up``
every resync period (60 s) whatever happened, so a new Queue waits half a period on
average before an ``up`` as long as the one measured in item 1 starts.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import fleets
from bench.stats import percentile, ratio, summarize

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
PKO_RESYNC_S = 60.0
"""The Pulumi Kubernetes Operator's default resync period."""


def pko_baseline(up_s: float, resync_s: float = PKO_RESYNC_S) -> dict[str, float]:
    """Expected latency of a loop that runs ``up`` every ``resync_s`` seconds.

    A change lands at a uniformly random moment of the period, so the wait before the
    next ``up`` is uniform on ``[0, resync_s)``: its p-th percentile is ``p% of resync``.

    Args:
        up_s: Duration of one full ``up`` that applies the change.
        resync_s: The loop's period.

    Returns:
        ``{"mean", "p50", "p95"}`` latency in seconds.
    """
    return {
        "mean": resync_s / 2 + up_s,
        "p50": resync_s * 0.50 + up_s,
        "p95": resync_s * 0.95 + up_s,
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


def _metric(text: str, name: str, stack: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name) and f'stack="{stack}"' in line:
            try:
                return float(line.rsplit(" ", 1)[1])
            except ValueError:
                return None
    return None


def run_command_available() -> bool:
    """Whether ``python -m twc run`` exists (the daemon's command line)."""
    proc = subprocess.run(
        [sys.executable, "-m", "twc", "run", "--help"], cwd=ROOT, capture_output=True, check=False
    )
    return proc.returncode == 0


class DaemonProcess:
    """``python -m twc run`` on one stack, with its health and metrics endpoint."""

    def __init__(
        self,
        stack: str,
        fleet_file: Path,
        env: dict[str, str],
        workdir: Path,
        *,
        early_apply: bool = True,
    ) -> None:
        self.stack = stack
        self.port = _free_port()
        tag = "" if early_apply else "-engine-only"
        settings = workdir / f"daemon-{stack}{tag}.json"
        # No refresh during the trials: a refresh is not what is measured.
        settings.write_text(
            json.dumps(
                {
                    "metrics_port": self.port,
                    "refresh_interval": 86400,
                    "reconcile_interval": 300,
                    "early_apply": early_apply,
                }
            )
        )
        self.log_file = workdir / f"daemon-{stack}{tag}.log"
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
                str(settings),
            ],
            cwd=ROOT,
            env={**os.environ, **env, "TWC_LOG_LEVEL": os.environ.get("TWC_LOG_LEVEL", "INFO")},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"twc run exited {self.proc.returncode}; see {self.log_file}")
            if _get(f"http://127.0.0.1:{self.port}/readyz")[0] == 200:
                return
            time.sleep(0.2)
        raise TimeoutError(f"twc run not ready after {timeout:.0f} s; see {self.log_file}")

    def wait_idle(self, timeout: float) -> None:
        """Until no engine run is in progress (two reads in a row)."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            _, text = _get(f"http://127.0.0.1:{self.port}/metrics")
            busy = _metric(text, "twc_engine_in_progress", self.stack)
            quiet = quiet + 1 if busy == 0 else 0
            if quiet >= 2:
                return
            time.sleep(0.25)
        raise TimeoutError(f"twc run still busy after {timeout:.0f} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: the daemon finishes its step and exits
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class StandinLoop:
    """Without the daemon: poll the Queue objects; on a change, full ``up`` with the overlay."""

    def __init__(self, ref: Any, kube: Any, workdir: Path, interval: float = 0.5) -> None:
        self.ref = ref
        self.kube = kube
        self.overlay = workdir / f"overlay-{ref.name}.json"
        self.interval = interval
        self.busy = threading.Event()
        self._stop = threading.Event()
        self._seen: list[str] | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._seen = self._keys(self._objects())
        self._thread.start()

    def _objects(self) -> list[dict[str, Any]]:
        return list(
            self.kube.list_custom(
                "kmsvc.io", "v1", "queues", label_selector="temporal.io/worker-enabled=true"
            )
        )

    @staticmethod
    def _keys(objects: list[dict[str, Any]]) -> list[str]:
        return sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objects)

    def _run(self) -> None:
        from dataclasses import replace

        from twc.stackrun import engine

        while not self._stop.wait(self.interval):
            objects = self._objects()
            if self._keys(objects) == self._seen:
                continue
            self.busy.set()
            try:
                self.overlay.write_text(json.dumps({"queues": objects, "replicas": {}}))
                ref = replace(
                    self.ref, env={**(self.ref.env or {}), "TWC_OVERLAY_FILE": str(self.overlay)}
                )
                engine.up(ref)
                self._seen = self._keys(objects)
            except BaseException as exc:  # noqa: BLE001 - a trial's failure is recorded, not fatal to the benchmark
                self.error = exc
                return
            finally:
                self.busy.clear()

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        time.sleep(self.interval * 2)
        while self.busy.is_set():
            if self.error is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if self.error is not None:
            raise RuntimeError(f"stand-in loop failed: {self.error}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=600)


def _wait_for_deployment(kube: Any, namespace: str, name: str, timeout: float) -> None:
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.apps.read_namespaced_deployment(name, namespace)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"Deployment {namespace}/{name} never appeared")
        time.sleep(0.05)


def measure_convergence(
    *,
    stack_name: str,
    ref: Any,
    fleet_file: Path,
    namespaces: tuple[str, ...],
    env: dict[str, str],
    kube: Any,
    workdir: Path,
    trials: int,
    full_up_s: float | None,
    workers: int,
    engine_only_trials: int = 0,
    progress: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """Create ``trials`` labelled Queues one at a time; time each until its Deployment exists.

    With ``engine_only_trials``, a daemon with early apply off runs that many trials
    first, so the two ways are compared in one run on the same stack.

    Returns:
        The latencies (``summarize``), what ran them, and the PKO baseline with ratios.
    """
    use_daemon = run_command_available()
    engine_only: list[float] = []
    if use_daemon and engine_only_trials:
        # The same daemon with early apply off: every new worker waits for its up.
        engine_only = _trials(
            DaemonProcess(stack_name, fleet_file, env, workdir, early_apply=False),
            kube,
            namespaces,
            engine_only_trials,
            "engine",
            progress,
        )
    loop: DaemonProcess | StandinLoop
    if use_daemon:
        loop = DaemonProcess(stack_name, fleet_file, env, workdir)
    else:
        loop = StandinLoop(ref, kube, workdir)
    latencies = _trials(loop, kube, namespaces, trials, "conv", progress)
    out: dict[str, Any] = {
        "source": "python -m twc run" if use_daemon else "stand-in loop",
        "existing_workers": workers,
        "latency_s": summarize(latencies),
        "engine_only_latency_s": summarize(engine_only) if engine_only else None,
        "early_vs_engine_only_p50": ratio(percentile(engine_only, 50), percentile(latencies, 50))
        if engine_only and latencies
        else None,
        "pko_resync_s": PKO_RESYNC_S,
        "pko_full_up_s": full_up_s,
    }
    if full_up_s is not None and latencies:
        base = pko_baseline(full_up_s)
        out["pko_expected_s"] = base
        out["speedup_p50"] = ratio(base["p50"], percentile(latencies, 50))
        out["speedup_p95"] = ratio(base["p95"], percentile(latencies, 95))
    return out


def _trials(
    loop: DaemonProcess | StandinLoop,
    kube: Any,
    namespaces: tuple[str, ...],
    trials: int,
    prefix: str,
    progress: Callable[[str], None],
) -> list[float]:
    """Create ``trials`` Queues one at a time; their Queue → Deployment latencies."""
    if isinstance(loop, DaemonProcess):
        # The first iteration has applied nothing yet: a full up of the whole stack.
        loop.wait_ready(timeout=900)
        loop.wait_idle(timeout=900)
    else:
        loop.start()
    latencies: list[float] = []
    try:
        for trial in range(trials):
            name = f"{prefix}-{trial:02d}-{uuid.uuid4().hex[:4]}"
            namespace = namespaces[trial % len(namespaces)]
            body = fleets.queue_object(name, namespace)
            start = time.perf_counter()
            kube.custom.create_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", body)
            _wait_for_deployment(kube, namespace, f"worker-{name}", timeout=900)
            latencies.append(time.perf_counter() - start)
            progress(f"convergence ({prefix}) trial {trial + 1}/{trials}: {latencies[-1]:.2f} s")
            loop.wait_idle(timeout=900)
    finally:
        loop.stop()
    return latencies
