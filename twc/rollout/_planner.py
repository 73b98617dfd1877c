"""The rollout planner: observed routing, Deployments, gate runs and time in, the next step out (at
most one routing change, gates to start, versions that stay, versions to forget). Pure and
memoryless, so a restarted daemon continues where the last one was. Beyond the official controller:
a step advances only once its pause passed and its gate completed; a failed gate stops the rollout
and removes the ramp; rolling back to a version that still runs makes it Current at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from twc.rollout._model import (
    FailureRatePolicy,
    GatePolicy,
    GateRun,
    GateStatus,
    RolloutPolicy,
    RolloutSettings,
    Routing,
    Strategy,
    VersionDeployment,
    VersionStatus,
)
from twc.rollout._spec import gate_workflow_id
from twc.rollout._words import duration_words
from twc.timestamps import rfc3339

MAX_STAGES = 20
"""Gate stages beyond the first: one per step, and the spec allows at most 20 steps."""
ROLLBACK_WINDOW = 3600.0
"""A version Current or Ramping this recently (seconds) is rolled back to at once."""


class Phase(StrEnum):
    """Where a worker's rollout stands."""

    PROGRESSING = "Progressing"
    COMPLETE = "Complete"
    BLOCKED = "Blocked"
    """A gate failed: nothing moves until the spec changes."""
    MANUAL = "Manual"
    UNKNOWN = "Unknown"
    """Temporal could not be asked: every version is held as it runs."""


class RoutingKind(StrEnum):
    """The routing changes twc makes."""

    SET_CURRENT = "SetCurrent"
    SET_RAMPING = "SetRamping"
    CLEAR_RAMP = "ClearRamp"


@dataclass(frozen=True, slots=True)
class RoutingChange:
    """One routing change, planned against one conflict token."""

    kind: RoutingKind
    build_id: str
    """The version it routes to (the ramp's version for ClearRamp, for messages)."""
    conflict_token: bytes
    percentage: float = 0.0
    """For SetRamping: the new ramp."""
    reason: str = ""

    def __str__(self) -> str:
        if self.kind is RoutingKind.SET_CURRENT:
            return f"{self.build_id} → Current"
        if self.kind is RoutingKind.SET_RAMPING:
            return f"{self.build_id} → Ramping {_pct(self.percentage)}"
        return f"ramp of {self.build_id} removed"


@dataclass(frozen=True, slots=True)
class GateStart:
    """A gate workflow to start on one task queue, pinned to the version."""

    build_id: str
    task_queue: str
    workflow_id: str
    gate: GatePolicy
    stage: int
    """0 before any traffic, ``n`` for step ``n``."""


@dataclass(frozen=True, slots=True)
class VersionPlan:
    """A version whose Deployment stays (the program declares it)."""

    build_id: str
    replicas: int | None
    """``None``: the worker's own count (or the autoscaler's); a number: exactly that."""


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """The next step of one worker's rollout."""

    target: str
    phase: Phase
    reason: str
    """Stable CamelCase reason (``WaitingForPollers``, ``Ramping``, ``GateFailed``...)."""
    message: str
    routing: RoutingChange | None = None
    gates: tuple[GateStart, ...] = ()
    versions: Mapping[str, VersionPlan] = field(default_factory=lambda: MappingProxyType({}))
    """Every version whose Deployment stays, by build ID (the target always)."""
    deleted: tuple[str, ...] = ()
    """Versions whose Deployment goes now (sunset, or superseded before any traffic)."""
    forget: tuple[str, ...] = ()
    """Versions to delete in Temporal: no Deployment left and no traffic."""
    next_at: float | None = None
    """When something is due without any change (a pause or a delay ends)."""
    rolled_back: str | None = None
    """Why the target is rolled back: recorded on it in Temporal before ``routing``."""


def _pct(value: float) -> str:
    return f"{value:g} %"


def hold_versions(
    target: str, deployments: Mapping[str, VersionDeployment], reason: str, message: str
) -> RolloutPlan:
    """The plan when Temporal cannot be asked: every version stays as it runs."""
    versions = {build: VersionPlan(build, dep.replicas) for build, dep in deployments.items()}
    versions[target] = VersionPlan(target, None)
    return RolloutPlan(
        target=target,
        phase=Phase.UNKNOWN,
        reason=reason,
        message=message,
        versions=MappingProxyType(dict(sorted(versions.items()))),
    )


def _routed(target: str, reason: str, message: str, change: RoutingChange) -> RolloutPlan:
    """A step that makes one routing change."""
    return RolloutPlan(target, Phase.PROGRESSING, reason, message, routing=change)


