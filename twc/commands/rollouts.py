"""Versioned rollouts from ``twc up`` and ``twc preview`` (no daemon needed).

Before the engine runs, :func:`plan_versions` reads every versioned worker's versions
back from the cluster and its routing from Temporal, plans each with the same planner
as the daemon, and puts the versions that stay (and their replicas) into the desired
state's inputs. After a successful ``up``, :func:`drive_rollouts` carries out what is
due — gate workflows, one routing change per worker and round — and repeats for up to
``--rollout-wait`` seconds while routing can still move without another engine run (a
new version starts polling, a gate completes, a shortened pause ends). What is due later
(a long pause, a sunset delay) is said, and done by the next ``twc up`` or the daemon.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from twc.desired import DesiredInputs
from twc.rollout import (
    Phase,
    RolloutObservation,
    RolloutPlan,
    RolloutPolicy,
    RolloutSettings,
    VersionDeployment,
    WorkerVersions,
    plan_observed,
    rollout_status,
    version_inputs,
)

if TYPE_CHECKING:
    from twc.kube.client import KubeClient
    from twc.kube.versions import ObservedVersion
    from twc.spec import Fleet, ResolvedWorker

__all__ = ["RolloutRound", "drive_rollouts", "live_rollouts", "observe_round", "plan_versions"]


@dataclass(frozen=True)
class RolloutRound:
    """Every versioned worker, observed and planned once."""

    workers: Mapping[str, ResolvedWorker]
    """The versioned workers of the desired state."""
    fleet: Fleet
    """The merged fleet (their connections)."""
    observed: Mapping[str, RolloutObservation]
    """What Temporal and the cluster reported."""
    specs: Mapping[str, Mapping[str, Mapping[str, Any] | None]]
    """Per worker, per build ID, the version spec on its Deployment."""
    plans: Mapping[str, RolloutPlan]
    """The planner's verdict per worker."""

    def versions(self) -> dict[str, WorkerVersions]:
        """The desired state's ``versions`` input."""
        out: dict[str, WorkerVersions] = {}
        for key, plan in self.plans.items():
            seen = self.observed[key]
            worker = self.workers[key]
            live = {b: d.replicas for b, d in seen.deployments.items()}
            out[key] = WorkerVersions(
                versions=version_inputs(
                    plan,
                    self.specs.get(key, {}),
                    live if worker.autoscaling is not None else None,
                ),
                status=rollout_status(
                    target=seen.target,
                    deployment_name=seen.deployment_name,
                    routing=seen.routing,
                    deployments=seen.deployments,
                    plan=plan,
                    gates=seen.gates,
                    task_queues=seen.gate_queues,
                ),
            )
        return out


def _clients(kube: KubeClient, temporal_address: str | None, settings: RolloutSettings) -> Any:
    from twc.kube.workloads import read_secret_data
    from twc.versioning import WorkerClients

    return WorkerClients(
        read_secret=lambda ns, name: read_secret_data(kube, ns, name),
        temporal_address=temporal_address,
        identity=settings.identity,
    )


def observe_round(
    kube: KubeClient,
    fleet: Fleet,
    workers: Sequence[ResolvedWorker],
    *,
    temporal_address: str | None,
    settings: RolloutSettings,
    now: float,
) -> RolloutRound:
    """Observe and plan every versioned worker once.

    Raises:
        Exception: The versions' Deployments could not be listed (without them the
            older versions would be deleted).
    """
    from twc.kube.versions import versions
    from twc.versioning import observe_rollouts

    versioned = {w.stack_key: w for w in workers if w.rollout is not None}
    found: dict[str, dict[str, ObservedVersion]] = versions(kube) if versioned else {}
    deployments = {k: {b: v.deployment for b, v in found.get(k, {}).items()} for k in versioned}
    observed = asyncio.run(
        observe_rollouts(
            versioned.values(),
            fleet,
            deployments,
            _clients(kube, temporal_address, settings),
        )
    )
    return RolloutRound(
        workers=versioned,
        fleet=fleet,
        observed=observed,
        specs={k: {b: v.spec for b, v in found.get(k, {}).items()} for k in versioned},
        plans={k: plan_observed(s, now=now, settings=settings) for k, s in observed.items()},
    )


