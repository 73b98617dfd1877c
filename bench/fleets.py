"""Generated fleets: N workers on one ClusterConnection, spread over a few namespaces."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CONNECTION = "bench"
"""Name of the one ClusterConnection every generated worker uses."""
NAMESPACES = ("bench-a", "bench-b", "bench-c", "bench-d")
"""Kubernetes namespaces the workers are spread over (round robin)."""
IMAGE = "registry.example/bench-worker:1.0.0"


def worker_name(index: int) -> str:
    """The name of the ``index``-th generated worker."""
    return f"w-{index:04d}"


def worker_namespace(index: int, namespaces: tuple[str, ...] = NAMESPACES) -> str:
    """The namespace of the ``index``-th generated worker."""
    return namespaces[index % len(namespaces)]


def worker_key(index: int, namespaces: tuple[str, ...] = NAMESPACES) -> str:
    """``<namespace>/<name>``: the worker's name in the stack (its component name)."""
    return f"{worker_namespace(index, namespaces)}/{worker_name(index)}"


def generate_fleet(
    n: int,
    *,
    host_port: str = "127.0.0.1:7233",
    namespaces: tuple[str, ...] = NAMESPACES,
    image: str = IMAGE,
    revisions: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """A fleet document with ``n`` plain workers on one ClusterConnection.

    Args:
        n: Number of workers (``w-0000`` ...), each on its own task queue.
        host_port: The ClusterConnection's frontend address.
        namespaces: Namespaces to spread the workers over, round robin.
        image: Image of every worker.
        revisions: Per worker index, a revision appended to that worker's image tag:
            giving one more worker a revision (or one a new revision) is a
            "one-worker change", a new pod template for exactly one Deployment.

    Returns:
        The fleet as plain data, ready for ``yaml.safe_dump`` or ``load_fleet``.
    """
    if n < 0:
        raise ValueError(f"n must not be negative, got {n}")
    if not namespaces:
        raise ValueError("need at least one namespace")
    workers: list[dict[str, Any]] = []
    for i in range(n):
        worker: dict[str, Any] = {
            "name": worker_name(i),
            "namespace": worker_namespace(i, namespaces),
            "taskQueueName": f"bench-tq-{i:04d}",
            "replicas": 1,
        }
        if revisions and i in revisions:
            worker["image"] = f"{image}-r{revisions[i]}"
        workers.append(worker)
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "temporalNamespace": "default",
            "replicas": 1,
            "connectionRef": {
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": CONNECTION,
                }
            },
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        },
        "clusterConnections": [{"name": CONNECTION, "hostPort": host_port}],
        "queues": [],
        "workers": workers,
    }


def queue_object(name: str, namespace: str, *, partitions: int = 1) -> dict[str, Any]:
    """A kmsvc ``Queue`` labelled worker-enabled, as created in the cluster."""
    return {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"temporal.io/worker-enabled": "true"},
        },
        "spec": {"fifo": False, "partitions": partitions},
    }