def plan_rollout(
    policy: RolloutPolicy,
    *,
    target: str,
    routing: Routing | None,
    deployments: Mapping[str, VersionDeployment],
    gates: Mapping[str, GateRun],
    task_queues: Sequence[str],
    deployment_name: str,
    now: float,
    settings: RolloutSettings | None = None,
    failures: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
    rolled_back: str | None = None,
) -> RolloutPlan:
    """Plan the next step of a worker's rollout (``routing`` ``None``: no version polled
    yet; ``gates`` by workflow ID; gates run on each of ``task_queues``; ``failures`` per
    version and workflow type ``(closed, failed)``; ``rolled_back``: why the target was)."""
    settings = settings or RolloutSettings()
    scale = settings.time_scale
    if policy.strategy is Strategy.MANUAL:
        step = _manual(target, routing)
    else:
        step = _route(
            policy,
            target=target,
            routing=routing,
            deployment=deployments.get(target),
            runs=_GateRuns(gates, deployment_name, target, task_queues),
            now=now,
            scale=scale,
            failures=failures or {},
            rolled_back=rolled_back,
        )
    versions, deleted, forget, sunset_at = _sunset(
        policy, target=target, routing=routing, deployments=deployments, now=now, scale=scale
    )
    due = [t for t in (step.next_at, sunset_at) if t is not None]
    return replace(
        step,
        versions=MappingProxyType(dict(sorted(versions.items()))),
        deleted=tuple(deleted),
        forget=tuple(forget),
        next_at=min(due) if due else None,
    )


def _manual(target: str, routing: Routing | None) -> RolloutPlan:
    if routing is None or routing.status(target) is VersionStatus.NOT_REGISTERED:
        reason, said = "WaitingForPollers", "has not polled yet; twc does not route"
    elif routing.current == target:
        reason, said = "RolloutComplete", "is Current"
    elif routing.ramping == target:
        reason = "Ramping"
        said = f"ramps at {_pct(routing.ramp_percentage)}; twc does not route"
    else:
        reason = "WaitingForPromotion"
        said = (
            "polls; promote it with `temporal worker deployment set-current-version` "
            "(twc does not route)"
        )
    return RolloutPlan(target, Phase.MANUAL, reason, f"Manual: version {target} {said}")


def _route(
    policy: RolloutPolicy,
    *,
    target: str,
    routing: Routing | None,
    deployment: VersionDeployment | None,
    runs: _GateRuns,
    now: float,
    scale: float,
    failures: Mapping[str, Mapping[str, tuple[int, int]]],
    rolled_back: str | None,
) -> RolloutPlan:
    if routing is not None and routing.current == target:
        return _complete(target, routing)
    if routing is not None and rolled_back is not None:  # recorded: stopped for good
        return _rolled_back(target, routing, rolled_back, record=False)
    rule = policy.failure_rate
    if routing is not None and rule is not None and routing.ramping == target:
        current = failures.get(routing.current or "", {})
        if (why := failure_verdict(rule, failures.get(target, {}), current)) is not None:
            return _rolled_back(target, routing, why, record=True)
    polling = (
        routing is not None
        and routing.status(target) is not VersionStatus.NOT_REGISTERED
        and deployment is not None
        and deployment.ready > 0
    )
    if routing is None or not polling or not runs.task_queues:
        said = "registered no workflow task queue" if polling else "no ready, polling workers"
        message = f"version {target} has {said} yet"
        return RolloutPlan(target, Phase.PROGRESSING, "WaitingForPollers", message)
    version = routing.versions[target]
    found = gate_runs(runs.gates, runs.deployment, target, runs.task_queues)
    if (failed := next((run for run in found if run.status.failed), None)) is not None:
        # A failed gate at any stage stops this build for good.
        return runs.blocked(failed, routing)
    since = version.deactivated_at
    recent = since is not None and now - since <= ROLLBACK_WINDOW
    if recent and routing.ramping != target and routing.current is not None:
        # It was Current or Ramping within the hour and runs: a rollback goes back at once.
        return _routed(
            target,
            "RollingBack",
            f"rolling back to version {target} (it had traffic within the hour and runs): "
            "Current at once",
            RoutingChange(
                RoutingKind.SET_CURRENT,
                target,
                routing.conflict_token,
                reason="rollback to a version that still runs",
            ),
        )
    if policy.gate is not None:
        blocked = runs.check(policy.gate, 0, routing)
        if blocked is not None:
            return blocked
    if routing.current is None or policy.strategy is Strategy.ALL_AT_ONCE:
        why = "the first version" if routing.current is None else "AllAtOnce"
        change = RoutingChange(RoutingKind.SET_CURRENT, target, routing.conflict_token, reason=why)
        return _routed(target, "Promoting", f"version {target} → Current ({why})", change)
    return _progressive(policy, target, routing, runs, now=now, scale=scale)


