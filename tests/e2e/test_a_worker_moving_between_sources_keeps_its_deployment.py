"""On the real engine: a worker moving from a Queue object to the fleet file, then to a
TemporalWorker object and back to a Queue object keeps its Deployment — the same
object (uid), never created again nor deleted — because its component is aliased from
where it was to where it is now."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, create_queue, fleet_doc
from tests.e2e.native import object_ref, temporal_worker
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e


def _deployment_steps(fs: FleetStack, namespace: str) -> dict[str, str]:
    return {
        name: op
        for name, op in fs.changed().items()
        if name.startswith(f"{namespace}/worker-orders")
    }


def test_a_worker_moving_between_file_queue_and_temporalworker_keeps_its_deployment(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    address = local_env.temporal_address()
    fs = fleet_stack(fleet_doc(namespace, host_port=address))

    # 1. From a Queue object: derived, under the queue's component.
    create_queue(kube, namespace, "orders")
    fs.up()
    first = kube.get_deployment(namespace, "worker-orders")
    assert first is not None
    uid = first["metadata"]["uid"]

    def moved(step: str) -> None:
        fs.up()
        steps = _deployment_steps(fs, namespace)
        assert not set(steps.values()) & {"create", "delete", "replace"}, (step, steps)
        now = kube.get_deployment(namespace, "worker-orders")
        assert now is not None, step
        assert now["metadata"]["uid"] == uid, step

    # 2. To the fleet file: the Queue object goes, a file worker of the same name comes.
    kube.custom.delete_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", "orders")
    fs.write(
        fleet_doc(
            namespace,
            host_port=address,
            workers=[{"name": "worker-orders", "namespace": namespace, "taskQueueName": "orders"}],
        )
    )
    moved("queue object -> fleet file")

    # 3. To a TemporalWorker object.
    fs.write(fleet_doc(namespace, host_port=address))
    kube.custom.create_namespaced_custom_object(
        "temporal.kmsvc.io",
        "v1",
        namespace,
        "temporalworkers",
        temporal_worker(
            namespace, "worker-orders", "orders", object_ref("ClusterConnection", "local")
        ),
    )
    moved("fleet file -> TemporalWorker object")

    # 4. Back to a Queue object.
    kube.custom.delete_namespaced_custom_object(
        "temporal.kmsvc.io", "v1", namespace, "temporalworkers", "worker-orders"
    )
    create_queue(kube, namespace, "orders")
    moved("TemporalWorker object -> queue object")