def plan_versions(
    kube: KubeClient,
    fleet: Fleet,
    inputs: DesiredInputs,
    *,
    file: str,
    temporal_address: str | None,
    settings: RolloutSettings,
    err: TextIO | None = None,
) -> DesiredInputs:
    """``inputs`` with every versioned worker's planned versions (nothing changes for a
    fleet without versioned workers)."""
    from twc.connections import default_registry
    from twc.desired import desired_fleet

    desired = desired_fleet(fleet, inputs, registry=default_registry(), file=file)
    workers = list(desired.workers.values())
    if not any(w.rollout is not None for w in workers):
        return inputs
    round_ = observe_round(
        kube,
        desired.fleet,
        workers,
        temporal_address=temporal_address,
        settings=settings,
        now=time.time(),
    )
    for key, plan in sorted(round_.plans.items()):
        print(f"rollout of {key}: {plan.message}", file=err or sys.stderr)
    return inputs.model_copy(update={"versions": round_.versions()})


def _needs_engine(round_: RolloutRound) -> list[str]:
    """Workers whose plan changes Deployments (a version to delete or scale): the next
    ``up`` does that, not routing."""
    out = []
    for key, plan in round_.plans.items():
        seen = round_.observed[key]
        for build, version in plan.versions.items():
            dep = seen.deployments.get(build)
            if (
                version.replicas is not None
                and dep is not None
                and dep.replicas != version.replicas
            ):
                out.append(key)
                break
        else:
            if plan.deleted:
                out.append(key)
    return out


def drive_rollouts(
    kube: KubeClient,
    fleet: Fleet,
    workers: Sequence[ResolvedWorker],
    *,
    temporal_address: str | None,
    settings: RolloutSettings,
    wait: float,
    out: TextIO,
    read_input: Callable[[str, Mapping[str, Any]], Any] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, RolloutPlan]:
    """After an ``up``: carry out what is due, for up to ``wait`` seconds.

    Returns:
        The last plan of each versioned worker.
    """
    from twc.versioning import carry_out_all

    deadline = clock() + max(0.0, wait)
    plans: dict[str, RolloutPlan] = {}
    said: dict[str, str] = {}
    while True:
        round_ = observe_round(
            kube, fleet, workers, temporal_address=temporal_address, settings=settings, now=clock()
        )
        plans = dict(round_.plans)
        if not plans:
            return plans
        results = asyncio.run(
            carry_out_all(
                round_.plans,
                round_.observed,
                round_.workers,
                round_.fleet,
                _clients(kube, temporal_address, settings),
                read_input=read_input,
            )
        )
        for key, plan in sorted(plans.items()):
            result = results.get(key)
            for action in result.done if result is not None else ():
                print(f"rollout of {key}: {action}", file=out, flush=True)
            if result is not None and result.error:
                print(f"rollout of {key}: not done: {result.error}", file=out, flush=True)
            elif said.get(key) != plan.message:
                print(f"rollout of {key}: {plan.message}", file=out, flush=True)
            said[key] = plan.message
        acting = any(p.routing is not None or p.gates for p in plans.values())
        moving = [p for p in plans.values() if p.phase is Phase.PROGRESSING]
        if not acting:
            if not moving:
                break  # every rollout is complete, stopped, manual or unknown
            later = [p.next_at for p in moving if p.next_at is not None]
            if len(later) == len(moving) and min(later) > deadline:
                break  # only pauses longer than the wait are left
        if clock() >= deadline:
            break
        sleep(1.0)
    for key in _needs_engine(round_):
        print(
            f"rollout of {key}: versions to scale down or delete: the next `twc up` (or the "
            "daemon) applies them",
            file=out,
            flush=True,
        )
    return plans


