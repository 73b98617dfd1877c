"""A stack left locked with pending operations by a killed run is repaired, a live lock never."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import pytest
from pulumi.automation import ConcurrentUpdateError, Deployment
from pulumi.automation._cmd import CommandResult

from tests.helpers import guarded_cli
from twc.desired import DesiredInputs
from twc.engine import engine as engine_module
from twc.engine.automation import (
    AutomationEngine,
    LockHolder,
    lock_holders,
    stale_lock,
    worker_urns_from_state,
)
from twc.engine.errors import EngineDeadlineExceeded, EngineInterrupted
from twc.engine.supervisor import CHANNEL_ENV, ENGINES_ENV, MAX_ENGINE_RECORDS
from twc.kube.lease import EngineRecord
from twc.reconcile.outcome import FailureReason, classify

LOCKED = (
    "error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) "
    "to end or delete the lock file with `pulumi cancel`.\n"
    "  file:///state/.pulumi/locks/organization/twc/s/7f.json: created by root@box-1 "
    "(pid 4242) at 2026-01-01T10:00:00Z"
)


def test_lock_holders_are_parsed_from_the_backend_error() -> None:
    assert lock_holders(LOCKED) == [LockHolder("root", "box-1", 4242)]
    assert lock_holders("[409] Conflict: Another update is currently in progress.") == []


EARLIER = EngineRecord(holder="other-daemon", host="pod-a", pids=(77, 78))
"""What the Lease records of the previous holder's engine commands."""


@pytest.mark.parametrize(
    ("holders", "alive", "previous", "stale"),
    [
        ([LockHolder("root", "box-1", 1)], False, (), True),  # same host, process gone
        ([LockHolder("root", "box-1", 1)], True, (), False),  # same host, still running
        ([LockHolder("root", "box-1", 77)], True, (EARLIER,), False),  # alive here: never
        ([LockHolder("root", "other", 1)], False, (), False),  # cannot see that host
        # The previous Lease holder's CLI, which the Lease proves gone:
        ([LockHolder("root", "pod-a", 78)], True, (EARLIER,), True),
        # The same host, but a pid the Lease never recorded (a manual `pulumi up` there):
        ([LockHolder("root", "pod-a", 99)], True, (EARLIER,), False),
        # A laptop's manual `twc up`/`pulumi up` the Lease does not record: never, even
        # while this daemon leads (it used to break any lock then).
        ([LockHolder("dev", "laptop", 78)], True, (EARLIER,), False),
        # Two locks: both must be provably gone.
        (
            [LockHolder("root", "pod-a", 77), LockHolder("dev", "laptop", 5)],
            True,
            (EARLIER,),
            False,
        ),
        ([], False, (EARLIER,), False),  # a lock naming no process is never broken
    ],
)
def test_only_a_provably_gone_holder_makes_a_lock_stale(
    holders: list[LockHolder], alive: bool, previous: tuple[EngineRecord, ...], stale: bool
) -> None:
    found = stale_lock(holders, hostname="box-1", alive=lambda _pid: alive, previous=previous)

    assert found is stale


class FakeStack:
    def __init__(self, *, locked: bool, pending: int, lock: str = LOCKED) -> None:
        self.locked = locked
        self.lock = lock
        self.cancelled = 0
        self.imported: list[dict[str, Any]] = []
        self.state: dict[str, Any] = {
            "resources": [{"urn": "urn:pulumi:s::twc::pulumi:pulumi:Stack::twc-s"}],
            "pending_operations": [
                {"type": "creating", "resource": {"urn": f"urn:pulumi:s::twc::t::r{i}"}}
                for i in range(pending)
            ],
        }

    def export_stack(self) -> Deployment:
        return Deployment(version=3, deployment=dict(self.state))

    def import_stack(self, state: Deployment) -> None:
        if self.locked:
            raise ConcurrentUpdateError(CommandResult("", self.lock, 255))
        assert state.deployment is not None
        self.state = dict(state.deployment)
        self.imported.append(self.state)

    def cancel(self) -> None:
        self.cancelled += 1
        self.locked = False


