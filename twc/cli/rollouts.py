"""Versioned rollouts from ``twc up``, ``twc preview`` and ``twc status`` (no daemon).

:func:`plan_versions` plans every versioned worker with the daemon's planner before the
engine runs; :func:`drive_rollouts` then carries out what is due for up to
``--rollout-wait`` seconds, and says what the next ``twc up`` or the daemon does later.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

from twc.connections import connect_check, default_registry
from twc.desired import DesiredFleet, DesiredInputs, desired_fleet
from twc.kube import workloads
from twc.rollout import (
    POLICY_ANNOTATION,
    Phase,
    RolloutObservation,
    RolloutPlan,
    RolloutPolicy,
    RolloutSettings,
    Strategy,
    WorkerVersions,
    observed_status,
    plan_observed,
    rollout_status,
    temporal_deployment_name,
    version_inputs,
)

if TYPE_CHECKING:
    from twc.kube.client import KubeClient
    from twc.reconcile.observe import RolloutFacts
    from twc.spec import Fleet
    from twc.versioning import WorkerClients


def _clients(
    kube: KubeClient, temporal_address: str | None, settings: RolloutSettings
) -> WorkerClients:
    from twc.versioning import WorkerClients

    return WorkerClients(
        read_secret=lambda ns, name: workloads.read_secret_data(kube, ns, name),
        temporal_address=temporal_address,
        identity=settings.identity,
    )


def observe_round(
    kube: KubeClient,
    desired: DesiredFleet,
    clients: WorkerClients,
    *,
    settings: RolloutSettings,
    now: float,
) -> tuple[RolloutFacts, dict[str, RolloutPlan]]:
    """Every versioned worker observed (as the daemon does) and planned once; raises if
    Deployments cannot be listed."""
    from twc.reconcile.observe import RolloutFacts, RolloutSource, observe_facts

    found = workloads.versions(kube)
    source = RolloutSource(versions=lambda: found, clients=clients)
    with asyncio.Runner() as runner:
        facts = observe_facts(source, desired, runner.get_loop()) or RolloutFacts()
    return facts, {
        k: plan_observed(s, now=now, settings=settings) for k, s in facts.observed.items()
    }


def plan_versions(
    kube: KubeClient,
    fleet: Fleet,
    inputs: DesiredInputs,
    *,
    file: str,
    temporal_address: str | None,
    settings: RolloutSettings,
    err: TextIO,
) -> DesiredInputs:
    """``inputs`` with every versioned worker's planned versions (their plans said on ``err``)."""
    desired = desired_fleet(fleet, inputs, registry=default_registry(), file=file)
    if not any(w.rollout is not None for w in desired.workers.values()):
        return inputs
    clients = _clients(kube, temporal_address, settings)
    facts, plans = observe_round(kube, desired, clients, settings=settings, now=time.time())
    for key, plan in sorted(plans.items()):
        print(f"rollout of {key}: {plan.message}", file=err)
    versions: dict[str, WorkerVersions] = {}
    for key, plan in plans.items():
        seen = facts.observed[key]
        live = {b: d.replicas for b, d in seen.deployments.items()}
        autoscaled = desired.workers[key].autoscaling is not None
        versions[key] = WorkerVersions(
            versions=version_inputs(plan, facts.specs.get(key, {}), live if autoscaled else None),
            status=observed_status(seen, plan),
        )
    return inputs.model_copy(update={"versions": versions})


def drive_rollouts(
    kube: KubeClient,
    desired: DesiredFleet,
    *,
    temporal_address: str | None,
    settings: RolloutSettings,
    wait: float,
    out: TextIO,
) -> None:
    """After an ``up``: carry out what is due for up to ``wait`` seconds."""
    from twc.versioning import carry_out_all

    deadline = time.time() + max(0.0, wait)
    said: dict[str, str] = {}
    clients = _clients(kube, temporal_address, settings)
    while True:
        facts, plans = observe_round(kube, desired, clients, settings=settings, now=time.time())
        if not plans:
            return
        seen = (plans, facts.observed, desired.workers, desired.fleet)
        read_input = functools.partial(workloads.read_gate_input, kube)
        results = asyncio.run(carry_out_all(*seen, clients, read_input=read_input))
        for key, plan in sorted(plans.items()):
            result = results.get(key)
            lines = list(result.done) if result is not None else []
            if result is not None and result.error:
                lines.append(f"not done: {result.error}")
            elif said.get(key) != plan.message:
                lines.append(plan.message)
            for line in lines:
                print(f"rollout of {key}: {line}", file=out, flush=True)
            said[key] = plan.message
        acting = any(p.routing is not None or p.gates for p in plans.values())
        moving = [p for p in plans.values() if p.phase is Phase.PROGRESSING]
        later = [p.next_at for p in moving if p.next_at is not None]
        # Done when every rollout is complete, stopped or manual, or only pauses longer
        # than the wait are left.
        if not acting and (not moving or (len(later) == len(moving) and min(later) > deadline)):
            break
        if time.time() >= deadline:
            break
        time.sleep(1.0)
    due = "versions to scale down or delete: the next `twc up` (or the daemon) applies them"
    for key, plan in plans.items():  # the next `twc up` deletes or scales versions
        deployments = facts.observed[key].deployments
        rescaled = any(
            v.replicas is not None and b in deployments and deployments[b].replicas != v.replicas
            for b, v in plan.versions.items()
        )
        if rescaled or plan.deleted:
            print(f"rollout of {key}: {due}", file=out, flush=True)


def live_rollouts(
    kube: KubeClient | None,
    checks: Mapping[str, Mapping[str, Any]],
    recorded: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Each versioned worker's versions as the cluster and Temporal show them now (with
    ``error`` when Temporal cannot be asked)."""
    now = time.time()
    wanted = {k: str(v["targetBuildID"]) for k, v in recorded.items() if v.get("targetBuildID")}
    if kube is None or not wanted:
        return {}
    from twc.versioning import WorkerVersioning, observe_version

    found = workloads.versions(kube)
    out: dict[str, dict[str, Any]] = {}
    for key, target in sorted(wanted.items()):
        builds = found.get(key, {})
        namespace, _, name = key.partition("/")
        # The rollout policy the target's Deployment records (else Manual).
        dep: dict[str, Any] = {}
        if (version := builds.get(target)) is not None:
            dep = workloads.read_deployment(kube, namespace, version.deployment.name) or {}
        text = ((dep.get("metadata") or {}).get("annotations") or {}).get(POLICY_ANNOTATION)
        props = checks.get(key, {})
        seen = RolloutObservation(
            worker=key,
            target=target,
            policy=RolloutPolicy.recorded(text) or RolloutPolicy(Strategy.MANUAL),
            deployment_name=temporal_deployment_name(namespace, name),
            task_queue=str(props.get("taskQueue") or ""),
            deployments={b: v.deployment for b, v in builds.items()},
        )
        ref = props.get("secretRef")
        try:
            creds = workloads.read_secret_data(kube, ref["namespace"], ref["name"]) if ref else {}
            with asyncio.Runner() as runner:  # the client lives on this one loop
                client = runner.run(connect_check(props, creds))
                versioning = WorkerVersioning(client, str(props["namespace"]))
                seen = runner.run(observe_version(versioning, seen, every_gate=True))
        except Exception as exc:  # noqa: BLE001 - status reports what it cannot read
            out[key] = rollout_status(
                target=target,
                deployment_name=seen.deployment_name,
                routing=None,
                deployments=seen.deployments,
            ) | {"error": f"{type(exc).__name__}: {exc}"}
            continue
        out[key] = observed_status(seen, plan_observed(seen, now=now))
    return out