def live_rollouts(
    kube: KubeClient | None,
    checks: Mapping[str, Mapping[str, Any]],
    recorded: Mapping[str, Mapping[str, Any]],
    *,
    now: float,
) -> dict[str, dict[str, Any]]:
    """``twc status``: each versioned worker's versions as the cluster and Temporal show
    them now, with the official names (what ``temporal worker deployment describe``
    says, plus each version's Deployment).

    Args:
        kube: The cluster (``None``: none configured; nothing is read).
        checks: Per worker, its TaskQueueCheck's outputs (where its Temporal is).
        recorded: Per worker, the status the last ``up`` exported (its target build ID).
        now: Unix time.

    Returns:
        Per versioned worker, a :func:`~twc.rollout.rollout_status` record; a worker
        whose Temporal cannot be asked has ``error`` instead of routing.
    """
    from twc.kube.versions import versions

    wanted = {k: str(v["targetBuildID"]) for k, v in recorded.items() if v.get("targetBuildID")}
    if kube is None or not wanted:
        return {}
    found = versions(kube)
    out: dict[str, dict[str, Any]] = {}
    for key, target in sorted(wanted.items()):
        builds = found.get(key, {})
        deployments = {b: v.deployment for b, v in builds.items()}
        namespace, _, name = key.partition("/")
        policy = _policy_of(kube, namespace, builds, target)
        try:
            seen = asyncio.run(
                _observe_live(kube, checks.get(key, {}), key, target, policy, deployments)
            )
        except Exception as exc:  # noqa: BLE001 - status reports what it cannot read
            out[key] = {
                **rollout_status(
                    target=target,
                    deployment_name=f"{namespace}/{name}",
                    routing=None,
                    deployments=deployments,
                ),
                "error": f"{type(exc).__name__}: {exc}",
            }
            continue
        plan = plan_observed(seen, now=now)
        out[key] = rollout_status(
            target=target,
            deployment_name=seen.deployment_name,
            routing=seen.routing,
            deployments=deployments,
            plan=plan,
            gates=seen.gates,
            task_queues=seen.gate_queues,
        )
    return out


def _policy_of(
    kube: KubeClient, namespace: str, builds: Mapping[str, ObservedVersion], target: str
) -> RolloutPolicy:
    """The rollout policy the target version's Deployment records (Manual, which plans
    nothing, when it records none)."""
    from twc.kube.workloads import read_deployment
    from twc.rollout import POLICY_ANNOTATION, RolloutPolicy, Strategy

    seen = builds.get(target)
    if seen is not None:
        dep = read_deployment(kube, namespace, seen.deployment.name) or {}
        text = ((dep.get("metadata") or {}).get("annotations") or {}).get(POLICY_ANNOTATION)
        if text:
            try:
                return RolloutPolicy.from_json(json.loads(text))
            except ValueError:
                pass
    return RolloutPolicy(Strategy.MANUAL)


async def _observe_live(
    kube: KubeClient,
    props: Mapping[str, Any],
    key: str,
    target: str,
    policy: RolloutPolicy,
    deployments: Mapping[str, VersionDeployment],
) -> RolloutObservation:
    from twc.connections import ConnectOptions, connect
    from twc.kube.workloads import read_secret_data
    from twc.rollout import MAX_STAGES, gate_workflow_id, temporal_deployment_name
    from twc.spec import AuthMode
    from twc.versioning import WorkerVersioning

    ref = props.get("secretRef") or None
    creds: Mapping[str, bytes] = (
        read_secret_data(kube, ref["namespace"], ref["name"]) if ref else {}
    )
    key_name = props.get("apiKeyKey") or ""
    api_key = (creds.get(key_name) or b"").decode().strip() if key_name else ""
    options = ConnectOptions(
        target_host=str(props["address"]),
        namespace=str(props["namespace"]),
        tls=bool(props.get("tls")),
        server_name=props.get("serverName") or None,
        server_root_ca_cert=creds.get("ca.crt"),
        client_cert=creds.get("tls.crt"),
        client_private_key=creds.get("tls.key"),
        api_key=api_key or None,
    )
    client = await connect(options, AuthMode(props.get("authMode") or "none"), timeout=5.0)
    versioning = WorkerVersioning(client, str(props["namespace"]))
    namespace, _, name = key.partition("/")
    deployment_name = temporal_deployment_name(namespace, name)
    routing = await versioning.routing(deployment_name)
    queues: tuple[str, ...] = ()
    if routing is not None and target in routing.versions:
        detail = await versioning.version(deployment_name, target)
        queues = detail.task_queues if detail is not None else ()
    task_queues = queues or (str(props.get("taskQueue") or ""),)
    gates = await versioning.gate_runs(
        (gate_workflow_id(deployment_name, target, tq, stage), tq)
        for stage in range(min(len(policy.steps), MAX_STAGES) + 1)
        for tq in task_queues
    )
    return RolloutObservation(
        worker=key,
        target=target,
        policy=policy,
        deployment_name=deployment_name,
        task_queue=str(props.get("taskQueue") or ""),
        deployments=dict(deployments),
        routing=routing,
        task_queues=queues,
        gates=gates,
    )
