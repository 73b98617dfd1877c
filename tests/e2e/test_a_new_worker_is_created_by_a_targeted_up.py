"""A new worker, from a Queue object or added to the fleet file, is created by a targeted
up of its own components; the engine keeps every other resource as it is.

On the real daemon, engine and API server: two workers, then a Queue object, then a
third worker in the file. Each new worker is created by an up whose program builds that
worker alone, with its component's children (which have no URNs before they exist)
targeted as the component's dependents. Afterwards the state holds the new worker's
component, ServiceAccount, Deployment and task-queue check (the Queue's worker under its
queue's component), every earlier resource is still there, the other Deployments never
changed, the stack's outputs name every worker, and a preview of the whole program finds
nothing to change. When the Queue goes, its worker and its queue's component go too (a
full up).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, create_queue, fleet_doc, plain_workers
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

WORKER = "twc:temporal:TemporalWorker"
QUEUE = "twc:kmsvc:Queue"


def _urns(fs: FleetStack) -> set[str]:
    from pulumi.automation import CommandError

    for _ in range(20):
        try:
            state = fs.stack().export_stack().deployment
        except CommandError as exc:
            # The file backend's checkpoint, read while the daemon's up rewrites it.
            if "failed to load checkpoint" not in str(exc):
                raise
            time.sleep(0.5)
            continue
        assert state is not None
        return {str(r["urn"]) for r in state["resources"]}
    raise AssertionError("the state could not be read")


def _same(kube: Any, namespace: str, before: dict[str, Any]) -> None:
    for name, old in before.items():
        now = kube.get_deployment(namespace, name)
        assert now is not None, f"{name}'s Deployment is gone"
        assert now["metadata"]["uid"] == old["metadata"]["uid"], name
        assert now["metadata"]["generation"] == old["metadata"]["generation"], name
        assert now["spec"]["template"] == old["spec"]["template"], name


def test_new_workers_are_created_by_targeted_ups_and_the_rest_is_kept(
    local_env: LocalEnvironment, namespace: str, kube: Any, daemons: Daemons
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=plain_workers(namespace, ("alpha", "bravo")),
    )
    fs = daemons.stack(fleet)
    daemon = daemons.start(fs)
    wait_for_success(daemon)
    assert "up (full): nothing applied yet" in daemon.text()
    before = {n: kube.get_deployment(namespace, n) for n in ("alpha", "bravo")}
    urns = _urns(fs)
    stack = fs.name
    prefix = f"urn:pulumi:{stack}::twc::"

    # A Queue object: its worker hangs on the queue's component.
    create_queue(kube, namespace, "orders")
    key = f"{namespace}/worker-orders"
    eventually(
        lambda: f"up (targeted): 1 worker(s) changed [{key}]" in daemon.text(),
        timeout=120,
        message="the Queue's worker was not created by a targeted up",
    )
    eventually(
        lambda: (
            f"{prefix}{QUEUE}${WORKER}$kubernetes:apps/v1:Deployment::{key}-deployment" in _urns(fs)
        ),
        timeout=180,
        message="the Queue's worker's Deployment never reached the state",
    )
    wait_for_success(daemon, after=daemon.successes())
    grown = _urns(fs)
    assert urns < grown, "an earlier resource is gone"
    assert grown - urns >= {
        f"{prefix}{QUEUE}::{namespace}/orders",
        f"{prefix}{QUEUE}${WORKER}::{key}",
        f"{prefix}{QUEUE}${WORKER}$kubernetes:core/v1:ServiceAccount::{key}-sa",
        f"{prefix}{QUEUE}${WORKER}$kubernetes:apps/v1:Deployment::{key}-deployment",
        f"{prefix}{QUEUE}${WORKER}$pulumi-python:dynamic/twc:TaskQueueCheck::{key}-check",
    }
    # A Queue's component names no provider, so its worker is the first user of the
    # default Kubernetes provider, in a full up as much as here (the preview below).
    created = {u for u in grown - urns if not u.startswith(f"{prefix}pulumi:providers:")}
    assert all(u.startswith((f"{prefix}{QUEUE}::", f"{prefix}{QUEUE}$")) for u in created), created
    _same(kube, namespace, before)

    # A worker added to the file.
    edited = copy.deepcopy(fleet)
    edited["workers"].append(
        {"name": "charlie", "namespace": namespace, "taskQueueName": f"tq-{namespace}-c"}
    )
    fs.write(edited)
    added = f"{namespace}/charlie"
    eventually(
        lambda: f"{prefix}{WORKER}$kubernetes:apps/v1:Deployment::{added}-deployment" in _urns(fs),
        timeout=180,
        message="charlie's Deployment never reached the state",
    )
    wait_for_success(daemon, after=daemon.successes())
    log = daemon.text()
    assert f"up (targeted): 1 worker(s) changed [{added}]" in log
    assert log.count("the program builds 1 of 3 workers") == 1
    assert log.count("the program builds 1 of 4 workers") == 1
    assert log.count("up (full):") == 1, "only the daemon's first up was a full one"
    final = _urns(fs)
    assert grown < final
    assert all(u.startswith(f"{prefix}{WORKER}") for u in final - grown), final - grown
    _same(kube, namespace, before)
    outputs = fs.stack().outputs()
    assert sorted(outputs["workers"].value) == sorted(
        [f"{namespace}/alpha", f"{namespace}/bravo", key, added]
    )

    # The Queue goes: a full up deletes its worker and its queue's component.
    kube.custom.delete_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", "orders")
    eventually(
        lambda: not any(u.startswith(f"{prefix}{QUEUE}") for u in _urns(fs)),
        timeout=180,
        message="the Queue's component or worker stayed in the state",
    )
    eventually(
        lambda: kube.get_deployment(namespace, "worker-orders") is None,
        timeout=60,
        message="the Queue's worker's Deployment stayed",
    )
    assert _urns(fs) == urns | (final - grown)
    _same(kube, namespace, before)

    # The whole program, as a full up would run it, finds the stack as it wants it.
    daemons.stop_all()
    preview = fs.stack().preview(color="never")
    changed = {op: n for op, n in preview.change_summary.items() if op != "same" and n}
    assert changed == {}, preview.stdout
