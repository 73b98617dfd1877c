"""A new worker's ServiceAccount and Deployment, applied before the engine runs.

Server-side-applied under the daemon's field manager only where nothing exists yet; the
``up`` that follows takes every field over, then the daemon lets go. The engine stays the
truth.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from twc import builders
from twc.connections import default_registry
from twc.kube.workloads import ObjectRef
from twc.spec import Fleet, ResolvedWorker

__all__ = [
    "EARLY_FIELD_MANAGER",
    "EarlyApplier",
    "ObjectRef",
    "early_objects",
    "plan_release",
]

EARLY_FIELD_MANAGER = "twc-early-apply"


class EarlyApplier(Protocol):
    """The cluster calls early apply needs (:class:`twc.kube.client.Cluster`)."""

    def exists(self, ref: ObjectRef) -> bool: ...

    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        """Server-side apply without forcing conflicts."""

    def release(self, ref: ObjectRef, field_manager: str) -> bool:
        """Drop ``field_manager``'s fields; False if the object is gone."""

    def delete(self, ref: ObjectRef) -> None: ...

    def managed_by(self, field_manager: str) -> list[ObjectRef]:
        """Worker Deployments and ServiceAccounts ``field_manager`` owns fields of."""


def early_objects(
    worker: ResolvedWorker,
    fleet: Fleet,
    *,
    read_secret: Callable[[str, str], Mapping[str, bytes]] | None,
    temporal_address: str | None = None,
    replicas: int | None = None,
    stack: str | None = None,
) -> list[dict[str, Any]]:
    """The ServiceAccount and Deployment the program would apply for ``worker``.

    Raises LookupError when the connection's secret is missing, TwcConnectionError when
    the connection does not resolve."""
    conn = default_registry().resolve_worker(worker, fleet)
    if temporal_address:
        conn = dataclasses.replace(conn, host_port=temporal_address)
    keys: frozenset[str] | None = None
    digest: str | None = None
    if conn.secret_name is not None:
        if read_secret is None:
            raise LookupError("no access to the connection's secret")
        data = read_secret(conn.secret_source_namespace or worker.namespace, conn.secret_name)
        digest = conn.secret_digest(data)
        keys = frozenset(data)
    deployment = builders.worker_deployment(
        worker,
        conn,
        conn.fingerprint(digest),
        replicas=replicas if worker.autoscaling else None,
        options=builders.PodTemplateOptions(secret_keys=keys),
        connection_name=builders.connection_name(conn),
        stack=stack,
    )
    return [builders.worker_service_account(worker, stack=stack), deployment]


def plan_release(
    pending: Collection[ObjectRef], desired_workers: Collection[str]
) -> tuple[list[ObjectRef], list[ObjectRef]]:
    """After an ``up``: ``(release, delete)``, objects of workers still desired and of the rest."""
    wanted = set(desired_workers)
    release = sorted(r for r in set(pending) if r.worker in wanted)
    delete = sorted(r for r in set(pending) if r.worker not in wanted)
    return release, delete
