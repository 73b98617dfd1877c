"""One real worker process per Running twc pod (``twc local up --run-workers``), the part of
a kubelet KWOK does not play; a crashed worker is restarted with a growing back-off. The
state file lists every worker process, so ``twc local down`` stops them if this runner died."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twc.local import processes
from twc.local.cluster import Kube
from twc.local.workerpod import PodConfigError, WorkerPod, is_running, list_pods

log = logging.getLogger(__name__)

WORKER_SELECTOR = "app.kubernetes.io/managed-by=twc"
STOP_TIMEOUT = 15.0  # seconds a worker gets after SIGTERM before it is killed


@dataclass
class _Slot:
    """The worker process of one Running pod (None between a crash and its restart)."""

    worker: WorkerPod | None = None
    failures: int = 0
    retry_at: float = 0.0

    def failed(self, now: float) -> None:
        self.worker = None
        self.failures += 1
        self.retry_at = now + min(30.0, 2.0 ** (self.failures - 1))


class PodWorkers:
    """Lists pods and keeps one worker process per Running one."""

    def __init__(
        self,
        kube: Kube,
        *,
        selector: str = WORKER_SELECTOR,
        namespace: str | None = None,
        state_file: Path | None = None,
        log_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.selector = selector
        self.namespace = namespace
        self.state_file = state_file
        self.log_dir = log_dir
        self._pods: dict[str, dict[str, Any]] = {}  # uid -> the pod as last seen
        self._slots: dict[str, _Slot] = {}
        self._stopping: list[tuple[WorkerPod, float]] = []  # (worker, kill deadline)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._written: list[dict[str, Any]] | None = None
        self._thread = threading.Thread(target=self.run, name="pod-workers", daemon=True)

    def start(self) -> PodWorkers:
        self._thread.start()
        return self

    def run(self) -> None:
        """List the pods and reconcile every second until :meth:`request_stop`."""
        while not self._stop.is_set():
            try:
                pods = list_pods(self.kube, self.namespace, self.selector)
                self._pods = {p["metadata"]["uid"]: p for p in pods}
                self.reconcile()
            except Exception:
                log.exception("listing or reconciling the pod workers failed; trying again")
            self._stop.wait(1.0)

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        """Stop listing and stop every worker process."""
        self.request_stop()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            workers = self._all()
            self._slots.clear()
            self._stopping.clear()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.stop(STOP_TIMEOUT)
        self._write_state()

    def workers(self) -> dict[str, WorkerPod]:
        """``{namespace/pod: worker}`` for every pod whose worker process runs now."""
        with self._lock:
            workers = [s.worker for s in self._slots.values() if s.worker]
        return {f"{w.namespace}/{w.pod_name}": w for w in workers if not w.exited()}

    def reconcile(self) -> None:
        """Start, restart (after back-off), stop and reap workers to follow the Running pods."""
        now = self.clock()
        wanted = {uid: pod for uid, pod in self._pods.items() if is_running(pod)}
        with self._lock:
            for uid in [u for u in self._slots if u not in wanted]:
                worker = self._slots.pop(uid).worker
                if worker is not None:
                    log.info("pod %s/%s went: stopping it", worker.namespace, worker.pod_name)
                    worker.terminate()
                    self._stopping.append((worker, now + STOP_TIMEOUT))
            for uid, pod in wanted.items():
                self._keep(self._slots.setdefault(uid, _Slot()), pod, now)
            for worker, deadline in list(self._stopping):
                if worker.exited() or now >= deadline:
                    worker.stop(0 if worker.exited() else 1.0)
                    self._stopping.remove((worker, deadline))
        self._write_state()

    def _keep(self, slot: _Slot, pod: dict[str, Any], now: float) -> None:
        name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        if slot.worker is not None and slot.worker.exited():
            tail = "\n".join(slot.worker.log_text().splitlines()[-15:])
            log.warning("the worker of pod %s exited; restarting it; its log:\n%s", name, tail)
            slot.worker.stop(0)
            slot.failed(now)
        if slot.worker is None and now >= slot.retry_at:
            try:
                slot.worker = WorkerPod(self.kube, pod, self.log_dir).start()
            except PodConfigError as exc:
                slot.failed(now)
                log.warning("pod %s: %s (trying again)", name, exc)

    def _all(self) -> list[WorkerPod]:
        return [s.worker for s in self._slots.values() if s.worker] + [w for w, _ in self._stopping]

    def _write_state(self) -> None:
        with self._lock:
            records = [w.record.to_json() for w in self._all() if w.record]
        if self.state_file is not None and records != self._written:
            processes.write_json(self.state_file, {"workers": records})
            self._written = records


# `python -m twc.local.podworkers KUBECONFIG STATE_FILE LOG_DIR`, as `twc local up` runs it
if __name__ == "__main__":  # pragma: no cover
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    kubeconfig, state, logs = sys.argv[1:]
    runner = PodWorkers(Kube(kubeconfig), state_file=Path(state), log_dir=Path(logs))
    signal.signal(signal.SIGTERM, lambda *_: runner.request_stop())
    signal.signal(signal.SIGINT, lambda *_: runner.request_stop())
    runner.run()
    runner.stop()
