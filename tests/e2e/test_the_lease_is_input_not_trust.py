"""Whoever may edit the daemon's Lease cannot make two writers or stall the daemon.

* Deleting the Lease of a running leader ends its term at its next round: it stops
  applying (its engine guard is told, its writes are refused) and competes again; no
  one takes the absent Lease before the old term is over.
* An engine record edited into the Lease, naming a process on another host, is not
  taken on its word: that host's lock is never broken.
* A stream of forged hand-over requests costs the leader at most one hand-over: it
  keeps applying.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import create_queue, fleet_doc
from tests.e2e.daemon_process import (
    FAST,
    DaemonProcess,
    Daemons,
    eventually,
    wait_for_success,
)
from tests.faults._checks import assert_updates_never_overlap, lock_files
from tests.faults.test_manual_up_during_the_daemons_up import lock_files_dir
from twc.kube.lease import ENGINES_ANNOTATION, HANDOVER_ANNOTATION
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

LEASE = {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5}
SETTINGS = {**FAST, "leader_election": LEASE, "engine": {"interrupt_grace": 0.5}}
LEASE_NAME = "twc-e2e-trust"


def _args(namespace: str) -> list[str]:
    return ["--leader-elect", "--lease-namespace", namespace, "--lease-name", LEASE_NAME]


def _leading(daemon: DaemonProcess) -> bool:
    return daemon.value("twc_leader") == 1


def test_a_deleted_lease_stops_the_leader_at_once_and_never_makes_two_writers(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    solo = {"name": "solo", "namespace": namespace, "taskQueueName": task_queue}
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[solo]))
    first = daemons.start(fs, settings=SETTINGS, args=_args(namespace), name="first")
    wait_for_success(first, timeout=120)
    assert _leading(first)
    second = daemons.start(fs, settings=SETTINGS, args=_args(namespace), name="second")
    eventually(lambda: "standby" in second.text(), timeout=60, message="never a standby")

    samples: list[tuple[bool, bool]] = []

    def sample() -> tuple[bool, bool]:
        now = (_leading(first), _leading(second))
        samples.append(now)
        return now

    kube.coordination.delete_namespaced_lease(LEASE_NAME, namespace)
    deleted = time.monotonic()
    eventually(
        lambda: sample() == (False, False),
        timeout=30,
        interval=0.1,
        message="the leader kept applying after its Lease was deleted",
    )
    stopped = time.monotonic() - deleted
    assert "was deleted: this term ends now" in first.text()
    assert first.alive()  # it competes again rather than exiting
    eventually(
        lambda: sum(sample()) == 1,
        timeout=60,
        interval=0.1,
        message="no one led again after the Lease was deleted",
    )
    led_again = time.monotonic() - deleted
    assert (True, True) not in samples
    leader = first if _leading(first) else second

    # Whoever leads now applies the next change; the updates never overlapped.
    create_queue(kube, namespace, "orders")
    eventually(
        lambda: kube.get_deployment(namespace, "worker-orders"),
        timeout=120,
        message="the new leader never applied the new Queue",
    )
    wait_for_success(leader, after=leader.successes(), timeout=120)
    assert_updates_never_overlap(fs, first, second)
    print(
        f"Lease deleted under a running leader: it stopped applying {stopped:.1f} s later "
        f"(retry period {LEASE['retry_period']:g} s); one leader again {led_again:.1f} s "
        f"after the deletion (lease duration {LEASE['lease_duration']:g} s)"
    )


def test_an_engine_record_naming_another_hosts_process_is_not_taken_on_its_word(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    solo = {"name": "solo", "namespace": namespace, "taskQueueName": task_queue}
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[solo]))
    fs.stack()  # the stack exists; its lock is what the daemon meets
    # A running `pulumi up` on a laptop holds the stack's lock; someone who may edit
    # Leases writes a record claiming that process was an earlier holder's engine.
    foreign = lock_files_dir(fs) / "laptop-lock.json"
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
    forged = [{"holder": "ghost", "host": "laptop-of-dev", "pids": [4242]}]
    kube.coordination.create_namespaced_lease(
        namespace,
        {
            "metadata": {
                "name": LEASE_NAME,
                "annotations": {ENGINES_ANNOTATION: json.dumps(forged)},
            },
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1},
        },
    )

    daemon = daemons.start(fs, settings=SETTINGS, args=_args(namespace))
    eventually(
        lambda: daemon.count("twc_reconcile_errors_total", reason="ConcurrentUpdate") >= 2,
        timeout=120,
        message="the daemon never met the laptop's lock",
    )

    assert _leading(daemon)
    assert foreign.exists()
    assert daemon.count("twc_stack_recoveries_total", action="cancel") == 0
    foreign.unlink()  # the laptop's run ended: the daemon applies, nothing lost
    wait_for_success(daemon, timeout=120)
    assert kube.get_deployment(namespace, "solo") is not None
    assert not lock_files(fs)


@pytest.fixture
def flood(kube: Any, namespace: str) -> Iterator[threading.Event]:
    """Forged hand-over requests on the Lease, several a second, until the test ends."""
    stop = threading.Event()

    def run() -> None:
        count = 0
        while not stop.wait(0.25):
            count += 1
            patch = {"metadata": {"annotations": {HANDOVER_ANNOTATION: f"manual:m@x:{count}"}}}
            try:
                kube.coordination.patch_namespaced_lease(LEASE_NAME, namespace, patch)
            except Exception as exc:
                if getattr(exc, "status", None) != 404:
                    raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield stop
    stop.set()
    thread.join(timeout=10)


def test_a_flood_of_hand_over_requests_does_not_stall_the_leader(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    flood: threading.Event,
) -> None:
    solo = {"name": "solo", "namespace": namespace, "taskQueueName": task_queue}
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[solo]))
    daemon = daemons.start(fs, settings=SETTINGS, args=_args(namespace))
    wait_for_success(daemon, timeout=120)

    started = time.monotonic()
    create_queue(kube, namespace, "orders")
    eventually(
        lambda: kube.get_deployment(namespace, "worker-orders"),
        timeout=120,
        message="the leader never applied the new Queue under a flood of hand-over requests",
    )
    applied = time.monotonic() - started
    wait_for_success(daemon, after=daemon.successes(), timeout=120)

    assert daemon.alive()
    assert _leading(daemon)
    assert "never took the lease handed over to it" in daemon.text()
    print(
        f"forged hand-over requests every 0.25 s: a new Queue applied {applied:.1f} s after "
        f"it was created (one hand-over nobody took: lease duration {LEASE['lease_duration']:g} s)"
    )
