"""A new worker's ServiceAccount and Deployment, applied before the engine runs.

The daemon builds a new worker's objects with the same builders the program uses (the
same ServiceAccount, Deployment and connection fingerprint) and server-side-applies
them under its own field manager, so the worker starts without waiting for an engine
run; the ``up`` that follows takes ownership of every field (a server-side apply is an
upsert: equal values, nothing changes, no pod rolls) and records them in the stack.

Only objects that do not exist yet are applied: one already there belongs to the
engine or to someone else. Everything applied early carries the stack's label
(``twc.temporal.io/stack``), and objects a killed daemon left are found by that label
and the field manager, so one stack's daemon never releases or deletes another's.
Once the ``up`` succeeded the daemon gives up its field manager (an apply of an empty
body), so the engine is the only owner again; an object whose worker is gone by then
is deleted. The engine's ``up`` stays the truth when the two disagree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from twc import builders
from twc.connections import default_registry
from twc.kube.workloads import ObjectRef, ref_of
from twc.spec import Fleet, ResolvedWorker

__all__ = [
    "EARLY_FIELD_MANAGER",
    "EarlyApplier",
    "ObjectRef",
    "early_objects",
    "plan_release",
    "ref_of",
]

EARLY_FIELD_MANAGER = "twc-early-apply"
"""The field manager of objects the daemon applies ahead of the engine."""


class EarlyApplier(Protocol):
    """The cluster calls early apply needs (:class:`twc.kube.client.Cluster`)."""

    def exists(self, ref: ObjectRef) -> bool:
        """Whether the object is in the API server already."""

    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        """Server-side apply ``obj`` under ``field_manager``, without forcing conflicts."""

    def release(self, ref: ObjectRef, field_manager: str) -> bool:
        """Drop ``field_manager``'s ownership of the object; False if it is gone."""

    def delete(self, ref: ObjectRef) -> None:
        """Delete the object (gone already is fine)."""

    def managed_by(self, field_manager: str) -> list[ObjectRef]:
        """Worker Deployments and ServiceAccounts ``field_manager`` still owns fields of."""


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

    Mirrors the program: the connection resolved through the registry (with the local
    environment's address override), its credential secret read where the program reads
    it (the ClusterConnection's ``secretSource`` namespace, else the worker's) for the
    fingerprint and the keys the pod template mounts.

    Args:
        worker: The new worker.
        fleet: The fleet it belongs to (for its connection).
        read_secret: Reads a Secret's data; raises ``LookupError`` when missing.
        temporal_address: The stack's ``twc:temporalAddress`` override, if any.
        replicas: The autoscaler's replicas for an autoscaled worker, else ``None``.
        stack: The stack, labelled on both objects as the program labels them.

    Returns:
        The two manifests, ServiceAccount first.

    Raises:
        LookupError: The connection's secret is missing (the ``up`` reports it).
        TwcConnectionError: The connection does not resolve.
    """
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
    """After a successful ``up``: which early objects to release, which to delete.

    Returns:
        ``(release, delete)``: objects of workers still desired (the engine owns them
        now) and objects of workers no longer desired (nobody will).
    """
    wanted = set(desired_workers)
    release = sorted(r for r in set(pending) if r.worker in wanted)
    delete = sorted(r for r in set(pending) if r.worker not in wanted)
    return release, delete
