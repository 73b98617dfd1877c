"""A lock naming this host's name is judged by the process that took it (boot id, pid and
start time, as the engine guard recorded it), never by the host name alone.

* A lock naming this host's name and a pid that no guard of this boot recorded (another
  machine with the same name, a plain ``pulumi up``) is kept, though no such pid runs
  here: the daemon waits.
* A lock whose recorded process is gone is broken, even though its pid now belongs to
  another process (started at another time): the daemon repairs the stack and applies.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from tests.faults._checks import lock_files
from tests.faults.test_manual_up_during_the_daemons_up import lock_files_dir
from twc.engine.supervisor import ENGINES_ENV
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e


def _lock(directory: Path, pid: int) -> Path:
    lock = directory / "same-name-lock.json"
    lock.write_text(
        json.dumps(
            {
                "pid": pid,
                "username": "dev",
                "hostname": socket.gethostname(),
                "timestamp": "2026-01-01T10:00:00Z",
            }
        )
    )
    return lock


@pytest.fixture
def engines_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The guards' identity records, private to this test (the daemons inherit it)."""
    where = tmp_path / "engines"
    where.mkdir(mode=0o700)
    monkeypatch.setenv(ENGINES_ENV, str(where))
    return where


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_lock_naming_this_hosts_name_is_judged_by_boot_id_pid_and_start_time(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    engines_dir: Path,
    other_process: subprocess.Popen[bytes],
) -> None:
    solo = {"name": "solo", "namespace": namespace, "taskQueueName": task_queue}
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[solo]))
    fs.stack()  # the stack exists; its lock is what the daemon meets
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    lock = _lock(lock_files_dir(fs), int(gone.stdout))

    daemon = daemons.start(fs)
    eventually(
        lambda: daemon.count("twc_reconcile_errors_total", reason="ConcurrentUpdate") >= 2,
        timeout=120,
        message="the daemon never met the lock",
    )
    # No such pid runs here, but nothing says the lock was taken here: it is kept.
    assert lock.exists()
    assert daemon.count("twc_stack_recoveries_total", action="cancel") == 0

    # Now a lock this boot's guard recorded, whose pid another process holds since.
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    started = int(Path(f"/proc/{other_process.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    record = {"boot": boot, "pid": other_process.pid, "start": started - 1}
    (engines_dir / f"{boot}-{other_process.pid}.json").write_text(json.dumps(record))
    lock.unlink()
    _lock(lock_files_dir(fs), other_process.pid)

    wait_for_success(daemon, timeout=120)
    assert daemon.count("twc_stack_recoveries_total", action="cancel") == 1
    assert other_process.poll() is None  # the process that reused the pid is untouched
    assert kube.get_deployment(namespace, "solo") is not None
    assert not lock_files(fs)
