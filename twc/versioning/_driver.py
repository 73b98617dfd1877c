"""Observe versioned workers in Temporal, and carry out their plans.

The two halves of a rollout step around the pure planner, shared by the daemon and
``twc up``:

* :func:`observe_rollouts` asks Temporal, per versioned worker, for its routing, the
  target version's task queues, the gate runs and (for autoscaled workers) each live
  version's backlog, and returns :class:`~twc.rollout.RolloutObservation`\\ s;
* :func:`carry_out` executes one worker's plan: gate workflows first, then the one
  routing change with its conflict token, then versions to forget.

A worker whose Temporal cannot be asked is observed with its error (the planner then
holds every version); one worker's failure never stops another's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twc.connections import Registry, default_registry
from twc.rollout import (
    MAX_STAGES,
    RolloutObservation,
    RolloutPlan,
    VersionDeployment,
    VersionStatus,
    gate_workflow_id,
)
from twc.rollout._spec import build_id_of, deployment_name_of, policy_of
from twc.spec import Fleet, ResolvedWorker
from twc.versioning._client import ConflictError, WorkerVersioning

__all__ = [
    "GateInputReader",
    "RolloutResult",
    "SecretReader",
    "WorkerClients",
    "carry_out",
    "carry_out_all",
    "observe_rollout",
    "observe_rollouts",
]

logger = logging.getLogger(__name__)

SecretReader = Callable[[str, str], Mapping[str, bytes]]
"""Reads a Secret's decoded data: ``(namespace, name) -> data``; raises LookupError."""
GateInputReader = Callable[[str, Mapping[str, Any]], Any]
"""Reads a gate's ``inputFrom`` (a ConfigMap or Secret key) in the worker's namespace
and returns the parsed JSON; raises LookupError when it is missing."""


class WorkerClients:
    """A :class:`WorkerVersioning` per worker, through the worker's own connection."""

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        read_secret: SecretReader | None = None,
        temporal_address: str | None = None,
        identity: str = "twc",
        rpc_timeout: float = 10.0,
    ) -> None:
        """Prepare the factory.

        Args:
            registry: The connection-provider registry (the process-wide one).
            read_secret: Reads credential secrets (mTLS and API-key connections).
            temporal_address: Replaces every connection's hostPort, as the program's
                ``twc:temporalAddress`` does (the embedded local environment).
            identity: Recorded by Temporal on each change.
            rpc_timeout: Seconds allowed per call.
        """
        self._registry = registry
        self._read_secret = read_secret
        self._address = temporal_address
        self._identity = identity
        self._timeout = rpc_timeout

    async def for_worker(self, worker: ResolvedWorker, fleet: Fleet) -> WorkerVersioning:
        """The calls for ``worker``'s Temporal namespace, through its connection.

        Raises:
            TwcConnectionError: The connection does not resolve or cannot connect.
            LookupError: Its credential secret cannot be read.
        """
        registry = self._registry or default_registry()
        conn = registry.resolve_worker(worker, fleet)
        if self._address:
            conn = dataclasses.replace(conn, host_port=self._address)
        secret = None
        if conn.secret_name is not None:
            if self._read_secret is None:
                raise LookupError(f"cannot read the credential secret of {conn.identity}")
            namespace = conn.secret_source_namespace or conn.identity.namespace or worker.namespace
            secret = await asyncio.to_thread(self._read_secret, namespace, conn.secret_name)
        client = await conn.client(worker.temporal_namespace, secret)
        return WorkerVersioning(
            client, worker.temporal_namespace, identity=self._identity, rpc_timeout=self._timeout
        )


async def observe_rollout(
    versioning: WorkerVersioning,
    worker: ResolvedWorker,
    deployments: Mapping[str, VersionDeployment],
    *,
    backlogs: bool = False,
) -> RolloutObservation:
    """One versioned worker as Temporal reports it now.

    Args:
        versioning: The calls for the worker's namespace.
        worker: The worker (its spec names the target and the policy).
        deployments: Its versions' Deployments in the cluster.
        backlogs: Also read each live version's backlog (autoscaled workers).

    Raises:
        Exception: Whatever the calls raised (the caller records it as the error).
    """
    policy = policy_of(worker)
    assert policy is not None, "only versioned workers are observed"
    name = deployment_name_of(worker)
    seen = RolloutObservation(
        worker=worker.stack_key,
        target=build_id_of(worker),
        policy=policy,
        deployment_name=name,
        task_queue=worker.task_queue_name,
        deployments=dict(deployments),
    )
    routing = await versioning.routing(name)
    task_queues: tuple[str, ...] = ()
    counts: dict[str, int | None] = {}
    if routing is not None:
        if routing.status(seen.target) is not VersionStatus.NOT_REGISTERED:
            detail = await versioning.version(
                name, seen.target, task_queue=worker.task_queue_name if backlogs else None
            )
            if detail is not None:
                task_queues = detail.task_queues
                if backlogs:
                    counts[seen.target] = detail.backlog
        if backlogs:
            for build in deployments:
                if build in counts or routing.status(build) is VersionStatus.NOT_REGISTERED:
                    continue
                detail = await versioning.version(name, build, task_queue=worker.task_queue_name)
                counts[build] = detail.backlog if detail is not None else None
    seen = dataclasses.replace(seen, routing=routing, task_queues=task_queues, backlogs=counts)
    queues = seen.gate_queues
    wanted = [
        (gate_workflow_id(name, seen.target, tq, stage), tq)
        for stage in range(min(len(policy.steps), MAX_STAGES) + 1)
        for tq in queues
    ]
    has_gates = policy.gate is not None or any(s.gate is not None for s in policy.steps)
    # Once the target is Current its gates have nothing more to decide.
    pending = routing is not None and routing.current != seen.target
    gates = await versioning.gate_runs(wanted) if has_gates and pending else {}
    return dataclasses.replace(seen, gates=gates)


