"""Temporal's worker-deployment calls, through one temporalio client.

:class:`WorkerVersioning` wraps exactly the calls a versioned rollout needs:
DescribeWorkerDeployment (routing and versions, with the conflict token),
DescribeWorkerDeploymentVersion (task queues, and their backlog with stats),
SetWorkerDeploymentCurrentVersion / SetWorkerDeploymentRampingVersion (with the token
the change was planned from), DeleteWorkerDeploymentVersion, and the gate workflows
(started pinned to the version, with deterministic IDs, and described). temporalio is
imported inside the methods, as elsewhere in twc.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from twc.rollout import (
    GateRun,
    GateStart,
    GateStatus,
    Routing,
    RoutingChange,
    RoutingKind,
)
from twc.versioning._convert import gate_status, routing_from_describe

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["ConflictError", "VersionDetail", "WorkerVersioning"]

logger = logging.getLogger(__name__)

_WORKFLOW_QUEUE = 1  # temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
GATE_TIMEOUT = timedelta(hours=1)
"""A gate run's execution timeout (the official controller's)."""


class ConflictError(Exception):
    """Routing changed after it was described (the conflict token no longer matches):
    the change was not made; the next iteration plans again from what is there now."""


@dataclass(frozen=True, slots=True)
class VersionDetail:
    """What DescribeWorkerDeploymentVersion says about one version."""

    task_queues: tuple[str, ...]
    """Its workflow task queues (where gates run)."""
    backlog: int | None
    """Approximate backlog of its task queues (every type); ``None`` without stats."""


class WorkerVersioning:
    """Worker Versioning calls in one Temporal namespace."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        *,
        identity: str = "twc",
        rpc_timeout: float = 10.0,
    ) -> None:
        """Call through ``client``.

        Args:
            client: A connected temporalio client.
            namespace: The Temporal namespace of the worker deployments.
            identity: Recorded by Temporal on each change (``last modifier``).
            rpc_timeout: Seconds allowed for each call.
        """
        self.client = client
        self.namespace = namespace
        self.identity = identity
        self._timeout = timedelta(seconds=rpc_timeout)

    # ------------------------------------------------------------------ reads
    async def routing(self, deployment_name: str) -> Routing | None:
        """The deployment's routing and versions; ``None`` when Temporal does not know
        it (no version has polled yet).

        Raises:
            RPCError: Temporal refused the call otherwise.
        """
        from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
        from temporalio.service import RPCError, RPCStatusCode

        try:
            response = await self.client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(
                    namespace=self.namespace, deployment_name=deployment_name
                ),
                timeout=self._timeout,
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        return routing_from_describe(response)

    async def version(
        self, deployment_name: str, build_id: str, *, task_queue: str | None = None
    ) -> VersionDetail | None:
        """A version's workflow task queues and, with ``task_queue``, that queue's
        backlog (summed over its types); ``None`` when Temporal does not know it."""
        from temporalio.api.deployment.v1 import WorkerDeploymentVersion
        from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentVersionRequest
        from temporalio.service import RPCError, RPCStatusCode

        try:
            response = await self.client.workflow_service.describe_worker_deployment_version(
                DescribeWorkerDeploymentVersionRequest(
                    namespace=self.namespace,
                    deployment_version=WorkerDeploymentVersion(
                        deployment_name=deployment_name, build_id=build_id
                    ),
                    report_task_queue_stats=task_queue is not None,
                ),
                timeout=self._timeout,
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        info = response.worker_deployment_version_info
        queues = tuple(
            sorted({tq.name for tq in info.task_queue_infos if int(tq.type) == _WORKFLOW_QUEUE})
        )
        backlog: int | None = None
        if task_queue is not None:
            stats = [
                tq.stats
                for tq in response.version_task_queues
                if tq.name == task_queue and tq.HasField("stats")
            ]
            # No statistics is unknown, never zero (zero would scale the version down).
            backlog = sum(int(s.approximate_backlog_count) for s in stats) if stats else None
        return VersionDetail(task_queues=queues, backlog=backlog)

    async def gate_runs(self, runs: Iterable[tuple[str, str]]) -> dict[str, GateRun]:
        """The gate runs that exist among ``(workflow ID, task queue)``, by workflow ID.

        A failed run carries the failure's message.
        """
        from temporalio.client import WorkflowFailureError
        from temporalio.service import RPCError, RPCStatusCode

        found: dict[str, GateRun] = {}
        for workflow_id, task_queue in runs:
            handle = self.client.get_workflow_handle(workflow_id)
            try:
                described = await handle.describe(rpc_timeout=self._timeout)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    continue
                raise
            status = gate_status(int(described.raw_description.workflow_execution_info.status))
            message = ""
            if status is GateStatus.FAILED:
                try:
                    await handle.result(rpc_timeout=self._timeout)
                except WorkflowFailureError as exc:
                    cause = exc.cause
                    message = str(getattr(cause, "message", None) or cause or exc)
                except Exception as exc:  # noqa: BLE001 - the message is only words for people
                    message = str(exc)
            elif status.failed:
                message = f"the workflow {status.value.lower()}"
            found[workflow_id] = GateRun(workflow_id, task_queue, status, message)
        return found

    # ----------------------------------------------------------------- writes
    async def start_gate(self, deployment_name: str, start: GateStart, arg: Any = None) -> None:
        """Start a gate run pinned to its version; a run already there is left alone."""
        from temporalio.common import (
            PinnedVersioningOverride,
            WorkerDeploymentVersion,
            WorkflowIDConflictPolicy,
            WorkflowIDReusePolicy,
        )
        from temporalio.exceptions import WorkflowAlreadyStartedError

        args = [] if arg is None else [arg]
        try:
            await self.client.start_workflow(
                start.gate.workflow_type,
                args=args,
                id=start.workflow_id,
                task_queue=start.task_queue,
                execution_timeout=GATE_TIMEOUT,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                versioning_override=PinnedVersioningOverride(
                    WorkerDeploymentVersion(deployment_name, start.build_id)
                ),
                rpc_timeout=self._timeout,
            )
        except WorkflowAlreadyStartedError:
            logger.debug("gate %s already started", start.workflow_id)

    async def apply(self, deployment_name: str, change: RoutingChange) -> bytes:
        """Make one routing change with the conflict token it was planned from.

        Returns:
            The new conflict token.

        Raises:
            ConflictError: Routing changed since it was described.
            RPCError: Temporal refused the change otherwise.
        """
        from temporalio.api.workflowservice.v1 import (
            SetWorkerDeploymentCurrentVersionRequest,
            SetWorkerDeploymentRampingVersionRequest,
        )
        from temporalio.service import RPCError, RPCStatusCode

        service = self.client.workflow_service
        try:
            if change.kind is RoutingKind.SET_CURRENT:
                current = await service.set_worker_deployment_current_version(
                    SetWorkerDeploymentCurrentVersionRequest(
                        namespace=self.namespace,
                        deployment_name=deployment_name,
                        build_id=change.build_id,
                        conflict_token=change.conflict_token,
                        identity=self.identity,
                    ),
                    timeout=self._timeout,
                )
                return bytes(current.conflict_token)
            ramp = await service.set_worker_deployment_ramping_version(
                SetWorkerDeploymentRampingVersionRequest(
                    namespace=self.namespace,
                    deployment_name=deployment_name,
                    # An empty build ID with 0 % removes the ramp.
                    build_id=change.build_id if change.kind is RoutingKind.SET_RAMPING else "",
                    percentage=change.percentage if change.kind is RoutingKind.SET_RAMPING else 0,
                    conflict_token=change.conflict_token,
                    identity=self.identity,
                ),
                timeout=self._timeout,
            )
            return bytes(ramp.conflict_token)
        except RPCError as exc:
            if exc.status in (RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.ABORTED) and (
                "conflict" in exc.message.lower()
            ):
                raise ConflictError(exc.message) from exc
            raise

    async def forget(self, deployment_name: str, build_id: str) -> bool:
        """Delete a version in Temporal (it must have no pollers and not be draining).

        Returns:
            True when deleted (or already gone); False when Temporal refused because the
            version still has pollers or drains (tried again later).

        Raises:
            RPCError: Temporal refused otherwise.
        """
        from temporalio.api.deployment.v1 import WorkerDeploymentVersion
        from temporalio.api.workflowservice.v1 import DeleteWorkerDeploymentVersionRequest
        from temporalio.service import RPCError, RPCStatusCode

        try:
            await self.client.workflow_service.delete_worker_deployment_version(
                DeleteWorkerDeploymentVersionRequest(
                    namespace=self.namespace,
                    deployment_version=WorkerDeploymentVersion(
                        deployment_name=deployment_name, build_id=build_id
                    ),
                    identity=self.identity,
                ),
                timeout=self._timeout,
            )
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return True
            if exc.status == RPCStatusCode.FAILED_PRECONDITION:
                logger.debug("version %s of %s not deleted yet: %s", build_id, deployment_name, exc)
                return False
            raise
        return True
