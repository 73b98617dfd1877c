"""A leader stopped (SIGSTOP) in the middle of an ``up`` loses its Lease, and the standby
takes over without two engines ever writing the stack.

The stopped daemon cannot renew, and cannot stop its own engine either: its engine
guard does, at the end of the daemon's Lease term (the renew deadline after its last
renewal), SIGKILLing every process of the run after the grace period. Only then (the
lease duration after that renewal) may the standby take the Lease; it breaks the lock
the killed CLI left (its pid is dead: provably gone), drops the pending operations and
converges. Resumed, the old leader finds the Lease gone and exits 1 without starting
another engine command. The history and the guards' journals show one writer at a time.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.faults._checks import assert_converged, assert_updates_never_overlap
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

LEASE = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}
SETTINGS = {**FAST, "leader_election": LEASE, "engine": {"interrupt_grace": 0.5}}


def test_a_leader_stopped_mid_up_is_fenced_and_the_standby_takes_over_alone(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    # Each new worker's TaskQueueCheck waits up to 60 s for a poller that never comes:
    # the up adding one is long, and its Deployment exists early in it.
    fs = daemons.stack(
        fleet_doc(namespace, host_port=local_env.temporal_address()), waitForPollersSeconds="60"
    )
    args = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", "twc-faults"]
    first = daemons.start(fs, settings=SETTINGS, args=args, name="first")
    wait_for_success(first, timeout=120)
    assert first.value("twc_leader") == 1
    second = daemons.start(fs, settings=SETTINGS, args=args, name="second")
    eventually(lambda: "standby" in second.text(), timeout=60, message="never a standby")

    worker = {"name": "alpha", "namespace": namespace, "taskQueueName": task_queue}
    fs.write(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[worker]))
    eventually(
        lambda: (
            first.value("twc_engine_in_progress") == 1 and kube.get_deployment(namespace, "alpha")
        ),
        timeout=120,
        message="the up adding alpha never got as far as its Deployment",
    )

    def plugins_running() -> bool:
        lines = [line for _, line in first.engine_processes()]
        return any("pulumi-resource-kubernetes" in x for x in lines) and any(
            "pulumi-language-python" in x for x in lines
        )

    eventually(plugins_running, timeout=60, message="the up's plugins never ran")

    first.pause()
    stopped = time.monotonic()
    # The guard fences the stopped daemon's engine by itself ...
    eventually(
        lambda: not first.engine_processes(),
        timeout=60,
        interval=0.1,
        message="the stopped leader's engine kept running",
    )
    fenced = time.monotonic() - stopped
    # ... and only then does the standby lead.
    eventually(lambda: second.value("twc_leader") == 1, timeout=60, message="never took over")
    took_over = time.monotonic() - stopped
    killed = [e for e in first.journal() if e.command == ("up",)][-1]
    assert killed.cause == "lease", killed
    assert killed.killed > 0
    # The restarted up need not wait for pollers (nobody polls this queue).
    fs.extra_config["waitForPollersSeconds"] = "0"
    fs.stack()
    wait_for_success(second, after=second.successes(), timeout=180)
    converged = time.monotonic() - stopped
    wait_until_settled(second)
    # The killed CLI's lock: same host, its pid dead, so provably gone and broken.
    assert second.count("twc_stack_recoveries_total", action="cancel") == 1

    resumed = time.time()
    first.resume()
    assert first.proc.wait(timeout=60) == 1
    assert "lost lease" in first.text()
    # Nothing started after it woke up.
    assert all(e.started < resumed for e in first.journal()), first.journal()

    history = assert_updates_never_overlap(fs, first, second)
    assert history[-1].result == "succeeded"
    assert_converged(kube, second, fs, namespace, {"alpha"}, adopted_worker="alpha")
    print(
        f"leader SIGSTOPped mid-up: its engine fenced (every process gone) {fenced:.1f} s "
        f"later (renew deadline {LEASE['renew_deadline']:g} s + grace 0.5 s); the standby "
        f"led {took_over:.1f} s after the stop (lease duration {LEASE['lease_duration']:g} s); "
        f"converged {converged:.1f} s after the stop; {len(history)} updates in the history"
    )
