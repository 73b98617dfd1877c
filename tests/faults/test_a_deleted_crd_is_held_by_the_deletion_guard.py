"""Deleting the TemporalWorker CRD deletes every TemporalWorker object with it. With the
real daemon, the three workers they derived (of the stack's four) are *held* by the
deletion guard — more than 25 % of the stack at once — instead of deleted by the next
``up``: ``DeletionsHeld`` names them (``/status``, ``twc_deletions_held``, an Event on
the stack's record, the log) and their Deployments stay byte for byte. The deletions
proceed at once when an operator runs ``twc approve``, or, when the fleet opts in
(``deletionGuard.releaseAfter``), once the same set was still wanted after that period."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import object_ref, temporal_worker
from tests.faults._checks import (
    assert_converged,
    assert_unchanged,
    deployment_bytes,
    events,
    metric,
)
from twc.kube.record import record_name
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

CRD = "temporalworkers.temporal.kmsvc.io"
NATIVE = ("orders", "billing", "shipping")


def _four_workers(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    release_after: float | None,
) -> tuple[Any, Any]:
    worker = {"name": "static", "namespace": namespace, "taskQueueName": task_queue}
    doc = fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[worker])
    if release_after is not None:
        doc["deletionGuard"] = {"releaseAfter": release_after}
    fs = daemons.stack(doc)
    daemon = daemons.start(fs, settings=FAST)
    wait_for_success(daemon, timeout=120)
    ref = object_ref("ClusterConnection", "local")
    for name in NATIVE:
        body = temporal_worker(namespace, name, f"{task_queue}-{name}", ref)
        kube.custom.create_namespaced_custom_object(
            "temporal.kmsvc.io", "v1", namespace, "temporalworkers", body
        )
    for name in NATIVE:
        eventually(
            lambda name=name: kube.get_deployment(namespace, name),
            timeout=120,
            message=f"{name} was never deployed",
        )
    wait_until_settled(daemon)
    return fs, daemon


def _held(kube: Any, daemon: Any, fs: Any, namespace: str) -> tuple[float, dict[str, Any]]:
    deleted = time.monotonic()
    kube.extensions.delete_custom_resource_definition(CRD)

    def all_held() -> Any:
        # The CRD's deletion removes its objects one by one: an iteration between two
        # removals holds the deletions seen so far, the next one all of them.
        found = daemon.status()["heldDeletions"]
        return found if found and len(found["workers"]) == len(NATIVE) else None

    held = eventually(all_held, timeout=90, message="the deletions were never all held")
    took = time.monotonic() - deleted
    assert sorted(held["workers"]) == sorted(f"{namespace}/{n}" for n in NATIVE)
    assert metric(daemon, "twc_deletions_held") == 3
    assert "DeletionsHeld" in daemon.text()
    # An Event per hold: the partial holds before the last removal have their own.
    messages = eventually(
        lambda: [
            m
            for m in events(kube, "default", record_name(fs.name), "DeletionsHeld")
            if "3 of 4 workers" in m
        ],
        timeout=30,
        message="no DeletionsHeld Event for all three workers on the stack's record",
    )
    assert all(f"{namespace}/{n}" in messages[0] for n in NATIVE)
    return took, held


def test_a_deleted_crds_workers_are_held_until_the_period_the_fleet_opts_into_passed(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    fs, daemon = _four_workers(local_env, kube, namespace, task_queue, daemons, 30.0)
    before = deployment_bytes(kube, namespace)
    took, held = _held(kube, daemon, fs, namespace)

    # Held: nothing changes while the period runs (20 s of it, well inside the 30 s).
    time.sleep(20)
    assert daemon.status()["heldDeletions"] is not None
    assert_unchanged(before, deployment_bytes(kube, namespace))

    released = time.monotonic()
    eventually(
        lambda: sorted(deployment_bytes(kube, namespace)) == ["static"],
        timeout=120,
        message="the held deletions never proceeded after the period",
    )
    waited = time.monotonic() - released + 20
    assert "(confirmed)" in daemon.text()
    wait_until_settled(daemon)
    assert daemon.status()["heldDeletions"] is None
    assert metric(daemon, "twc_deletions_held") == 0
    assert_unchanged({"static": before["static"]}, deployment_bytes(kube, namespace))
    assert_converged(kube, daemon, fs, namespace, {"static"})
    print(
        f"TemporalWorker CRD deleted: 3 of 4 deletions held {took:.1f} s after the delete; "
        f"deleted {waited:.1f} s after being held (releaseAfter 30 s, "
        f"{held['observations']} observations when first seen)"
    )


def test_an_operators_approval_releases_the_held_deletions_at_once(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    pulumi_env: dict[str, str],
) -> None:
    fs, daemon = _four_workers(local_env, kube, namespace, task_queue, daemons, None)
    took, _ = _held(kube, daemon, fs, namespace)

    approved = time.monotonic()
    done = fs.approve()
    assert done.returncode == 0, done.stderr
    for name in NATIVE:
        assert f"{namespace}/{name}" in done.stdout
    eventually(
        lambda: sorted(deployment_bytes(kube, namespace)) == ["static"],
        timeout=120,
        message="the approved deletions never proceeded",
    )
    applied = time.monotonic() - approved
    assert "(approved)" in daemon.text()
    wait_until_settled(daemon)
    assert daemon.status()["heldDeletions"] is None
    assert_converged(kube, daemon, fs, namespace, {"static"})
    # Nothing is held any more: a second approval has nothing to approve.
    again = fs.approve()
    assert again.returncode == 1
    assert "no deletions are held" in again.stderr
    print(
        f"TemporalWorker CRD deleted, approved: held {took:.1f} s after the delete; "
        f"deleted {applied:.1f} s after twc approve"
    )
