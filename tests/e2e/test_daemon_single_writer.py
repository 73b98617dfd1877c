"""Two daemons on one stack: only the Lease holder applies; SIGTERM hands over."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import create_queue, fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

LEASE = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}


def test_a_second_daemon_never_applies_while_the_first_holds_the_lease_and_takes_over(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    fs = daemons.stack(
        fleet_doc(
            namespace,
            host_port=local_env.temporal_address(),
            workers=[{"name": "solo", "namespace": namespace, "taskQueueName": task_queue}],
        )
    )
    settings = {**FAST, "leader_election": LEASE, "engine": {"interrupt_grace": 0.5}}
    args = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", "twc-e2e"]
    first = daemons.start(fs, settings=settings, args=args, name="first")
    wait_for_success(first)
    assert first.value("twc_leader") == 1

    second = daemons.start(fs, settings=settings, args=args, name="second")
    eventually(lambda: "standby" in second.text(), timeout=30, message="never a standby")

    # A change while both run: only the leader applies it.
    create_queue(kube, namespace, "orders")
    eventually(
        lambda: kube.get_deployment(namespace, "worker-orders"),
        timeout=90,
        message="the leader never applied the new Queue",
    )
    time.sleep(2 * LEASE["retry_period"])
    assert second.count("twc_engine_runs_total") == 0
    assert second.value("twc_leader") == 0
    assert second.probe("/readyz") == 200  # a standby is ready: rollouts must progress
    holder = kube.coordination.read_namespaced_lease("twc-e2e", namespace).spec.holder_identity
    assert holder
    assert holder in first.text()

    # SIGTERM: the leader finishes its step, releases the Lease and exits 0 ...
    assert first.terminate(timeout=120) == 0
    assert "released lease" in first.text()
    # ... and the standby takes over well before the lease would have expired.
    released = time.monotonic()
    eventually(lambda: second.value("twc_leader") == 1, timeout=30, message="never took over")
    assert time.monotonic() - released < LEASE["lease_duration"]
    wait_for_success(second, timeout=120)
    # The stack is as the old leader's last up left it (SIGTERM let that up finish):
    # the new leader resumes from its record without an up of its own ...
    assert "resumed: the stack is as the last recorded up left it" in second.text()
    assert kube.get_deployment(namespace, "worker-orders") is not None
    # ... and applies the next change itself.
    create_queue(kube, namespace, "billing")
    eventually(
        lambda: kube.get_deployment(namespace, "worker-billing"),
        timeout=90,
        message="the new leader never applied a new Queue",
    )
    eventually(
        lambda: second.count("twc_engine_runs_total", operation="up") >= 1,
        timeout=120,
        message="the new leader never ran an up",
    )