def failure_verdict(
    rule: FailureRatePolicy,
    target: Mapping[str, tuple[int, int]],
    current: Mapping[str, tuple[int, int]],
) -> str | None:
    """Why the target's failures break ``rule`` (the first workflow type with enough closed
    runs whose failure rate is over the Current's by more than the margin), else ``None``."""
    for kind, (closed, failed) in sorted(target.items()):
        base_closed, base_failed = current.get(kind, (0, 0))
        rate, base = failed / closed, base_failed / base_closed if base_closed else 0.0
        if closed >= rule.min_sample and (rate - base) * 100 > rule.margin_percent:
            return (
                f"workflow type {kind} failed {failed} of {closed} times ({rate:.0%}) in "
                f"{duration_words(rule.window_seconds)}, the Current version {base_failed} of "
                f"{base_closed} ({base:.0%}): over the margin of {rule.margin_percent:g} points"
            )
    return None


def _rolled_back(target: str, routing: Routing, why: str, *, record: bool) -> RolloutPlan:
    """The rollout stopped by its failure rate; a ramp to the version is removed."""
    message = f"version {target} rolled back: {why}; rollout stopped"
    step = _stopped(target, routing, "RolledBack", message, "failure rate")
    return replace(step, rolled_back=why if record else None)


def _stopped(target: str, routing: Routing, reason: str, message: str, why: str) -> RolloutPlan:
    """The rollout stopped for good (``reason``); a ramp to the version is removed (``why``)."""
    change = None
    if routing.ramping == target:
        message += f", new executions go back to {routing.current or 'the unversioned workers'}"
        change = RoutingChange(RoutingKind.CLEAR_RAMP, target, routing.conflict_token, reason=why)
    return RolloutPlan(target, Phase.BLOCKED, reason, message, routing=change)


def _complete(target: str, routing: Routing) -> RolloutPlan:
    """The target is Current: done, once a ramp left over is removed."""
    if not routing.ramping:
        return RolloutPlan(
            target, Phase.COMPLETE, "RolloutComplete", f"version {target} is Current"
        )
    return _routed(
        target,
        "RolloutComplete",
        f"version {target} is Current; removing the ramp of {routing.ramping}",
        RoutingChange(
            RoutingKind.CLEAR_RAMP,
            routing.ramping,
            routing.conflict_token,
            reason="the target is Current",
        ),
    )


def _progressive(
    policy: RolloutPolicy,
    target: str,
    routing: Routing,
    runs: _GateRuns,
    *,
    now: float,
    scale: float,
) -> RolloutPlan:
    steps = policy.steps
    if not steps:
        # The spec refuses this; never promote on a guess.
        return RolloutPlan(
            target, Phase.BLOCKED, "InvalidSpec", "Progressive rollout without steps"
        )
    token = routing.conflict_token

    def ramp_to(index: int, reason: str, said: str = "→ Ramping") -> RolloutPlan:
        percentage = steps[index].ramp_percentage
        message = f"version {target} {said} {_pct(percentage)} (step {index + 1} of {len(steps)})"
        change = RoutingChange(RoutingKind.SET_RAMPING, target, token, percentage, reason)
        return _routed(target, "Ramping", message, change)

    ramp = routing.ramp_percentage if routing.ramping == target else None
    if ramp is None or ramp <= 0:
        return ramp_to(0, "first step")
    index = max((i for i, s in enumerate(steps) if s.ramp_percentage <= ramp), default=0)
    step = steps[index]
    if ramp != step.ramp_percentage:
        # Someone else set the ramp (or the steps changed): resume from a known step.
        said = f"ramps at {_pct(ramp)}, not a step's percentage: back to"
        return ramp_to(index, "resume from a known step", said)
    where = f"step {index + 1} of {len(steps)}: {_pct(ramp)}"
    if step.gate is not None:
        blocked = runs.check(step.gate, index + 1, routing, where=where)
        if blocked is not None:
            return blocked
    changed_at = routing.ramp_changed_at
    due = None if changed_at is None else changed_at + step.pause_seconds * scale
    if due is None or now < due:
        until = (
            "; Temporal reports no ramp time, waiting" if due is None else f" until {rfc3339(due)}"
        )
        return RolloutPlan(
            target, Phase.PROGRESSING, "Ramping", f"version {target} at {where}{until}", next_at=due
        )
    if index + 1 < len(steps):
        return ramp_to(index + 1, f"step {index + 2}")
    change = RoutingChange(RoutingKind.SET_CURRENT, target, token, reason="every step done")
    return _routed(target, "Promoting", f"version {target} → Current (every step done)", change)


