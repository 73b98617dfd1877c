"""An autoscaled worker's replicas belong to the daemon, not to the engine.

On the real engine (pulumi-kubernetes 4.25 server-side apply, forced as the daemon runs
it) and the real API server: the program registers the Deployment without
``spec.replicas`` and ignores changes to it; the daemon's writes go through the
``scale`` subresource under its own field manager. A later ``up`` (an image change)
keeps the count, a preview and a refresh see nothing to change, and a worker whose
count the engine once owned (turned autoscaled later) is taken over without a fight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc
from twc.engine.automation import PATCH_FORCE_ENV
from twc.kube.client import KubeClient
from twc.kube.workloads import AUTOSCALER_FIELD_MANAGER, ReplicaScaler, scale_owner_of
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

AUTOSCALING = {"minReplicas": 1, "maxReplicas": 10, "targetBacklogPerReplica": 5}


def _fleet(namespace: str, address: str, *, image: str, autoscaling: bool) -> dict[str, Any]:
    worker: dict[str, Any] = {
        "name": "orders",
        "namespace": namespace,
        "taskQueueName": f"tq-{namespace}",
        "image": image,
    }
    if autoscaling:
        worker["autoscaling"] = AUTOSCALING
    else:
        worker["replicas"] = 3
    return fleet_doc(namespace, host_port=address, workers=[worker])


def _forced(fs: FleetStack) -> FleetStack:
    # The daemon's engine runs force server-side apply conflicts; so do these.
    fs.env[PATCH_FORCE_ENV] = "true"
    return fs


def _deployment(kube: Any, namespace: str) -> dict[str, Any]:
    dep = kube.get_deployment(namespace, "orders")
    assert dep is not None, "the worker's Deployment is missing"
    return dict(dep)


def _image(dep: dict[str, Any]) -> str:
    return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])


def test_scaling_is_the_daemons_and_a_later_up_keeps_the_count(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    address = local_env.temporal_address()
    fs = _forced(fleet_stack(_fleet(namespace, address, image="w:1", autoscaling=True)))
    fs.up()
    created = _deployment(kube, namespace)
    # Registered without replicas: nobody owns the count, the API server defaulted it.
    assert created["spec"]["replicas"] == 1
    assert scale_owner_of(created) == []

    scaler = ReplicaScaler(KubeClient(kube.api_client))
    scaler.scale(namespace, "orders", 4)
    scaled = _deployment(kube, namespace)
    assert scaled["spec"]["replicas"] == 4
    assert scale_owner_of(scaled) == [AUTOSCALER_FIELD_MANAGER]

    # Nothing changed in the fleet: the engine sees nothing to do, replicas included.
    preview = fs.preview()
    assert {k: v for k, v in preview.change_summary.items() if k != "same" and v} == {}
    refreshed = fs.refresh()
    assert {
        k: v for k, v in (refreshed.summary.resource_changes or {}).items() if k != "same"
    } == {}

    # An image change rolls the pods and leaves the count alone.
    fs.write(_fleet(namespace, address, image="w:2", autoscaling=True))
    fs.up()
    assert fs.changed().get(f"{namespace}/orders-deployment") == "update"
    after = _deployment(kube, namespace)
    assert _image(after) == "w:2"
    assert after["spec"]["replicas"] == 4
    assert scale_owner_of(after) == [AUTOSCALER_FIELD_MANAGER]


def test_a_count_the_engine_owned_is_taken_over_and_then_left_to_the_daemon(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    address = local_env.temporal_address()
    fs = _forced(fleet_stack(_fleet(namespace, address, image="w:1", autoscaling=False)))
    fs.up()
    engine_owned = _deployment(kube, namespace)
    assert engine_owned["spec"]["replicas"] == 3
    owners = scale_owner_of(engine_owned)
    assert len(owners) == 1
    assert owners[0].startswith("pulumi-kubernetes")

    # Turned autoscaled: the program stops setting the count; the engine keeps the live
    # value rather than dropping the field (which would reset it to 1).
    fs.write(_fleet(namespace, address, image="w:1", autoscaling=True))
    fs.up()
    assert _deployment(kube, namespace)["spec"]["replicas"] == 3

    scaler = ReplicaScaler(KubeClient(kube.api_client))
    scaler.scale(namespace, "orders", 3)  # the daemon's claim of a count it did not own
    scaler.scale(namespace, "orders", 6)  # a real decision: the autoscaler alone owns it
    assert scale_owner_of(_deployment(kube, namespace)) == [AUTOSCALER_FIELD_MANAGER]

    fs.write(_fleet(namespace, address, image="w:2", autoscaling=True))
    fs.up()
    after = _deployment(kube, namespace)
    assert _image(after) == "w:2"
    assert after["spec"]["replicas"] == 6
    assert scale_owner_of(after) == [AUTOSCALER_FIELD_MANAGER]
