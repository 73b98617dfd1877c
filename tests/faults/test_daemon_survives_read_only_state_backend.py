"""The state backend's directory turns read-only under a running daemon.

How it is injected: the tests run as root, and root ignores permission bits through
``CAP_DAC_OVERRIDE``. The daemon is started under ``setpriv`` with that capability (and
``CAP_DAC_READ_SEARCH``) dropped from its bounding set, so the daemon, its Pulumi CLI
and plugins are still uid 0 and own every file they used before, but a directory of the
backend chmodded to 0555 refuses them like any other user: ``permission denied``, as
on a read-only volume. The test process keeps every capability, so it can inspect and
restore the backend at any time. (``chattr +i`` would also work on this ext4 disk but
not on tmpfs or overlayfs; a read-only bind mount needs a mount namespace per daemon.)

Twice: read-only while idle, then a change arrives (the ``up`` cannot even lock the
stack, while the new worker's objects, applied ahead of the engine, are already in the
cluster and listed under ``earlyApplied`` on ``/status``); and read-only in the middle
of an ``up`` that has created a Deployment in the cluster but not yet recorded it (the
engine's checkpoint write then fails, and the lock cannot be removed). Each time the
loop survives, reports ``StateBackendUnwritable`` (status, metric, log with the
engine's reason and no secret), backs off instead of spinning, and once the directory
is writable converges: the stale lock is broken, the pending operation dropped and the
Deployment adopted, never created twice.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_tools
from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import (
    DaemonProcess,
    Daemons,
    eventually,
    wait_for_success,
    wait_until_settled,
)
from tests.faults._checks import assert_converged, fault_state
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

FAULT = "StateBackendUnwritable"
DROP_DAC = "-dac_override,-dac_read_search"
WRAPPER = ["setpriv", "--bounding-set", DROP_DAC, "--inh-caps", DROP_DAC, "--"]
# The backoff schedule: 1, 2, 4, 8, 8... seconds, each spread by a tenth either way and
# never above the cap.
SETTINGS: dict[str, Any] = {
    "reconcile_interval": 1.0,
    "refresh_interval": 3600.0,
    "backoff": {"base": 1.0, "max_delay": 8.0, "concurrent_update_delay": 2.0},
}
_RETRY = re.compile(rf"reconcile failed \({FAULT}, attempt (\d+)\), retrying in ([0-9.]+) s")


def _writable(backend: Path, writable: bool) -> None:
    for path in [backend, *backend.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755 if writable else 0o555)


def _retries(daemon: DaemonProcess, since: int) -> list[tuple[int, float]]:
    """(attempt, delay) of each logged StateBackendUnwritable failure after ``since``."""
    return [(int(a), float(d)) for a, d in _RETRY.findall(daemon.text()[since:])]


def _fails_and_backs_off(daemon: DaemonProcess, since: int, secret: str) -> float:
    """The fault is reported everywhere and retried on the backoff schedule."""
    started = time.monotonic()
    found = eventually(
        lambda: fault_state(daemon, FAULT),
        timeout=120,
        message="the read-only backend was never reported on /status",
    )
    reported = time.monotonic() - started
    assert found["sources"] == ["engine"], found
    assert "permission denied" in found["message"], found
    assert daemon.value("twc_fault_active", fault=FAULT) == 1
    assert daemon.count("twc_reconcile_errors_total", reason=FAULT) >= 1
    # Backing off, not spinning: wait for the capped delay, then check the schedule.
    eventually(
        lambda: any(d >= 8.0 * 0.9 for _, d in _retries(daemon, since)),
        timeout=90,
        message="the retries never reached the maximum backoff",
    )
    retries = _retries(daemon, since)
    for attempt, delay in retries:
        scheduled = min(8.0, 2.0 ** (attempt - 1))
        assert scheduled * 0.9 <= delay <= min(8.0, scheduled * 1.1), retries
    assert daemon.alive()
    assert daemon.probe("/healthz") == 200
    assert daemon.probe("/readyz") == 503
    log = daemon.text()[since:]
    assert f"fault {FAULT}:" in log
    assert "permission denied" in log
    assert secret not in daemon.text()
    return reported


def test_a_read_only_state_backend_is_reported_backed_off_and_converges_without_duplicates(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    require_tools("setpriv")
    backend = local_env.backend_dir
    secret = local_env.passphrase_file.read_text().strip()
    address = local_env.temporal_address()
    workers = [{"name": "alpha", "namespace": namespace, "taskQueueName": task_queue}]
    fs = daemons.stack(fleet_doc(namespace, host_port=address, workers=workers))
    daemon = daemons.start(fs, settings=SETTINGS, wrapper=WRAPPER)
    wait_for_success(daemon, timeout=120)
    wait_until_settled(daemon)

    # 1. Read-only while idle; then a change arrives: the up cannot lock the stack.
    _writable(backend, False)
    since = len(daemon.text())
    workers.append({"name": "beta", "namespace": namespace, "taskQueueName": f"{task_queue}-b"})
    fs.write(fleet_doc(namespace, host_port=address, workers=workers))
    reported_idle = _fails_and_backs_off(daemon, since, secret)
    # The daemon applied beta's objects ahead of the engine (early apply): they are in
    # the cluster but in no state, and /status says so until an up adopts them.
    assert kube.get_deployment(namespace, "beta") is not None
    assert daemon.status()["earlyApplied"] == [
        f"Deployment {namespace}/beta",
        f"ServiceAccount {namespace}/beta",
    ]

    restored = time.monotonic()
    _writable(backend, True)
    eventually(
        lambda: fault_state(daemon, FAULT) is None,
        timeout=60,
        message="the fault never cleared once the backend was writable",
    )
    cleared_idle = time.monotonic() - restored
    assert f"fault {FAULT} cleared after" in daemon.text()
    wait_until_settled(daemon)
    assert_converged(kube, daemon, fs, namespace, {"alpha", "beta"}, adopted_worker="beta")

    # 2. Read-only in the middle of an up, between a Deployment's creation in the
    # cluster and its checkpoint. With kube-scheduler stopped the new Deployment's pod
    # stays Pending, so it never becomes available and the provider keeps waiting on it.
    local_env.stop_component("kube-scheduler")
    workers.append({"name": "gamma", "namespace": namespace, "taskQueueName": f"{task_queue}-c"})
    fs.write(fleet_doc(namespace, host_port=address, workers=workers))

    def created_not_recorded() -> bool:
        if kube.get_deployment(namespace, "gamma") is None:
            return False
        state = fs.stack().export_stack().deployment or {}
        pending = [op["resource"]["urn"] for op in state.get("pending_operations") or []]
        return any(urn.endswith("gamma-deployment") for urn in pending)

    eventually(
        created_not_recorded,
        timeout=120,
        message="the up never created the Deployment with its create still pending",
    )
    assert daemon.value("twc_engine_in_progress") == 1
    since = len(daemon.text())
    _writable(backend, False)
    local_env.up(progress=lambda m: print(f"[local] {m}"))  # the scheduler comes back
    reported_mid = _fails_and_backs_off(daemon, since, secret)
    # The engine could neither record the Deployment nor release its lock.
    state = fs.stack().export_stack().deployment or {}
    assert state.get("pending_operations"), "the checkpoint write did not fail"
    locks = list((backend / ".pulumi" / "locks").rglob(f"{fs.name}/*.json"))
    assert locks, "the lock was released on a read-only backend?"

    restored = time.monotonic()
    _writable(backend, True)
    eventually(
        lambda: fault_state(daemon, FAULT) is None,
        timeout=60,
        message="the fault never cleared once the backend was writable",
    )
    cleared_mid = time.monotonic() - restored
    wait_until_settled(daemon)
    # Adopted, not duplicated: the lock the engine could not remove was broken, its
    # pending create dropped, and the next up took the existing Deployment over.
    log = daemon.text()[since:]
    assert "breaking a stale lock" in log
    assert f"dropped the pending creating of {namespace}/gamma-deployment" in log
    assert_converged(
        kube, daemon, fs, namespace, {"alpha", "beta", "gamma"}, adopted_worker="gamma"
    )
    print(
        f"read-only backend: idle — reported after {reported_idle:.1f} s, cleared "
        f"{cleared_idle:.1f} s after restoring; mid-up — reported after "
        f"{reported_mid:.1f} s, cleared {cleared_mid:.1f} s after restoring"
    )
