"""Generated fleets: N workers on one ClusterConnection, spread over namespaces that the
shards take whole (``sharding.maxWorkersPerShard`` per namespace)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

CONNECTION = "bench"
"""Name of the one ClusterConnection every generated worker uses."""
NAMESPACES = ("bench-a", "bench-b", "bench-c", "bench-d")
"""Kubernetes namespaces the workers are spread over by default (round robin)."""
IMAGE = "registry.example/bench-worker:1.0.0"
AUTOSCALING = {
    "minReplicas": 1,
    "maxReplicas": 20,
    "targetBacklogPerReplica": 10,
    "scaleDownStabilizationSeconds": 30,
}
"""The autoscaling of the first workers (the backlog figure's)."""


def worker_name(index: int) -> str:
    """The name of the ``index``-th generated worker."""
    return f"w-{index:04d}"


def worker_namespace(index: int, namespaces: tuple[str, ...] = NAMESPACES) -> str:
    """The namespace of the ``index``-th generated worker."""
    return namespaces[index % len(namespaces)]


def worker_key(index: int, namespaces: tuple[str, ...] = NAMESPACES) -> str:
    """``<namespace>/<name>``: the worker's name in the stack (its component name)."""
    return f"{worker_namespace(index, namespaces)}/{worker_name(index)}"


def task_queue(index: int) -> str:
    """The task queue of the ``index``-th worker."""
    return f"bench-tq-{index:04d}"


def namespaces_for(n: int, per_shard: int, prefix: str = "bench") -> tuple[str, ...]:
    """Namespaces of an N-worker fleet: one per ``per_shard`` workers (at least one),
    named after N so fleets of several sizes coexist in one cluster."""
    count = max(1, math.ceil(n / per_shard))
    return tuple(f"{prefix}{n}-{i:02d}" for i in range(count))


def autoscaled_count(n: int, namespaces: tuple[str, ...]) -> int:
    """How many workers autoscale: at least one per namespace, and eight in all (the
    backlog figure uses a fresh one per trial), never more than half of the fleet."""
    return min(n // 2, max(len(namespaces), 8))


def autoscaled(index: int, namespaces: tuple[str, ...], n: int) -> bool:
    """Whether the ``index``-th worker of an ``n``-worker fleet autoscales (the first
    ones: round robin, so every namespace has some)."""
    return index < autoscaled_count(n, namespaces)


def generate_fleet(
    n: int,
    *,
    host_port: str = "127.0.0.1:7233",
    namespaces: tuple[str, ...] = NAMESPACES,
    image: str = IMAGE,
    revisions: Mapping[int, int] | None = None,
    max_workers_per_shard: int | None = None,
    autoscale: bool = False,
    cluster_objects: bool = True,
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
        max_workers_per_shard: Shard the stack by namespace with this limit (``None``:
            one unsharded stack).
        autoscale: Give the first workers (:func:`autoscaled`) :data:`AUTOSCALING`.
        cluster_objects: Include the cluster's Queue and TemporalWorker objects (the
            fleet's ``clusterObjects``). Only the stack under test does: the objects
            are cluster-wide, and two stacks taking the same Queue would fight over
            its worker.

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
            "taskQueueName": task_queue(i),
        }
        if autoscale and autoscaled(i, namespaces, n):
            worker["autoscaling"] = dict(AUTOSCALING)
        else:
            worker["replicas"] = 1
        if revisions and i in revisions:
            worker["image"] = f"{image}-r{revisions[i]}"
        workers.append(worker)
    doc: dict[str, Any] = {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "clusterObjects": cluster_objects,
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
    if max_workers_per_shard is not None:
        doc["sharding"] = {
            "by": "namespace",
            "maxWorkersPerShard": max_workers_per_shard,
            "assignmentNamespace": "default",
        }
    return doc


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