@pytest.fixture
def fake_stack(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(stack: FakeStack) -> FakeStack:
        monkeypatch.setattr(engine_module, "select_stack", lambda ref: stack)
        return stack

    return install


def _engine(tmp_path: Any, *, alive: bool) -> AutomationEngine:
    ref = engine_module.StackRef(name="s", config={"fleetFile": "f.yaml"})
    with mock.patch("socket.gethostname", return_value="box-1"):  # the locks' host
        return AutomationEngine(ref, state_dir=tmp_path, alive=lambda _p: alive)


def test_a_dead_holders_lock_is_cancelled_and_pending_operations_dropped(
    fake_stack: Any, tmp_path: Any
) -> None:
    stack = fake_stack(FakeStack(locked=True, pending=2))

    actions = _engine(tmp_path, alive=False).recover()

    assert actions == ["cancel", "drop-pending-operations:2"]
    assert stack.cancelled == 1
    assert "pending_operations" not in stack.state
    assert stack.state["resources"]  # the recorded resources are kept


def test_a_live_holders_lock_is_left_alone(fake_stack: Any, tmp_path: Any) -> None:
    stack = fake_stack(FakeStack(locked=True, pending=2))

    with pytest.raises(ConcurrentUpdateError):
        _engine(tmp_path, alive=True).recover()

    assert stack.cancelled == 0
    assert len(stack.state["pending_operations"]) == 2


def test_a_clean_stack_needs_no_recovery(fake_stack: Any, tmp_path: Any) -> None:
    stack = fake_stack(FakeStack(locked=False, pending=0))

    assert _engine(tmp_path, alive=False).recover() == []
    assert stack.imported == []


def test_an_up_hitting_a_stale_lock_repairs_the_stack_and_retries_once(
    fake_stack: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = fake_stack(FakeStack(locked=True, pending=1))
    calls: list[dict[str, Any]] = []

    class Summary:
        resource_changes: ClassVar[dict[str, int]] = {"same": 3, "create": 1}

    class Result:  # shaped like pulumi's UpResult
        summary = Summary

    def fake_up(ref: Any, **kwargs: Any) -> Any:
        calls.append({"env": dict(ref.env), **kwargs})
        if stack.locked:
            raise ConcurrentUpdateError(CommandResult("", LOCKED, 255))
        return Result()

    monkeypatch.setattr(engine_module, "up", fake_up)
    eng = _engine(tmp_path, alive=False)

    report = eng.up(DesiredInputs(replicas={"team/a": 3}), None)

    assert len(calls) == 2
    assert stack.cancelled == 1
    assert report.changes == {"same": 3, "create": 1}
    assert report.recoveries == ("cancel", "drop-pending-operations:1")
    assert calls[1]["env"]["TWC_DESIRED_INPUTS"] == str(eng.inputs_file)
    # Objects the killed run created belong to a field manager that died with it.
    assert calls[1]["env"]["PULUMI_K8S_ENABLE_PATCH_FORCE"] == "true"
    assert DesiredInputs.from_file(eng.inputs_file).replicas == {"team/a": 3}


def test_worker_urns_include_every_descendant_of_the_worker_component() -> None:
    stack = "urn:pulumi:s::twc::pulumi:pulumi:Stack::twc-s"
    queue = "urn:pulumi:s::twc::twc:kmsvc:Queue::team/orders"
    worker = "urn:pulumi:s::twc::twc:kmsvc:Queue$twc:temporal:TemporalWorker::team/worker-orders"
    dep = (
        f"{worker.rsplit('::', 1)[0]}$kubernetes:apps/v1:Deployment::team/worker-orders-deployment"
    )
    other = "urn:pulumi:s::twc::twc:temporal:TemporalWorker::team/worker-orders-2"
    resources = [
        {"urn": stack, "type": "pulumi:pulumi:Stack"},
        {"urn": queue, "type": "twc:kmsvc:Queue", "parent": stack},
        {"urn": worker, "type": "twc:temporal:TemporalWorker", "parent": queue},
        {"urn": dep, "type": "kubernetes:apps/v1:Deployment", "parent": worker},
        {"urn": other, "type": "twc:temporal:TemporalWorker", "parent": stack},
    ]

    urns = worker_urns_from_state(resources)

    assert urns == {"team/worker-orders": [worker, dep], "team/worker-orders-2": [other]}


def test_every_engine_operation_runs_under_the_hold_with_a_deadline_and_the_guard(
    fake_stack: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_stack(FakeStack(locked=False, pending=0))
    held: list[str] = []
    seen: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def hold() -> Iterator[None]:
        held.append("enter")
        try:
            yield
        finally:
            held.append("exit")

    eng = AutomationEngine(
        engine_module.StackRef(name="s"), state_dir=tmp_path, hold=hold, deadline=42.0
    )

    def fake_up(ref: Any, **kwargs: Any) -> Any:
        seen.append({"env": dict(ref.env), "control": eng.channel.control})
        raise RuntimeError("the engine failed on its own")

    monkeypatch.setattr(engine_module, "up", fake_up)

    with pytest.raises(RuntimeError, match="on its own"):
        eng.up(DesiredInputs(), None)

    assert held == ["enter", "exit"]
    assert seen[0]["env"][CHANNEL_ENV] == str(eng.channel.directory)
    assert seen[0]["control"].run_seconds == 42.0
    assert eng.channel.control.run_until is None  # the deadline ends with the operation


@pytest.mark.parametrize(
    ("cause", "error", "reason"),
    [
        ("deadline", EngineDeadlineExceeded, FailureReason.ENGINE_DEADLINE),
        ("lease", EngineInterrupted, FailureReason.ENGINE_INTERRUPTED),
    ],
)
def test_a_run_the_guard_stopped_reports_why_instead_of_the_engines_error(
    fake_stack: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    cause: str,
    error: type[Exception],
    reason: FailureReason,
) -> None:
    fake_stack(FakeStack(locked=False, pending=0))
    eng = AutomationEngine(engine_module.StackRef(name="s"), state_dir=tmp_path)

    def interrupted_up(ref: Any, **kwargs: Any) -> Any:
        entry = {
            "pid": 4242,
            "guard": 4241,
            "command": ["up"],
            "started": time.time(),
            "ended": time.time(),
            "code": 130,
            "interrupted": f"stopped: {cause}",
            "cause": cause,
        }
        (eng.channel.directory / "journal" / "4242.json").write_text(json.dumps(entry))
        raise RuntimeError("code: 130 stdout: ... stderr: context canceled")

    monkeypatch.setattr(engine_module, "up", interrupted_up)

    with pytest.raises(error, match=f"stopped: {cause}") as raised:
        eng.up(DesiredInputs(), None)

    assert classify(raised.value).reason is reason


# ------------------------------------------ a lock naming this host: whose process is it
FAILING_CLI = f"""#!{sys.executable}
import os, sys
open(sys.argv[1], "w").write(str(os.getpid()))
sys.exit(3)
"""


def _lock_here(pid: int) -> str:
    return LOCKED.replace("root@box-1 (pid 4242)", f"root@{socket.gethostname()} (pid {pid})")


@pytest.fixture
def engines_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "engines"
    monkeypatch.setenv(ENGINES_ENV, str(where))
    return where


def _killed_run(tmp_path: Path) -> int:
    """A CLI under the guard that ended leaving its lock (a failed run): its pid."""
    marker = tmp_path / "cli.pid"
    wrapper = guarded_cli(tmp_path, FAILING_CLI)
    done = subprocess.run([str(wrapper), str(marker)], capture_output=True, timeout=60, check=False)
    assert done.returncode == 3
    return int(marker.read_text())


def _default_engine(tmp_path: Path) -> AutomationEngine:
    # This host's name and the real judgement of its processes.
    ref = engine_module.StackRef(name="s", config={"fleetFile": "f.yaml"})
    return AutomationEngine(ref, state_dir=tmp_path / "state")


@pytest.mark.usefixtures("engines_dir")
def test_the_lock_of_a_guarded_cli_that_is_gone_is_broken(fake_stack: Any, tmp_path: Path) -> None:
    pid = _killed_run(tmp_path)
    stack = fake_stack(FakeStack(locked=True, pending=1, lock=_lock_here(pid)))

    assert _default_engine(tmp_path).recover() == ["cancel", "drop-pending-operations:1"]
    assert stack.cancelled == 1


@pytest.mark.usefixtures("engines_dir")
def test_a_guard_records_its_cli_while_other_records_vanish_and_keeps_the_newest(
    fake_stack: Any, tmp_path: Path, engines_dir: Path
) -> None:
    # Full of this boot's older records, one of which another guard removes while this
    # guard lists them (a record that is listed but cannot be read).
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    engines_dir.mkdir(mode=0o700)
    for n in range(MAX_ENGINE_RECORDS + 10):
        old = engines_dir / f"{boot}-{10_000_000 + n}.json"
        old.write_text("{}")
        os.utime(old, ns=(n, n))
    (engines_dir / f"{boot}-vanishing.json").symlink_to(engines_dir / "gone")

    pid = _killed_run(tmp_path)
    stack = fake_stack(FakeStack(locked=True, pending=1, lock=_lock_here(pid)))

    assert _default_engine(tmp_path).recover() == ["cancel", "drop-pending-operations:1"]
    assert stack.cancelled == 1
    kept = {p.name for p in engines_dir.glob("*.json") if p.exists()}
    assert len(kept) == MAX_ENGINE_RECORDS
    assert f"{boot}-{pid}.json" in kept
    assert f"{boot}-{10_000_000 + MAX_ENGINE_RECORDS + 9}.json" in kept
    assert f"{boot}-10000000.json" not in kept


def test_a_lock_naming_this_hosts_name_and_a_dead_pid_no_guard_here_ran_is_kept(
    fake_stack: Any, tmp_path: Path
) -> None:
    # Another machine with the same host name (or a plain `pulumi up`): its pid means
    # nothing here, dead or not.
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    stack = fake_stack(FakeStack(locked=True, pending=1, lock=_lock_here(int(gone.stdout))))

    with pytest.raises(ConcurrentUpdateError):
        _default_engine(tmp_path).recover()
    assert stack.cancelled == 0


def test_a_lock_whose_pid_now_belongs_to_another_process_is_broken(
    fake_stack: Any, tmp_path: Path, engines_dir: Path
) -> None:
    # The guard recorded the CLI (boot id, pid, start time); the pid was reused since:
    # here, by this very process, which started at another time.
    pid = _killed_run(tmp_path)
    [record] = engines_dir.glob(f"*-{pid}.json")
    data = json.loads(record.read_text())
    reused = record.with_name(record.name.replace(f"-{pid}.json", f"-{os.getpid()}.json"))
    reused.write_text(json.dumps({**data, "pid": os.getpid()}))
    stack = fake_stack(FakeStack(locked=True, pending=1, lock=_lock_here(os.getpid())))

    assert _default_engine(tmp_path).recover() == ["cancel", "drop-pending-operations:1"]
    assert stack.cancelled == 1


def test_a_lock_recorded_on_another_boot_is_kept(
    fake_stack: Any, tmp_path: Path, engines_dir: Path
) -> None:
    # Same host name and a recorded pid, but another boot id: another machine's record
    # (or this one's before a reboot): nothing proves the process gone.
    pid = _killed_run(tmp_path)
    [record] = engines_dir.glob(f"*-{pid}.json")
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "boot": "00000000-0000-0000-0000-000000000000"}))
    stack = fake_stack(FakeStack(locked=True, pending=1, lock=_lock_here(pid)))

    with pytest.raises(ConcurrentUpdateError):
        _default_engine(tmp_path).recover()
    assert stack.cancelled == 0
