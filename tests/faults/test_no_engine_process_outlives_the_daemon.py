"""No engine, language-host or plugin process outlives the daemon that started it.

The Pulumi CLI starts each plugin in a process group of its own, so killing the daemon,
or the daemon's process group, used to leave the language host and the providers
running for good. Each time in the middle of an ``up`` (the plugins running): SIGTERM
(the daemon finishes its step, then exits), ``kill -9`` of the daemon alone (its engine
guard sees it die), and ``kill -9`` of its whole process group (the guard left that
group, so it survives to clean up). Afterwards no process the daemon started is left,
and the next daemon converges the stack. (A Lease lost mid-``up`` is
``test_leader_stopped_mid_up_loses_its_lease.py``.)
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import (
    DaemonProcess,
    Daemons,
    eventually,
    wait_for_success,
    wait_until_settled,
)
from tests.faults._checks import assert_converged
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

ENDINGS = ("SIGTERM", "kill -9 of the daemon", "kill -9 of its process group")


def _plugins_running(daemon: DaemonProcess) -> bool:
    lines = [line for _, line in daemon.engine_processes()]
    return (
        daemon.value("twc_engine_in_progress") == 1
        and any("pulumi-resource-kubernetes" in line for line in lines)
        and any("pulumi-language-python" in line for line in lines)
    )


def test_no_engine_process_outlives_the_daemon_however_it_ends(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    host_port = local_env.temporal_address()
    # Each new worker's TaskQueueCheck waits 20 s for a poller: the up is mid-way then.
    fs = daemons.stack(fleet_doc(namespace, host_port=host_port), waitForPollersSeconds="20")
    workers: list[dict[str, str]] = []
    measured: list[str] = []
    for n, ending in enumerate(ENDINGS):
        daemon = daemons.start(fs, name=f"daemon-{n + 1}")
        wait_for_success(daemon, timeout=180)
        wait_until_settled(daemon)
        workers.append(
            {"name": f"w{n + 1}", "namespace": namespace, "taskQueueName": f"{task_queue}-{n}"}
        )
        fs.write(fleet_doc(namespace, host_port=host_port, workers=workers))
        eventually(
            lambda d=daemon: _plugins_running(d),
            timeout=120,
            message=f"{daemon.name}'s up never ran its plugins",
        )
        running = daemon.engine_processes()

        ended = time.monotonic()
        inputs = "twc-daemon-*/**/inputs-*.json"
        if ending == "SIGTERM":
            assert list(daemon.tmpdir.glob(inputs)), "the up runs without an inputs file"
            daemon.proc.send_signal(signal.SIGTERM)
            assert daemon.proc.wait(timeout=180) == 0  # the step finished first
            assert list(daemon.tmpdir.glob("twc-daemon-*/guard/journal/*.json"))
            left = list(daemon.tmpdir.glob(inputs))
            assert left == [], f"the daemon left its engine's inputs behind: {left}"
        else:
            daemon.kill_9(group=ending.endswith("group"))
        exited = time.monotonic() - ended
        eventually(
            lambda d=daemon: not d.engine_processes(),
            timeout=60,
            interval=0.1,
            message=f"processes outlived the daemon after {ending}",
        )
        gone = time.monotonic() - ended
        measured.append(
            f"{ending}: {len(running)} processes of the run, the daemon gone after "
            f"{exited:.1f} s, the last of them after {gone:.1f} s"
        )

    last = daemons.start(fs, name="converges")
    wait_for_success(last, timeout=180)
    wait_until_settled(last)
    assert_converged(kube, last, fs, namespace, {w["name"] for w in workers})
    print("; ".join(measured))
