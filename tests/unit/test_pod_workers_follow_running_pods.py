"""The pod runner keeps exactly one worker process per Running pod.

Fast checks of ``PodWorkers.reconcile`` with the worker processes faked (the real ones,
on real pods of the real controllers, are in tests/e2e): a Running pod gets a worker, a
pod that goes loses it (asked to stop at once, reaped once it exited), a crashed worker
is restarted after a growing back-off, a pod that cannot be configured yet is tried
again, and the state file always lists the processes that run.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from twc.local import podworkers
from twc.local.processes import ProcessRecord
from twc.local.workerpod import PodConfigError

PIDS = itertools.count(1000)


class FakeWorker:
    fail_next: ClassVar[list[Exception]] = []
    made: ClassVar[list[FakeWorker]] = []

    def __init__(self, kube: Any, pod: dict[str, Any], log_dir: Path | None = None) -> None:
        self.pod_name = pod["metadata"]["name"]
        self.namespace = pod["metadata"]["namespace"]
        self.terminated = self.stopped = self.dead = False
        self.proc: Any = None
        self.record: ProcessRecord | None = None

    def start(self) -> FakeWorker:
        if FakeWorker.fail_next:
            raise FakeWorker.fail_next.pop(0)
        pid = next(PIDS)
        self.record = ProcessRecord(f"pod {self.namespace}/{self.pod_name}", pid, 1, (), "")
        self.proc = type("P", (), {"pid": pid, "returncode": 1})()
        FakeWorker.made.append(self)
        return self

    def exited(self) -> bool:
        return self.dead

    def terminate(self) -> None:
        self.terminated = True

    def stop(self, timeout: float = 15.0) -> None:
        self.stopped = True

    def log_text(self) -> str:
        return "boom"


@pytest.fixture
def clock() -> list[float]:
    return [100.0]


@pytest.fixture
def runner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, clock: list[float]
) -> podworkers.PodWorkers:
    FakeWorker.made, FakeWorker.fail_next = [], []
    monkeypatch.setattr(podworkers, "WorkerPod", FakeWorker)
    return podworkers.PodWorkers(
        object(),  # type: ignore[arg-type]  # the fake workers never call the API
        state_file=tmp_path / "pod-workers.json",
        clock=lambda: clock[0],
    )


def _pod(name: str, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "apps", "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "twc-node-0"}, "status": {"phase": phase}}


def _see(runner: podworkers.PodWorkers, *pods: dict[str, Any]) -> None:
    runner._pods = {p["metadata"]["uid"]: p for p in pods}
    runner.reconcile()


def _listed(runner: podworkers.PodWorkers) -> list[str]:
    assert runner.state_file is not None
    data = json.loads(runner.state_file.read_text())
    return sorted(r["name"] for r in data["workers"])


def test_one_worker_per_running_pod_and_none_for_pending_or_deleting_ones(
    runner: podworkers.PodWorkers, clock: list[float]
) -> None:
    _see(runner, _pod("a"), _pod("b"), _pod("c", phase="Pending"), _pod("d", deleting=True))
    assert sorted(runner.workers()) == ["apps/a", "apps/b"]
    assert _listed(runner) == ["pod apps/a", "pod apps/b"]

    # The same pods again: nothing new starts.
    _see(runner, _pod("a"), _pod("b"))
    assert len(FakeWorker.made) == 2


def test_a_pod_that_goes_has_its_worker_stopped_and_reaped(
    runner: podworkers.PodWorkers, clock: list[float]
) -> None:
    _see(runner, _pod("a"), _pod("b"))
    a = next(w for w in FakeWorker.made if w.pod_name == "a")
    _see(runner, _pod("b"), _pod("a", deleting=True))
    assert a.terminated
    assert not a.stopped
    assert sorted(runner.workers()) == ["apps/b"]
    # Still listed while it stops: `twc local down` must find it if this process dies.
    assert _listed(runner) == ["pod apps/a", "pod apps/b"]

    a.dead = True
    _see(runner, _pod("b"))
    assert a.stopped
    assert _listed(runner) == ["pod apps/b"]


def test_a_worker_that_does_not_stop_in_time_is_killed(
    runner: podworkers.PodWorkers, clock: list[float]
) -> None:
    _see(runner, _pod("a"))
    (a,) = FakeWorker.made
    _see(runner)
    assert a.terminated
    assert not a.stopped
    clock[0] += podworkers.STOP_TIMEOUT + 1
    _see(runner)
    assert a.stopped
    assert _listed(runner) == []


def test_a_crashed_worker_is_restarted_after_a_growing_back_off(
    runner: podworkers.PodWorkers, clock: list[float]
) -> None:
    _see(runner, _pod("a"))
    FakeWorker.made[-1].dead = True
    _see(runner, _pod("a"))
    assert len(FakeWorker.made) == 1
    assert runner.workers() == {}
    clock[0] += 1.0
    _see(runner, _pod("a"))
    assert len(FakeWorker.made) == 2  # after 1 s

    FakeWorker.made[-1].dead = True
    _see(runner, _pod("a"))
    clock[0] += 1.0
    _see(runner, _pod("a"))
    assert len(FakeWorker.made) == 2  # the second crash waits 2 s
    clock[0] += 1.0
    _see(runner, _pod("a"))
    assert len(FakeWorker.made) == 3


def test_a_pod_that_cannot_be_configured_yet_is_tried_again(
    runner: podworkers.PodWorkers, clock: list[float]
) -> None:
    FakeWorker.fail_next = [PodConfigError("secret mtls not found")]
    _see(runner, _pod("a"))
    assert runner.workers() == {}
    clock[0] += 1.0
    _see(runner, _pod("a"))
    assert sorted(runner.workers()) == ["apps/a"]


def test_stop_records_nothing_left(runner: podworkers.PodWorkers, clock: list[float]) -> None:
    _see(runner, _pod("a"), _pod("b"))
    runner.stop()
    assert all(w.terminated and w.stopped for w in FakeWorker.made)
    assert _listed(runner) == []
