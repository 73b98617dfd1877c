"""The daemon on the real engine: Queue objects in the cluster drive workers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc, queue_object
from tests.e2e.daemon_process import Daemons, eventually, settle, wait_for_success
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e


def test_a_labelled_queue_object_yields_a_worker_and_deleting_it_removes_the_worker(
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
            workers=[{"name": "static", "namespace": namespace, "taskQueueName": task_queue}],
        )
    )
    file_before = fs.fleet_file.read_bytes()
    daemon = daemons.start(fs)
    wait_for_success(daemon)
    assert kube.get_deployment(namespace, "static") is not None
    ups_before = daemon.ups()

    create = kube.custom.create_namespaced_custom_object
    create("kmsvc.io", "v1", namespace, "queues", queue_object(namespace, "orders", 2))
    # A Kubernetes-valid name that is not a DNS label: twc must skip it, not stall.
    create("kmsvc.io", "v1", namespace, "queues", queue_object(namespace, "bad.name", 1))

    derived = eventually(
        lambda: kube.get_deployment(namespace, "worker-orders"),
        timeout=90,
        message="the Queue object never became a worker Deployment",
    )
    assert derived["spec"]["replicas"] == 2  # one replica per partition
    eventually(
        lambda: daemon.value("twc_invalid_queue_objects") == 1,
        timeout=60,
        message="the invalid Queue object was never reported",
    )
    assert daemon.value("twc_cluster_queue_objects") == 1
    assert "invalid Queue object: kmsvc.io/v1 Queue" in daemon.text()
    # The Deployment is applied early, on the wake itself; the up follows the settle.
    eventually(lambda: daemon.ups() > ups_before, timeout=60, message="no up for the Queue")

    kube.custom.delete_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", "orders")

    eventually(
        lambda: kube.get_deployment(namespace, "worker-orders") is None,
        timeout=90,
        message="deleting the Queue object never removed its worker",
    )
    assert kube.get_deployment(namespace, "static") is not None
    assert fs.fleet_file.read_bytes() == file_before
    assert daemon.alive()


def test_iterations_without_a_change_never_start_the_engine(
    local_env: LocalEnvironment,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    fs = daemons.stack(
        fleet_doc(
            namespace,
            host_port=local_env.temporal_address(),
            workers=[
                {
                    "name": "steady",
                    "namespace": namespace,
                    "taskQueueName": task_queue,
                    "autoscaling": {
                        "minReplicas": 1,
                        "maxReplicas": 5,
                        "targetBacklogPerReplica": 10,
                    },
                }
            ],
        )
    )
    daemon = daemons.start(fs)
    first = wait_for_success(daemon)
    settle(1.5)  # let a follow-up iteration see the deployed worker
    runs = daemon.count("twc_engine_runs_total")
    reconciles = daemon.successes()

    wait_for_success(daemon, after=reconciles + 4, timeout=30)

    assert daemon.count("twc_engine_runs_total") == runs
    assert daemon.successes() >= first + 5
    # The backlog was sampled all along: the iterations did real work, minus the engine.
    assert daemon.value("twc_task_queue_backlog", task_queue=task_queue) == 0
    assert daemon.value("twc_worker_current_replicas", worker=f"{namespace}/steady") == 1
