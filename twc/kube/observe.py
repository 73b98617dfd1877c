"""The desired state's inputs, read from the cluster once.

The daemon keeps the cluster's objects in watch caches; ``twc up``, ``twc preview`` and
the program under plain ``pulumi up`` read them once, here, into the same
:class:`~twc.desired.DesiredInputs` the daemon builds. All of them then compute the
desired state through :func:`twc.desired.desired_fleet`, so a pull request's preview,
a manual ``up`` and the daemon agree on what should run (and none of them deletes the
workers that come from the cluster).

Autoscaled workers keep the replicas they run with: what the cluster runs now is the
autoscaler's last decision. The last accepted spec of each object comes from the stack's
record (:mod:`twc.kube.record`), which the daemon writes, so an object that is invalid
now keeps its workers here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from twc.connections import WatchedKind
from twc.desired import QUEUE_KIND_KEY, STACKS_KEY, DesiredInputs, ObjectList
from twc.kube.client import KubeClient
from twc.kube.record import RecordStore
from twc.kube.versions import versions
from twc.kube.watch import NativeWatch, QueueWatcher, list_failure
from twc.kube.workloads import Workloads
from twc.rollout import VersionInput, WorkerVersions

__all__ = ["observe_cluster", "observe_inputs", "running_versions"]


def observe_cluster(kube: KubeClient, kinds: Iterable[WatchedKind]) -> dict[str, ObjectList]:
    """List the Queue, TemporalWorker and connection objects once.

    A kind whose list fails is *unknown* (its failure named); a 404 means no objects
    of that kind only when its CRD is gone too.
    """
    out: dict[str, ObjectList] = {}
    queues = QueueWatcher(kube.custom, resync_interval=0.1)
    try:
        queues.list_now()
        out[QUEUE_KIND_KEY] = queues.observed()
    except Exception as exc:  # noqa: BLE001 - a failed list makes the kind unknown, never no objects
        out[QUEUE_KIND_KEY] = ObjectList.unknown(f"{queues.crd}: {list_failure(exc)}")
    native = NativeWatch(kube.custom, kinds, resync_interval=0.1)
    for key, watcher in native.watchers().items():
        try:
            watcher.list_now()
            out[key] = watcher.observed()
        except Exception as exc:  # noqa: BLE001 - a failed list makes the kind unknown, never no objects
            out[key] = ObjectList.unknown(f"{watcher.crd}: {list_failure(exc)}")
    return out


def observe_inputs(
    kube: KubeClient,
    kinds: Iterable[WatchedKind],
    *,
    fleet: Mapping[str, Any] | None = None,
    accepted: Mapping[str, Any] | None = None,
    record: RecordStore | None = None,
    select: Mapping[str, Any] | None = None,
) -> DesiredInputs:
    """The inputs of the desired state as the cluster shows them now.

    Args:
        kube: The cluster.
        kinds: The connection kinds to read (the registry's).
        fleet: The fleet document, passed on to the program as the caller validated it.
        accepted: The last accepted spec of each object, when known.
        record: The stack's record to read the accepted specs from (when ``accepted``
            is not given), and the other stacks' selections (when the fleet selects).
        select: The fleet's ``select``, when ``fleet`` is not given.

    Raises:
        Exception: The live replicas cannot be read (without them autoscaled workers
            would be reset to their minimum), or the record exists and cannot be read
            (without it an object that is invalid now would lose its workers).
    """
    if accepted is None and record is not None:
        found = record.load()
        accepted = found.accepted if found is not None else {}
    cluster = observe_cluster(kube, kinds)
    select = (fleet or {}).get("select") or select
    if select and record is not None:
        cluster[STACKS_KEY] = record.selections(select, publish=False)
    replicas = Workloads(kube, stack=record.stack if record is not None else None).worker_replicas()
    return DesiredInputs(
        fleet=dict(fleet) if fleet is not None else None,
        cluster={k: v.trimmed() for k, v in cluster.items()},
        replicas=replicas,
        accepted=dict(accepted or {}),
        versions=running_versions(kube),
    )


def running_versions(kube: KubeClient) -> dict[str, WorkerVersions]:
    """Every versioned worker's versions as they run (no plan: nothing is deleted)."""
    return {
        worker: WorkerVersions(
            versions={
                build: VersionInput(replicas=seen.deployment.replicas, spec=seen.spec)
                for build, seen in builds.items()
            }
        )
        for worker, builds in versions(kube).items()
    }