@dataclass(frozen=True, slots=True)
class _GateRuns:
    """The gate runs of the target version, per stage and task queue."""

    gates: Mapping[str, GateRun]
    deployment: str
    target: str
    task_queues: Sequence[str]

    def blocked(self, run: GateRun, routing: Routing, label: str = "") -> RolloutPlan:
        """The rollout stopped by a failed gate run; a ramp to the version is removed."""
        stage = run.workflow_id.rpartition("-step")[2]
        when = f"of step {stage}" if stage.isdigit() else "before traffic"
        label = label or f"the gate {when}"
        detail = f": {run.message}" if run.message else ""
        message = (
            f"{label} {run.status.value.lower()} on version {self.target} "
            f"(task queue {run.task_queue}){detail}; rollout stopped"
        )
        return _stopped(self.target, routing, "GateFailed", message, "gate failed")

    def check(
        self, gate: GatePolicy, stage: int, routing: Routing, *, where: str = ""
    ) -> RolloutPlan | None:
        """``None`` when the gate completed on every task queue, else the step to take."""
        label = f"gate `{gate.workflow_type}`" + (f" of {where}" if where else "")
        starts: list[GateStart] = []
        running = []
        for task_queue in self.task_queues:
            workflow_id = gate_workflow_id(self.deployment, self.target, task_queue, stage)
            run = self.gates.get(workflow_id)
            if run is None:
                starts.append(GateStart(self.target, task_queue, workflow_id, gate, stage))
            elif run.status.failed:
                return self.blocked(run, routing, label)
            elif run.status is not GateStatus.COMPLETED:
                running.append(task_queue)
        if starts or running:
            waiting = ", ".join(sorted({*running, *(s.task_queue for s in starts)}))
            return RolloutPlan(
                self.target,
                Phase.PROGRESSING,
                "WaitingForGate",
                f"{label} runs on version {self.target} (task queue {waiting})",
                gates=tuple(starts),
            )
        return None


def _sunset(
    policy: RolloutPolicy,
    *,
    target: str,
    routing: Routing | None,
    deployments: Mapping[str, VersionDeployment],
    now: float,
    scale: float,
) -> tuple[dict[str, VersionPlan], list[str], list[str], float | None]:
    versions: dict[str, VersionPlan] = {target: VersionPlan(target, None)}
    deleted: list[str] = []
    due: list[float] = []
    manual = policy.strategy is Strategy.MANUAL
    live = {b for b in (routing.current, routing.ramping) if b} if routing else set()
    scaledown = policy.sunset.scaledown_seconds * scale
    # Deleting before scaling down makes no sense; the later of the two wins.
    delete = max(policy.sunset.delete_seconds, policy.sunset.scaledown_seconds) * scale

    def gone(build: str, dep: VersionDeployment) -> None:
        if dep.replicas > 0:  # scaled to 0 before it is deleted
            versions[build] = VersionPlan(build, 0)
        else:
            deleted.append(build)

    for build, dep in sorted(deployments.items()):
        if build == target:
            continue
        if routing is None:
            versions[build] = VersionPlan(build, dep.replicas)  # Temporal knows no version yet
            continue
        status = routing.status(build)
        if build in live or status is VersionStatus.DRAINING:  # it is routed to, or drains
            versions[build] = VersionPlan(build, None)
        elif status is VersionStatus.DRAINED:
            found = routing.versions[build]
            since = found.drained_since if found.drained_since is not None else now
            if now >= since + delete:
                gone(build, dep)
            elif now >= since + scaledown:
                versions[build] = VersionPlan(build, 0)
                due.append(since + delete)
            else:
                versions[build] = VersionPlan(build, None)
                due.append(since + scaledown)
        elif manual:  # the operator decides what becomes of it
            versions[build] = VersionPlan(build, None)
        else:
            # Superseded before it ever had traffic (Inactive), or it never polled.
            gone(build, dep)
    forget: list[str] = []
    if routing is not None and not manual:
        for build, version in sorted(routing.versions.items()):
            if build in deployments or build == target or build in live:
                continue
            if version.status in (VersionStatus.DRAINED, VersionStatus.INACTIVE):
                forget.append(build)
    return versions, deleted, forget, min(due) if due else None


def gate_runs(
    gates: Mapping[str, GateRun], deployment: str, target: str, task_queues: Sequence[str]
) -> list[GateRun]:
    """The gate runs of ``target`` found in ``gates``, stage by stage."""
    return [
        run
        for stage in range(MAX_STAGES + 1)
        for task_queue in task_queues
        if (run := gates.get(gate_workflow_id(deployment, target, task_queue, stage)))
    ]
