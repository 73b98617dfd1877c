"""A manual ``twc up`` while the daemon applies the stack, and a lock the Lease does not
account for: one writer at a time, and no one's lock broken while they may still run.

* ``twc up`` during the daemon's ``up`` takes part in the daemon's Lease (the stack's
  ``daemonLease`` output names it): it says it waits, the daemon hands the Lease over
  when its step is done, the manual run applies, releases, and the daemon takes the
  Lease back. The daemon never breaks the manual run's lock.
* A lock left by a process on another host that the Lease does not record (a laptop's
  plain ``pulumi up``) is never broken, not even by the leader: the daemon waits
  (``ConcurrentUpdate``) until it is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import (
    FAST,
    ROOT,
    Daemons,
    eventually,
    wait_for_success,
    wait_until_settled,
)
from tests.faults._checks import assert_converged, assert_updates_never_overlap, lock_files
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

LEASE = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}
SETTINGS = {**FAST, "leader_election": LEASE, "engine": {"interrupt_grace": 0.5}}


def test_a_manual_up_waits_for_the_daemons_step_and_a_foreign_lock_is_never_broken(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    host_port = local_env.temporal_address()
    fs = daemons.stack(fleet_doc(namespace, host_port=host_port), waitForPollersSeconds="20")
    args = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", "twc-faults"]
    daemon = daemons.start(fs, settings=SETTINGS, args=args)
    wait_for_success(daemon, timeout=120)
    wait_until_settled(daemon)
    assert fs.stack().outputs()["daemonLease"].value == f"{namespace}/twc-faults"

    # The daemon's up adding alpha waits for pollers; a manual up arrives meanwhile.
    alpha = {"name": "alpha", "namespace": namespace, "taskQueueName": task_queue}
    fs.write(fleet_doc(namespace, host_port=host_port, workers=[alpha]))
    eventually(
        lambda: daemon.value("twc_engine_in_progress") == 1,
        timeout=60,
        message="the daemon never started its up",
    )
    asked = time.monotonic()
    command = ["-m", "twc", "up", "--stack", fs.name, "--fleet-file", str(fs.fleet_file)]
    manual = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env={**os.environ, **fs.env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    manual_took = time.monotonic() - asked
    assert manual.returncode == 0, manual.stderr[-3000:]
    assert "waiting up to" in manual.stderr
    assert "holding the stack's Lease" in manual.stderr
    text = daemon.text()
    assert "handed lease" in text, text[-3000:]
    assert "over to manual:" in text, text[-3000:]
    # The daemon took the Lease back and found nothing to repair: no lock was broken.
    eventually(lambda: daemon.value("twc_leader") == 1, timeout=60, message="never led again")
    wait_until_settled(daemon)
    assert daemon.count("twc_stack_recoveries_total", action="cancel") == 0
    history = assert_updates_never_overlap(fs, daemon)
    assert [u.result for u in history][-2:] == ["succeeded", "succeeded"]
    ups = daemon.ups()

    # A laptop's lock the Lease knows nothing of: the leader waits, however long.
    lock_dir = lock_files_dir(fs)
    foreign = lock_dir / "laptop-lock.json"
    foreign.write_text(
        json.dumps(
            {
                "pid": 4242,
                "username": "dev",
                "hostname": "laptop-of-dev",
                "timestamp": "2026-01-01T10:00:00Z",
            }
        )
    )
    beta = {"name": "beta", "namespace": namespace, "taskQueueName": f"{task_queue}-b"}
    fs.write(fleet_doc(namespace, host_port=host_port, workers=[alpha, beta]))
    eventually(
        lambda: daemon.count("twc_reconcile_errors_total", reason="ConcurrentUpdate") >= 2,
        timeout=120,
        message="the daemon never met the foreign lock",
    )
    assert foreign.exists()
    assert "not provably gone" in daemon.text()
    assert daemon.count("twc_stack_recoveries_total", action="cancel") == 0
    foreign.unlink()  # the laptop's run ended
    eventually(lambda: kube.get_deployment(namespace, "beta"), timeout=120, message="no beta")
    wait_until_settled(daemon)
    assert daemon.ups() > ups
    assert_updates_never_overlap(fs, daemon)
    assert_converged(kube, daemon, fs, namespace, {"alpha", "beta"}, adopted_worker="beta")
    assert not lock_files(fs)
    print(
        f"manual twc up during the daemon's up: waited for the daemon's step and applied, "
        f"{manual_took:.1f} s in all; the daemon led again afterwards; a foreign lock held "
        "the daemon off until removed"
    )


def lock_files_dir(fs: Any) -> Path:
    """Where the backend keeps the stack's locks (created if no lock was ever taken)."""
    backend = Path(fs.env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    found = list((backend / ".pulumi" / "locks").rglob(fs.name))
    locks = backend / ".pulumi" / "locks"
    directory = found[0] if found else locks / "organization" / "twc" / fs.name
    directory.mkdir(parents=True, exist_ok=True)
    return directory