async def observe_rollouts(
    workers: Iterable[ResolvedWorker],
    fleet: Fleet,
    deployments: Mapping[str, Mapping[str, VersionDeployment]],
    clients: WorkerClients,
    *,
    concurrency: int = 8,
    autoscaled: bool = True,
) -> dict[str, RolloutObservation]:
    """Observe every versioned worker of ``workers`` (the others are skipped).

    A worker whose observation fails is returned with ``error`` set.
    """
    versioned = [w for w in workers if w.rollout is not None]
    limit = asyncio.Semaphore(max(1, concurrency))

    async def one(worker: ResolvedWorker) -> RolloutObservation:
        async with limit:
            found = deployments.get(worker.stack_key, {})
            try:
                versioning = await clients.for_worker(worker, fleet)
                return await observe_rollout(
                    versioning,
                    worker,
                    found,
                    backlogs=autoscaled and worker.autoscaling is not None,
                )
            except Exception as exc:  # noqa: BLE001 - one worker's Temporal never stops the others
                policy = policy_of(worker)
                assert policy is not None
                return RolloutObservation(
                    worker=worker.stack_key,
                    target=build_id_of(worker),
                    policy=policy,
                    deployment_name=deployment_name_of(worker),
                    task_queue=worker.task_queue_name,
                    deployments=dict(found),
                    error=f"{type(exc).__name__}: {exc}",
                )

    results = await asyncio.gather(*(one(w) for w in versioned))
    return {seen.worker: seen for seen in results}


@dataclass(frozen=True, slots=True)
class RolloutResult:
    """What carrying out one worker's plan did."""

    worker: str
    """The worker."""
    done: tuple[str, ...] = ()
    """Each action taken, in words."""
    error: str | None = None
    """The first action that failed, and why (the rest of the plan was not tried)."""
    conflict: bool = False
    """The routing change met a newer routing (planned again next iteration)."""
    refused: tuple[str, ...] = field(default_factory=tuple)
    """Versions Temporal would not forget yet (pollers linger): tried again later."""


async def carry_out(
    plan: RolloutPlan,
    seen: RolloutObservation,
    versioning: WorkerVersioning,
    *,
    namespace: str,
    read_input: GateInputReader | None = None,
) -> RolloutResult:
    """Execute one worker's plan: gates, then the routing change, then forgetting.

    Args:
        plan: The worker's plan.
        seen: The observation it was planned from.
        versioning: The calls for the worker's Temporal namespace.
        namespace: The worker's Kubernetes namespace (where ``inputFrom`` is read).
        read_input: Reads a gate's ``inputFrom``; without it such gates fail to start.

    Returns:
        What was done; never raises for a Temporal failure (it is the result's error).
    """
    done: list[str] = []
    refused: list[str] = []
    name = seen.deployment_name
    try:
        for start in plan.gates:
            arg = start.gate.input
            if start.gate.input_from is not None:
                if read_input is None:
                    raise LookupError("gate inputFrom cannot be read here")
                arg = await asyncio.to_thread(read_input, namespace, start.gate.input_from)
            await versioning.start_gate(name, start, arg)
            done.append(
                f"gate `{start.gate.workflow_type}` started on {start.build_id} "
                f"(task queue {start.task_queue})"
            )
        if plan.routing is not None:
            await versioning.apply(name, plan.routing)
            done.append(str(plan.routing))
        for build in plan.forget:
            if await versioning.forget(name, build):
                done.append(f"version {build} deleted in Temporal")
            else:
                refused.append(build)
    except ConflictError as exc:
        return RolloutResult(seen.worker, tuple(done), f"routing changed meanwhile: {exc}", True)
    except Exception as exc:  # noqa: BLE001 - reported on the worker; the next iteration retries
        return RolloutResult(seen.worker, tuple(done), f"{type(exc).__name__}: {exc}")
    return RolloutResult(seen.worker, tuple(done), refused=tuple(refused))


async def carry_out_all(
    plans: Mapping[str, RolloutPlan],
    observed: Mapping[str, RolloutObservation],
    workers: Mapping[str, ResolvedWorker],
    fleet: Fleet,
    clients: WorkerClients,
    *,
    read_input: GateInputReader | None = None,
) -> dict[str, RolloutResult]:
    """:func:`carry_out` for every worker whose plan does something."""

    async def one(key: str) -> RolloutResult:
        plan, seen, worker = plans[key], observed[key], workers[key]
        try:
            versioning = await clients.for_worker(worker, fleet)
        except Exception as exc:  # noqa: BLE001 - reported on the worker; the next iteration retries
            return RolloutResult(key, (), f"{type(exc).__name__}: {exc}")
        return await carry_out(
            plan, seen, versioning, namespace=worker.namespace, read_input=read_input
        )

    busy = [
        k
        for k, p in plans.items()
        if k in observed and k in workers and (p.gates or p.routing is not None or p.forget)
    ]
    results = await asyncio.gather(*(one(k) for k in busy))
    return {r.worker: r for r in results}
