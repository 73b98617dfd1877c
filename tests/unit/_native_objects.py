"""Kubernetes-native objects as the API returns them, for the native-mode unit tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twc.connections import Registry, WatchedKind
from twc.desired import KindMerge, ObjectList, Rejection
from twc.desired._merge import merge_connections, merge_queues, merge_workers
from twc.native.objects import NativeObject
from twc.spec import Fleet

CONNECTION = WatchedKind("temporal.io", "Connection", "v1", "connections", True)
CLUSTER_CONNECTION = WatchedKind(
    "temporal.io", "ClusterConnection", "v1", "clusterconnections", False
)
BUILTIN_KINDS = tuple(Registry.with_builtins().watched_kinds())


def worker_obj(
    name: str,
    *,
    namespace: str = "team",
    ref: dict[str, Any] | None = None,
    task_queue: str | None = None,
    generation: int = 1,
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A TemporalWorker object."""
    obj: dict[str, Any] = {
        "apiVersion": "temporal.kmsvc.io/v1",
        "kind": "TemporalWorker",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "generation": generation,
            "resourceVersion": "10",
        },
        "spec": {
            "taskQueueName": task_queue or name,
            "image": "registry.example/worker:1.0.0",
            **({"connectionRef": ref} if ref is not None else {}),
            **spec,
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def cluster_conn_obj(
    name: str, *, finalizers: list[str] | None = None, deleting: bool = False, **spec: Any
) -> dict[str, Any]:
    """A ClusterConnection object."""
    meta: dict[str, Any] = {"name": name, "uid": f"uid-cc-{name}", "resourceVersion": "5"}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "ClusterConnection",
        "metadata": meta,
        "spec": {"hostPort": "temporal.example:7233", **spec},
    }


def conn_obj(
    name: str, namespace: str = "team", *, finalizers: list[str] | None = None, **spec: Any
) -> dict[str, Any]:
    """A namespaced Connection object."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-c-{namespace}-{name}",
        "resourceVersion": "6",
    }
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "Connection",
        "metadata": meta,
        "spec": {"hostPort": "other.example:7233", **spec},
    }


def cluster_ref(name: str) -> dict[str, Any]:
    return {"objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": name}}


@dataclass(frozen=True)
class ConnectionsMerge:
    """Every connection kind's merge as one, as the tests of the merge read it."""

    fleet: Fleet
    accepted: dict[str, NativeObject]
    """Accepted objects by identity text (``ClusterConnection.temporal.io foo``)."""
    rejected: tuple[Rejection, ...]
    entries: dict[str, list[Mapping[str, Any]]]


def merge_connection_objects(
    fleet: Fleet, objects: Mapping[WatchedKind, list[dict[str, Any]]], *, file: str
) -> ConnectionsMerge:
    """The connection kinds' objects merged in order, through the desired state's merge."""
    accepted: dict[str, NativeObject] = {}
    rejected: list[Rejection] = []
    entries: dict[str, list[Mapping[str, Any]]] = {}
    for kind in sorted(objects, key=lambda k: (k.api_group, k.kind)):
        merge = merge_connections(fleet, kind, ObjectList.known(objects[kind]), {}, file=file)
        fleet = merge.fleet
        for obj in merge.accepted.values():
            accepted[f"{obj.kind}.{obj.group} {obj.key}"] = obj
        rejected.extend(merge.rejected)
        for section, items in merge.entries.items():
            entries.setdefault(section, []).extend(items)
    return ConnectionsMerge(fleet, accepted, tuple(rejected), entries)


def merge_worker_objects(
    fleet: Fleet, objects: list[dict[str, Any]], *, registry: Registry, file: str
) -> KindMerge:
    """TemporalWorker objects merged through the desired state's merge."""
    return merge_workers(fleet, ObjectList.known(objects), {}, registry=registry, file=file)


def merge_queue_objects(fleet: Fleet, objects: list[dict[str, Any]], *, file: str) -> KindMerge:
    """Queue objects merged through the desired state's merge."""
    return merge_queues(fleet, ObjectList.known(objects), {}, file=file)
