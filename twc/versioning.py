"""Worker Versioning in Temporal, the I/O of versioned rollouts (the pure part is
:mod:`twc.rollout`): the worker-deployment calls, their messages read as the rollout model,
and the two halves of a rollout step around the pure planner (observing every versioned
worker, carrying out its plan). Routing changes carry the conflict token they were planned
from; one worker's failure is its own error, never another's."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.api.deployment.v1 import WorkerDeploymentVersion as DeploymentVersion
from temporalio.api.workflowservice.v1 import (
    DeleteWorkerDeploymentVersionRequest,
    DescribeWorkerDeploymentRequest,
    DescribeWorkerDeploymentVersionRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
    UpdateWorkerDeploymentVersionMetadataRequest,
)
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import (
    PinnedVersioningOverride,
    WorkerDeploymentVersion,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from twc.connections import default_registry
from twc.rollout import (
    MAX_STAGES,
    GateRun,
    GateStart,
    GateStatus,
    RolloutObservation,
    RolloutPlan,
    Routing,
    RoutingChange,
    RoutingKind,
    TemporalVersion,
    VersionDeployment,
    VersionStatus,
    gate_workflow_id,
)
from twc.rollout._spec import build_id_of, deployment_name_of, policy_of
from twc.spec import Fleet, ResolvedWorker
from twc.timestamps import rfc3339

logger = logging.getLogger(__name__)

T = TypeVar("T")
_WORKFLOW_QUEUE = 1  # temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
_FAILED = {WorkflowExecutionStatus[name] for name in ("FAILED", "TIMED_OUT", "TERMINATED")}
ROLLED_BACK_KEY = "twc.temporal.io/rolled-back"
"""The version metadata entry twc records a failure-rate rollback in."""
_RPC_TIMEOUT = timedelta(seconds=10)
GATE_TIMEOUT = timedelta(hours=1)  # the official controller's

# temporal.api.enums.v1: WorkerDeploymentVersionStatus, VersionDrainageStatus and
# WorkflowExecutionStatus (6, continued as new: the chain runs on).
_VERSIONS = ("INACTIVE", "CURRENT", "RAMPING", "DRAINING", "DRAINED")
_VERSION_STATUS = {i: VersionStatus[name] for i, name in enumerate(_VERSIONS, 1)}
_DRAINAGE = {1: VersionStatus.DRAINING, 2: VersionStatus.DRAINED}
_RUNS = ("RUNNING", "COMPLETED", "FAILED", "CANCELED", "TERMINATED", "RUNNING", "TIMED_OUT")
_WORKFLOW_STATUS = {i: GateStatus[name] for i, name in enumerate(_RUNS, 1)}


class ConflictError(Exception):
    """Routing changed after it was described: the change was not made."""


@dataclass(frozen=True, slots=True)
class VersionDetail:
    """What DescribeWorkerDeploymentVersion says about one version."""

    task_queues: tuple[str, ...]  # its workflow task queues (where gates run)
    backlog: int | None  # None without stats
    rolled_back: str | None = None  # why twc rolled it back (its metadata), once it did


@dataclass(frozen=True, slots=True)
class Backlog:
    """A task queue's approximate backlog summed over task-queue types; ``busy`` while
    tasks were added or dispatched lately (Temporal's rates over its last 30 s)."""

    count: int
    busy: bool = False

    @classmethod
    def of(cls, stats: Sequence[Any]) -> Backlog:
        """The backlog DescribeTaskQueue ``stats`` (one per type) report."""
        count = sum(int(s.approximate_backlog_count) for s in stats)
        return cls(count, any(s.tasks_add_rate > 0 or s.tasks_dispatch_rate > 0 for s in stats))

    @property
    def scaled(self) -> int:
        """What the autoscaler scales on: at least 1 while busy, since work in flight leaves
        no backlog, yet scaling to zero under it would stop it and stall the next task."""
        return max(self.count, 1) if self.busy else self.count


async def _unless_not_found(call: Awaitable[T]) -> T | None:
    """The call's answer, or ``None`` when Temporal does not know the object."""
    try:
        return await call
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


class WorkerVersioning:
    """Worker Versioning calls in one Temporal namespace, changes made as ``identity``."""

    def __init__(self, client: Client, namespace: str, *, identity: str = "twc") -> None:
        self.client = client
        self.namespace = namespace
        self.identity = identity

    async def routing(self, deployment_name: str) -> Routing | None:
        """The deployment's routing and versions; ``None`` before any version polled."""
        request = DescribeWorkerDeploymentRequest(
            namespace=self.namespace, deployment_name=deployment_name
        )
        call = self.client.workflow_service.describe_worker_deployment
        response = await _unless_not_found(call(request, timeout=_RPC_TIMEOUT))
        return routing_from_describe(response) if response is not None else None

    async def version(
        self, deployment_name: str, build_id: str, *, task_queue: str | None = None
    ) -> VersionDetail | None:
        """A version's workflow task queues and, with ``task_queue``, that queue's
        backlog; ``None`` when Temporal does not know it."""
        request = DescribeWorkerDeploymentVersionRequest(
            namespace=self.namespace,
            deployment_version=_version(deployment_name, build_id),
            report_task_queue_stats=task_queue is not None,
        )
        call = self.client.workflow_service.describe_worker_deployment_version
        response = await _unless_not_found(call(request, timeout=_RPC_TIMEOUT))
        if response is None:
            return None
        infos = response.worker_deployment_version_info.task_queue_infos
        queues = tuple(sorted({tq.name for tq in infos if int(tq.type) == _WORKFLOW_QUEUE}))
        stats = [
            tq.stats
            for tq in response.version_task_queues
            if tq.name == task_queue and tq.HasField("stats")
        ]
        # No statistics is unknown, never zero (zero would scale the version down).
        backlog = Backlog.of(stats).scaled if stats else None
        entries = response.worker_deployment_version_info.metadata.entries
        note = entries.get(ROLLED_BACK_KEY)
        said = (
            self.client.data_converter.payload_converter.from_payloads([note])[0] if note else None
        )
        return VersionDetail(queues, backlog, str(said) if said is not None else None)

    async def failures(
        self, deployment_name: str, build_id: str, since: float
    ) -> dict[str, tuple[int, int]]:
        """Per workflow type, ``(closed, failed)`` of the version's workflows closed since
        ``since`` (failed, timed out or terminated; the latest thousand), from visibility."""
        query = (
            f"TemporalWorkerDeploymentVersion = '{deployment_name}:{build_id}' AND CloseTime > "
            f"'{rfc3339(since)}' AND ExecutionStatus NOT IN ('Running', 'ContinuedAsNew')"
        )
        counts: dict[str, tuple[int, int]] = {}
        async for run in self.client.list_workflows(query, limit=1000, rpc_timeout=_RPC_TIMEOUT):
            closed, failed = counts.get(run.workflow_type, (0, 0))
            counts[run.workflow_type] = (closed + 1, failed + (run.status in _FAILED))
        return counts

    async def record_rollback(self, deployment_name: str, build_id: str, why: str) -> None:
        """Record on the version in Temporal that twc rolled it back, and why."""
        payload = self.client.data_converter.payload_converter.to_payloads([why])[0]
        request = UpdateWorkerDeploymentVersionMetadataRequest(
            namespace=self.namespace,
            deployment_version=_version(deployment_name, build_id),
            upsert_entries={ROLLED_BACK_KEY: payload},
            identity=self.identity,
        )
        service = self.client.workflow_service
        await service.update_worker_deployment_version_metadata(request, timeout=_RPC_TIMEOUT)

    async def gate_runs(self, runs: Iterable[tuple[str, str]]) -> dict[str, GateRun]:
        """The existing gate runs among ``(workflow ID, task queue)``, by workflow ID."""
        found: dict[str, GateRun] = {}
        for workflow_id, task_queue in runs:
            handle = self.client.get_workflow_handle(workflow_id)
            described = await _unless_not_found(handle.describe(rpc_timeout=_RPC_TIMEOUT))
            if described is None:
                continue
            status = gate_status(int(described.raw_description.workflow_execution_info.status))
            message = f"the workflow {status.value.lower()}" if status.failed else ""
            if status is GateStatus.FAILED:
                try:
                    await handle.result(rpc_timeout=_RPC_TIMEOUT)
                except WorkflowFailureError as exc:
                    message = str(getattr(exc.cause, "message", None) or exc.cause or exc)
                except Exception as exc:  # noqa: BLE001 - the message is only words for people
                    message = str(exc)
            found[workflow_id] = GateRun(workflow_id, task_queue, status, message)
        return found

    async def start_gate(self, deployment_name: str, start: GateStart, arg: Any = None) -> None:
        """Start a gate run pinned to its version; a run already there is left alone."""
        try:
            await self.client.start_workflow(
                start.gate.workflow_type,
                args=[] if arg is None else [arg],
                id=start.workflow_id,
                task_queue=start.task_queue,
                execution_timeout=GATE_TIMEOUT,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                versioning_override=PinnedVersioningOverride(
                    WorkerDeploymentVersion(deployment_name, start.build_id)
                ),
                rpc_timeout=_RPC_TIMEOUT,
            )
        except WorkflowAlreadyStartedError:
            logger.debug("gate %s already started", start.workflow_id)

    async def apply(self, deployment_name: str, change: RoutingChange) -> bytes:
        """Make one routing change with its conflict token; returns the new token. Raises
        ConflictError when routing changed since it was described."""
        ramp = change.kind is RoutingKind.SET_RAMPING
        common: dict[str, Any] = {
            "namespace": self.namespace,
            "deployment_name": deployment_name,
            "conflict_token": change.conflict_token,
            "identity": self.identity,
            # An empty build ID with 0 % removes the ramp.
            "build_id": "" if change.kind is RoutingKind.CLEAR_RAMP else change.build_id,
        }
        svc = self.client.workflow_service
        try:
            if change.kind is RoutingKind.SET_CURRENT:
                current = SetWorkerDeploymentCurrentVersionRequest(**common)
                done: Any = svc.set_worker_deployment_current_version(current, timeout=_RPC_TIMEOUT)
            else:
                percentage = change.percentage if ramp else 0
                ramping = SetWorkerDeploymentRampingVersionRequest(percentage=percentage, **common)
                done = svc.set_worker_deployment_ramping_version(ramping, timeout=_RPC_TIMEOUT)
            return bytes((await done).conflict_token)
        except RPCError as exc:
            refused = exc.status in (RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.ABORTED)
            if refused and "conflict" in exc.message.lower():
                raise ConflictError(exc.message) from exc
            raise

    async def forget(self, deployment_name: str, build_id: str) -> bool:
        """Delete a version in Temporal: True when deleted (or already gone), False when
        it still has pollers or drains (tried again later)."""
        request = DeleteWorkerDeploymentVersionRequest(
            namespace=self.namespace,
            deployment_version=_version(deployment_name, build_id),
            identity=self.identity,
        )
        service = self.client.workflow_service
        try:
            await _unless_not_found(
                service.delete_worker_deployment_version(request, timeout=_RPC_TIMEOUT)
            )
        except RPCError as exc:
            if exc.status != RPCStatusCode.FAILED_PRECONDITION:
                raise
            logger.debug("version %s of %s not deleted yet: %s", build_id, deployment_name, exc)
            return False
        return True


def _version(deployment_name: str, build_id: str) -> DeploymentVersion:
    return DeploymentVersion(deployment_name=deployment_name, build_id=build_id)


def _time(message: Any, name: str) -> float | None:
    if not message.HasField(name):
        return None
    value = getattr(message, name)
    seconds = float(value.seconds) + value.nanos / 1e9
    return seconds if seconds > 0 else None


def routing_from_describe(response: Any) -> Routing:
    """A DescribeWorkerDeploymentResponse as :class:`~twc.rollout.Routing`."""
    info = response.worker_deployment_info
    config = info.routing_config
    current = config.current_deployment_version.build_id or None
    ramping = config.ramping_deployment_version.build_id or None
    versions: dict[str, TemporalVersion] = {}
    for summary in info.version_summaries:
        build = summary.deployment_version.build_id
        if not build:
            continue
        # A version's status; unset, it is read from routing, then drainage.
        drainage = int(summary.drainage_info.status) if summary.HasField("drainage_info") else 0
        status = (
            _VERSION_STATUS.get(int(summary.status))
            or {ramping: VersionStatus.RAMPING, current: VersionStatus.CURRENT}.get(build)
            or _DRAINAGE.get(drainage, VersionStatus.INACTIVE)
        )
        drained = None
        if status is VersionStatus.DRAINED and summary.HasField("drainage_info"):
            drained = _time(summary.drainage_info, "last_changed_time")
        versions[build] = TemporalVersion(
            build_id=build,
            status=status,
            drained_since=drained,
            deactivated_at=_time(summary, "last_deactivation_time"),
        )
    return Routing(
        conflict_token=bytes(response.conflict_token),
        current=current,
        ramping=ramping,
        ramp_percentage=float(config.ramping_version_percentage) if ramping else 0.0,
        ramp_changed_at=(
            _time(config, "ramping_version_percentage_changed_time") if ramping else None
        ),
        versions=versions,
    )


def gate_status(status: int) -> GateStatus:
    """A WorkflowExecutionStatus as a gate run's status (unknown values run)."""
    return _WORKFLOW_STATUS.get(int(status), GateStatus.RUNNING)


SecretReader = Callable[[str, str], Mapping[str, bytes]]
"""Reads a Secret's decoded data: ``(namespace, name) -> data``; raises LookupError."""
# (namespace, inputFrom) -> the parsed JSON of a gate's input; raises LookupError.
GateInputReader = Callable[[str, Mapping[str, Any]], Any]


@dataclass(kw_only=True)
class WorkerClients:
    """A :class:`WorkerVersioning` per worker, through the worker's own connection."""

    read_secret: SecretReader | None = None
    temporal_address: str | None = None  # replaces every connection's hostPort
    identity: str = "twc"

    async def for_worker(self, worker: ResolvedWorker, fleet: Fleet) -> WorkerVersioning:
        """The calls for ``worker``'s Temporal namespace, through its connection; raises
        TwcConnectionError or LookupError (an unreadable credential secret)."""
        conn = default_registry().resolve_worker(worker, fleet).for_twc()
        if self.temporal_address:
            conn = dataclasses.replace(conn, host_port=self.temporal_address)
        secret = None
        if conn.secret_name is not None:
            if self.read_secret is None:
                raise LookupError(f"cannot read the credential secret of {conn.identity}")
            namespace = conn.secret_source_namespace or conn.identity.namespace or worker.namespace
            secret = await asyncio.to_thread(self.read_secret, namespace, conn.secret_name)
        client = await conn.client(worker.temporal_namespace, secret)
        return WorkerVersioning(client, worker.temporal_namespace, identity=self.identity)


def _unobserved(
    worker: ResolvedWorker, deployments: Mapping[str, VersionDeployment]
) -> RolloutObservation:
    policy = policy_of(worker)
    assert policy is not None, "only versioned workers are observed"
    return RolloutObservation(
        worker=worker.stack_key,
        target=build_id_of(worker),
        policy=policy,
        deployment_name=deployment_name_of(worker),
        task_queue=worker.task_queue_name,
        deployments=dict(deployments),
    )


async def observe_version(
    versioning: WorkerVersioning,
    seen: RolloutObservation,
    *,
    backlogs: bool = False,
    every_gate: bool = False,
) -> RolloutObservation:
    """``seen`` (a versioned worker before Temporal was asked) as Temporal reports it now: routing,
    the target's task queues and gate runs (with ``every_gate``, also those a Current target or an
    ungated policy no longer needs), every version's backlog when asked."""
    name, policy = seen.deployment_name, seen.policy
    routing = await versioning.routing(name)
    task_queues: tuple[str, ...] = ()
    rolled_back: str | None = None
    counts: dict[str, int | None] = {}
    queue = seen.task_queue if backlogs else None
    others = [b for b in seen.deployments if b != seen.target] if backlogs else []
    for build in [seen.target, *others] if routing is not None else []:
        if routing is None or routing.status(build) is VersionStatus.NOT_REGISTERED:
            continue
        detail = await versioning.version(name, build, task_queue=queue)
        if build == seen.target and detail is not None:
            task_queues, rolled_back = detail.task_queues, detail.rolled_back
        if backlogs:
            counts[build] = detail.backlog if detail is not None else None
    failures: dict[str, dict[str, tuple[int, int]]] = {}
    rule, current = policy.failure_rate, routing.current if routing else None
    if rule and routing and routing.ramping == seen.target and current and not rolled_back:
        since = time.time() - rule.window_seconds
        for build in (seen.target, current):
            failures[build] = await versioning.failures(name, build, since)
    seen = dataclasses.replace(
        seen,
        routing=routing,
        task_queues=task_queues,
        backlogs=counts,
        rolled_back=rolled_back,
        failures=failures,
    )
    wanted = [
        (gate_workflow_id(name, seen.target, tq, stage), tq)
        for stage in range(min(len(policy.steps), MAX_STAGES) + 1)
        for tq in seen.gate_queues
    ]
    has_gates = policy.gate is not None or any(s.gate is not None for s in policy.steps)
    # Once the target is Current its gates have nothing more to decide.
    pending = routing is not None and routing.current != seen.target
    gates = await versioning.gate_runs(wanted) if every_gate or (has_gates and pending) else {}
    return dataclasses.replace(seen, gates=gates)


async def observe_rollouts(
    workers: Iterable[ResolvedWorker],
    fleet: Fleet,
    deployments: Mapping[str, Mapping[str, VersionDeployment]],
    clients: WorkerClients,
    *,
    concurrency: int = 8,
) -> dict[str, RolloutObservation]:
    """Every versioned worker of ``workers`` observed; a failure is its ``error``."""
    versioned = [w for w in workers if w.rollout is not None]
    limit = asyncio.Semaphore(max(1, concurrency))

    async def one(worker: ResolvedWorker) -> RolloutObservation:
        async with limit:
            seen = _unobserved(worker, deployments.get(worker.stack_key, {}))
            try:
                versioning = await clients.for_worker(worker, fleet)
                return await observe_version(
                    versioning, seen, backlogs=worker.autoscaling is not None
                )
            except Exception as exc:  # noqa: BLE001 - one worker's Temporal never stops the others
                return dataclasses.replace(seen, error=f"{type(exc).__name__}: {exc}")

    results = await asyncio.gather(*(one(w) for w in versioned))
    return {seen.worker: seen for seen in results}


@dataclass(frozen=True, slots=True)
class RolloutResult:
    """What carrying out one worker's plan did."""

    worker: str
    done: tuple[str, ...] = ()  # each action taken, in words
    error: str | None = None  # the first action that failed (the rest was not tried)
    conflict: bool = False  # the routing change met a newer routing
    refused: tuple[str, ...] = ()  # versions Temporal would not forget yet


async def carry_out_all(
    plans: Mapping[str, RolloutPlan],
    observed: Mapping[str, RolloutObservation],
    workers: Mapping[str, ResolvedWorker],
    fleet: Fleet,
    clients: WorkerClients,
    *,
    read_input: GateInputReader | None = None,
) -> dict[str, RolloutResult]:
    """Execute every worker's plan that does something: gates, then the routing change,
    then forgetting. A failure is the worker's result error, never raised."""

    async def one(key: str) -> RolloutResult:
        plan, name, worker = plans[key], observed[key].deployment_name, workers[key]
        done: list[str] = []
        refused: list[str] = []
        try:
            versioning = await clients.for_worker(worker, fleet)
            for start in plan.gates:
                arg, source = start.gate.input, start.gate.input_from
                if source is not None and read_input is None:
                    raise LookupError("gate inputFrom cannot be read here")
                if source is not None and read_input is not None:
                    arg = await asyncio.to_thread(read_input, worker.namespace, source)
                await versioning.start_gate(name, start, arg)
                done.append(
                    f"gate `{start.gate.workflow_type}` started on {start.build_id} "
                    f"(task queue {start.task_queue})"
                )
            if plan.rolled_back is not None:  # first, so a crash after it still stops here
                await versioning.record_rollback(name, plan.target, plan.rolled_back)
                done.append(f"rollback of {plan.target} recorded in Temporal")
            if plan.routing is not None:
                await versioning.apply(name, plan.routing)
                done.append(str(plan.routing))
            for build in plan.forget:
                forgotten = await versioning.forget(name, build)
                (done if forgotten else refused).append(
                    f"version {build} deleted in Temporal" if forgotten else build
                )
        except ConflictError as exc:
            return RolloutResult(key, tuple(done), f"routing changed meanwhile: {exc}", True)
        except Exception as exc:  # noqa: BLE001 - reported on the worker; the next iteration retries
            return RolloutResult(key, tuple(done), f"{type(exc).__name__}: {exc}")
        return RolloutResult(key, tuple(done), refused=tuple(refused))

    busy = [
        k
        for k, p in plans.items()
        if k in observed
        and k in workers
        and (p.gates or p.routing is not None or p.forget or p.rolled_back)
    ]
    results = await asyncio.gather(*(one(k) for k in busy))
    return {r.worker: r for r in results}
