"""One real worker process per Running pod: the part of a kubelet that KWOK does not play.

KWOK makes the pods on its simulated nodes Running and Ready but runs nothing. With
``twc local up --run-workers`` this process watches the pods carrying twc's labels
(every worker and DLQ processor pod, whichever Deployment or StatefulSet owns it) and
keeps exactly one worker process (``twc.local.workerpod``) for each pod that is Running:
a new pod gets one, a pod that is deleted or stops Running loses its one, and a worker
that exits while its pod runs is started again with a growing back-off, as a kubelet
restarts a container. So when the Deployment controller scales or rolls a worker, the
pollers Temporal sees move with the pods.

Every worker process runs in a session of its own and is listed, with its pid and start
time, in a state file (``pod-workers.json``) rewritten on each change: ``twc local down``
stops the ones still running even if this process itself died (``stop_recorded``).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twc.local import processes
from twc.local.kube import Kube
from twc.local.processes import ProcessRecord
from twc.local.workerpod import PodConfigError, WorkerPod, is_running

log = logging.getLogger(__name__)

WORKER_SELECTOR = "app.kubernetes.io/managed-by=twc"
"""Pods twc builds (worker and DLQ processor pods) carry this label."""
STOP_TIMEOUT = 15.0
"""Seconds a worker gets to stop after SIGTERM before it is killed."""


@dataclass
class _Slot:
    """One Running pod and its worker process (None between a crash and its restart)."""

    pod: dict[str, Any]
    worker: WorkerPod | None = None
    failures: int = 0
    retry_at: float = 0.0


class PodWorkers:
    """Watches pods and keeps one worker process per Running one."""

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
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._listed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._written = False

    # ------------------------------------------------------------ lifecycle
    def start(self) -> PodWorkers:
        """Watch and reconcile in background threads until :meth:`stop`."""
        for target, name in ((self._watch, "pod-watch"), (self._loop, "pod-workers")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def run(self) -> None:
        """Watch and reconcile in this thread until :meth:`request_stop`, then stop."""
        watcher = threading.Thread(target=self._watch, name="pod-watch", daemon=True)
        watcher.start()
        self._threads.append(watcher)
        try:
            self._loop()
        finally:
            self.stop()

    def request_stop(self) -> None:
        self._stop.set()
        self._changed.set()

    def stop(self) -> None:
        """Stop watching and stop every worker process (all asked at once, then awaited)."""
        self.request_stop()
        for thread in self._threads:
            thread.join(timeout=10)
        with self._lock:
            workers = [s.worker for s in self._slots.values() if s.worker]
            workers += [w for w, _ in self._stopping]
            self._slots.clear()
            self._stopping.clear()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.stop(STOP_TIMEOUT)
        self._write_state([])

    def wait_listed(self, timeout: float) -> bool:
        """True once the first pod list arrived (the watch reached the API server)."""
        return self._listed.wait(timeout)

    def workers(self) -> dict[str, WorkerPod]:
        """``{namespace/pod: worker}`` for every pod whose worker process runs now."""
        with self._lock:
            return {
                f"{w.namespace}/{w.pod_name}": w
                for w in (s.worker for s in self._slots.values())
                if w is not None and not w.exited()
            }

    # -------------------------------------------------------------- watching
    def _list(self) -> tuple[dict[str, dict[str, Any]], str]:
        if self.namespace:
            response = self.kube.core.list_namespaced_pod(
                self.namespace, label_selector=self.selector, _preload_content=False
            )
        else:
            response = self.kube.core.list_pod_for_all_namespaces(
                label_selector=self.selector, _preload_content=False
            )
        body = json.loads(response.data)
        pods = {p["metadata"]["uid"]: p for p in body.get("items") or []}
        return pods, str(body["metadata"]["resourceVersion"])

    def _watch(self) -> None:
        """List, then follow the watch from that version; list again after any error
        (an expired version, a restarted API server)."""
        while not self._stop.is_set():
            try:
                pods, version = self._list()
                with self._lock:
                    self._pods = pods
                self._listed.set()
                self._changed.set()
                while not self._stop.is_set():
                    for event in self._events(version):
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
                        version = obj["metadata"].get("resourceVersion", version)
                        if event["type"] == "BOOKMARK":
                            continue
                        uid = obj["metadata"]["uid"]
                        with self._lock:
                            if event["type"] == "DELETED":
                                self._pods.pop(uid, None)
                            else:
                                self._pods[uid] = obj
                        self._changed.set()
                        if self._stop.is_set():
                            return
            except Exception as exc:  # noqa: BLE001 - an expired version or an API server away ends the watch: list again
                log.info("pod watch ended (%s); listing again", exc)
                self._stop.wait(1.0)

    def _events(self, version: str) -> Iterator[dict[str, Any]]:
        """One watch request's events, read from the response as the API server streams
        them (one JSON object per line); it ends after at most 30 s."""
        options: dict[str, Any] = {
            "label_selector": self.selector,
            "resource_version": version,
            "watch": True,
            "allow_watch_bookmarks": True,
            "timeout_seconds": 30,
            # Silence past the server's own timeout means a hung server.
            "_request_timeout": (5.0, 60.0),
            "_preload_content": False,
        }
        if self.namespace:
            response = self.kube.core.list_namespaced_pod(self.namespace, **options)
        else:
            response = self.kube.core.list_pod_for_all_namespaces(**options)
        try:
            pending = b""
            for chunk in response.stream(amt=None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
        finally:
            response.release_conn()

    # ------------------------------------------------------------ reconciling
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._changed.wait(1.0)  # a pod event, or a second for restarts and reaping
            self._changed.clear()
            if self._stop.is_set():
                return
            if not self._listed.is_set():
                continue
            try:
                self.reconcile()
            except Exception:
                log.exception("reconciling the pod workers failed; trying again")

    def reconcile(self) -> None:
        """Start a worker for each Running pod without one, stop those of pods that
        went, restart crashed ones when their back-off is over, reap stopped ones."""
        now = self.clock()
        with self._lock:
            wanted = {uid: pod for uid, pod in self._pods.items() if is_running(pod)}
        changed = False
        for uid in [u for u in self._slots if u not in wanted]:
            slot = self._slots.pop(uid)
            if slot.worker is not None:
                log.info("pod %s is gone or not Running: stopping its worker", _name(slot.pod))
                slot.worker.terminate()
                self._stopping.append((slot.worker, now + STOP_TIMEOUT))
            changed = True
        for uid, pod in wanted.items():
            slot = self._slots.setdefault(uid, _Slot(pod))
            slot.pod = pod
            if slot.worker is not None and slot.worker.exited():
                slot.failures += 1
                slot.retry_at = now + min(30.0, 2.0 ** (slot.failures - 1))
                log.warning(
                    "the worker of pod %s exited (%s); restarting it in %.0f s; its log:\n%s",
                    _name(pod),
                    slot.worker.proc.returncode if slot.worker.proc else "?",
                    slot.retry_at - now,
                    _tail(slot.worker),
                )
                slot.worker.stop(0)
                slot.worker = None
                changed = True
            if slot.worker is None and now >= slot.retry_at:
                try:
                    slot.worker = WorkerPod(self.kube, pod, self.log_dir).start()
                    log.info("pod %s: worker started (pid %d)", _name(pod), slot.worker.proc.pid)  # type: ignore[union-attr]
                    changed = True
                except PodConfigError as exc:
                    slot.failures += 1
                    slot.retry_at = now + min(30.0, 2.0 ** (slot.failures - 1))
                    log.warning("pod %s: %s (trying again)", _name(pod), exc)
        for worker, deadline in list(self._stopping):
            if worker.exited() or now >= deadline:
                worker.stop(0 if worker.exited() else 1.0)
                self._stopping.remove((worker, deadline))
                changed = True
        if changed or not self._written:
            records = [
                s.worker.record for s in self._slots.values() if s.worker and s.worker.record
            ]
            records += [w.record for w, _ in self._stopping if w.record]
            self._write_state(records)

    def _write_state(self, records: list[ProcessRecord]) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"workers": [r.to_json() for r in records]}, indent=2))
        tmp.replace(self.state_file)
        self._written = True


def recorded(state_file: Path) -> list[ProcessRecord]:
    """The worker processes a state file lists (empty when there is none)."""
    try:
        data = json.loads(state_file.read_text())
    except FileNotFoundError:
        return []
    return [ProcessRecord.from_json(r) for r in data.get("workers") or []]


def stop_recorded(state_file: Path) -> int:
    """Stop every listed worker process that still runs (by pid and start time), then
    remove the file; returns how many were stopped."""
    stopped = sum(1 for rec in recorded(state_file) if processes.stop(rec))
    state_file.unlink(missing_ok=True)
    return stopped


def _name(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _tail(worker: WorkerPod, lines: int = 15) -> str:
    try:
        return "\n".join(worker.log_text().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - run by `twc local up`
    """Run the pod workers against a kubeconfig until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m twc.local.podworkers")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-file", required=True, type=Path)
    parser.add_argument("--log-dir", required=True, type=Path)
    parser.add_argument("--selector", default=WORKER_SELECTOR)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    runner = PodWorkers(
        Kube(args.kubeconfig),
        selector=args.selector,
        state_file=args.state_file,
        log_dir=args.log_dir,
    )
    signal.signal(signal.SIGTERM, lambda *_: runner.request_stop())
    signal.signal(signal.SIGINT, lambda *_: runner.request_stop())
    runner.run()


if __name__ == "__main__":  # pragma: no cover
    main()
