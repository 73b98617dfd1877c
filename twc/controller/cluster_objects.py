"""The desired state's cluster part: Queue, TemporalWorker and connection objects.

The daemon merges them into the fleet every iteration from its watches. ``twc up`` and
``twc preview`` on a stack the daemon manages read them once (:func:`read_overlay`), so
a pull request's preview shows the change the daemon would make, not the deletion of
every worker that comes from the cluster, and a manual ``up`` keeps them. Autoscaled
workers keep the replicas they run with (the autoscaler's last decision) instead of
falling back to ``minReplicas``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from twc.connections import Registry, default_registry, resolve_fleet_connections
from twc.controller.automation import Overlay
from twc.controller.backlog import worker_key
from twc.controller.native import (
    NativeMerge,
    NativeSnapshot,
    merge_connection_objects,
    merge_worker_objects,
)
from twc.controller.queues import MergedFleet, merge_queue_objects
from twc.spec import Fleet

__all__ = ["ClusterMerge", "ClusterOverlay", "merge_cluster_objects", "read_overlay"]


@dataclass(frozen=True, slots=True)
class ClusterMerge:
    """The fleet with the cluster's objects merged in, and what each kind contributed."""

    connections: NativeMerge
    """Connection and ClusterConnection objects."""
    merged: MergedFleet
    """Queue objects; its ``fleet`` is the final fleet (TemporalWorkers included)."""
    workers: NativeMerge
    """TemporalWorker objects."""

    @property
    def fleet(self) -> Fleet:
        """The fleet file plus every accepted object."""
        return self.merged.fleet

    def overlay(self, replicas: Mapping[str, int]) -> Overlay:
        """The program's input for this desired state."""
        return Overlay(
            queues=self.merged.accepted,
            replicas=dict(replicas),
            objects={**self.connections.entries, **self.workers.entries},
        )


def merge_cluster_objects(
    fleet: Fleet,
    queues: Sequence[Mapping[str, Any]],
    snapshot: NativeSnapshot,
    *,
    registry: Registry,
    file: str,
) -> ClusterMerge:
    """Merge connection objects, then Queues, then TemporalWorkers (the program's order);
    each invalid object is left out alone.

    Raises:
        SpecError: The fleet file's own connections do not resolve.
    """
    conns = merge_connection_objects(fleet, snapshot.connections, file=file)
    merged = merge_queue_objects(conns.fleet, queues, file=file)
    resolve_fleet_connections(merged.fleet, file=file, registry=registry)
    natives = merge_worker_objects(merged.fleet, snapshot.workers, registry=registry, file=file)
    return ClusterMerge(conns, replace(merged, fleet=natives.fleet), natives)


@dataclass(frozen=True, slots=True)
class ClusterOverlay:
    """What :func:`read_overlay` found."""

    overlay: Overlay
    """The program's input."""
    queues: int
    """Queue objects merged."""
    workers: int
    """TemporalWorker objects merged."""
    connections: int
    """Connection and ClusterConnection objects merged."""
    rejected: tuple[str, ...]
    """One line per object left out: which object, and why."""

    def summary(self) -> str:
        """One line for the user."""
        text = (
            f"including from the cluster, as the daemon does: {self.queues} Queue object(s), "
            f"{self.workers} TemporalWorker(s), {self.connections} connection object(s)"
        )
        if self.rejected:
            text += f"; {len(self.rejected)} invalid object(s) left out"
        return text


def read_overlay(
    fleet: Fleet, *, file: str, api_client: Any, registry: Registry | None = None
) -> ClusterOverlay:
    """List the cluster's objects once and merge them as the daemon's next iteration would.

    Args:
        fleet: The validated fleet file.
        file: Its name, for messages.
        api_client: A ``kubernetes.client.ApiClient`` for the stack's cluster.
        registry: The connection registry (the process-wide one by default).

    Raises:
        SpecError: The fleet file's own connections do not resolve.
        kubernetes.client.ApiException: The objects cannot be listed (a missing CRD
            counts as no objects).
    """
    from twc.controller.cluster import Cluster
    from twc.controller.native_cluster import NativeWatch
    from twc.controller.queues import QueueWatcher

    registry = registry or default_registry()
    cluster = Cluster(api_client)
    queue_watch = QueueWatcher(cluster.custom, resync_interval=0.1)
    queue_watch.list_now()
    native_watch = NativeWatch(cluster.custom, registry.watched_kinds(), resync_interval=0.1)
    snapshot = native_watch.list_now()
    merge = merge_cluster_objects(
        fleet, queue_watch.snapshot() or (), snapshot, registry=registry, file=file
    )
    live = cluster.worker_replicas()
    held = {
        worker_key(w): live[worker_key(w)]
        for w in merge.fleet.resolved_workers()
        if w.autoscaling is not None and worker_key(w) in live
    }
    rejected = (
        *(f"Queue {r.key}: {r.reason}" for r in merge.merged.rejected),
        *(
            f"{r.obj.kind} {f'{r.obj.namespace}/' if r.obj.namespace else ''}{r.obj.name}: "
            f"{r.reason}: {r.message}"
            for r in (*merge.connections.rejected, *merge.workers.rejected)
        ),
    )
    return ClusterOverlay(
        overlay=merge.overlay(held),
        queues=len(merge.merged.accepted),
        workers=len(merge.workers.accepted),
        connections=len(merge.connections.accepted),
        rejected=rejected,
    )
