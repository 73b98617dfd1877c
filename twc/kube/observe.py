"""The desired state's inputs read from the cluster once, for ``twc up``, ``twc preview``
and plain ``pulumi up``: the same :class:`~twc.desired.DesiredInputs` the daemon keeps in
watch caches, so every entry point computes the same desired state."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from twc.connections import WatchedKind
from twc.desired import QUEUE_KIND_KEY, STACKS_KEY, DesiredInputs
from twc.kube.client import KubeClient
from twc.kube.record import RecordStore
from twc.kube.watch import NativeWatch, QueueWatcher
from twc.kube.workloads import Workloads, versions
from twc.rollout import VersionInput, WorkerVersions


def observe_inputs(
    kube: KubeClient,
    kinds: Iterable[WatchedKind],
    *,
    fleet: Mapping[str, Any] | None = None,
    record: RecordStore | None = None,
    select: Mapping[str, Any] | None = None,
) -> DesiredInputs:
    """The desired state's inputs as the cluster shows them now (``record``: accepted
    specs and selections); raises when replicas or an existing record cannot be read."""
    found = record.load() if record is not None else None
    accepted: Mapping[str, Any] = found.accepted if found is not None else {}
    queues = QueueWatcher(kube.custom, resync_interval=0.1)
    native = NativeWatch(kube.custom, kinds, resync_interval=0.1)
    for watcher in [queues, *native.watchers().values()]:
        # A failed list makes the kind unknown (its observed() says why), never no objects.
        with contextlib.suppress(Exception):
            watcher.list_now()
    cluster = {QUEUE_KIND_KEY: queues.observed(), **native.observed()}
    select = (fleet or {}).get("select") or select
    if select and record is not None:
        cluster[STACKS_KEY] = record.selections(select, publish=False)
    replicas = Workloads(kube, stack=record.stack if record is not None else None).worker_replicas()
    return DesiredInputs(
        fleet=dict(fleet) if fleet is not None else None,
        cluster={k: v.trimmed() for k, v in cluster.items()},
        replicas=replicas,
        accepted=dict(accepted),
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
