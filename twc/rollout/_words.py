"""A rollout in words, for previews, e.g. ``new version 1.5.0-ab12 of apps/orders;
Progressive 1 % (10 m) → Current; 1.4.2-cd34 drains, scales to 0 after 1 h, ...``."""

from __future__ import annotations

from collections.abc import Sequence

from twc.rollout._model import GatePolicy, RolloutPolicy, Strategy


def duration_words(seconds: float) -> str:
    """``30 s``, ``1 h 30 m``, ``24 h``, ``7 d``: at most two units, days from three on."""
    total = round(seconds)
    if total <= 0:
        return "0 s"
    parts = []
    units = (("d", 86400),) if total >= 3 * 86400 else ()
    for unit, size in (*units, ("h", 3600), ("m", 60), ("s", 1)):
        if total >= size:
            amount, total = divmod(total, size)
            parts.append(f"{amount} {unit}")
    return " ".join(parts[:2])


def _gate(gate: GatePolicy) -> str:
    return f"gate `{gate.workflow_type}`"


def _steps(policy: RolloutPolicy) -> str:
    if policy.strategy is Strategy.MANUAL:
        return (
            "Manual: twc does not route it (promote it with "
            "`temporal worker deployment set-current-version`)"
        )
    first = f"{_gate(policy.gate)} on it first, then " if policy.gate is not None else ""
    if policy.strategy is Strategy.ALL_AT_ONCE:
        return f"{first}AllAtOnce: Current once it polls"
    steps = []
    for step in policy.steps:
        extra = f", {_gate(step.gate)}" if step.gate is not None else ""
        steps.append(f"{step.ramp_percentage} % ({duration_words(step.pause_seconds)}{extra})")
    rule, said = policy.failure_rate, f"{first}Progressive {' → '.join([*steps, 'Current'])}"
    if rule is None:
        return said
    window = duration_words(rule.window_seconds)
    return (
        f"{said}, rolled back once a workflow type fails {rule.margin_percent:g} points more "
        f"often than on Current (of {rule.min_sample} or more closed in {window})"
    )


def _names(builds: Sequence[str]) -> str:
    return builds[0] if len(builds) == 1 else f"{', '.join(builds[:-1])} and {builds[-1]}"


def _sunset(policy: RolloutPolicy, old: Sequence[str]) -> str:
    many = len(old) > 1
    scaledown = duration_words(policy.sunset.scaledown_seconds)
    delete = duration_words(max(policy.sunset.delete_seconds, policy.sunset.scaledown_seconds))
    verbs = ("drain", "scale", "are") if many else ("drains", "scales", "is")
    if policy.draining_replicas is not None:
        low, high = policy.draining_replicas
        verbs = (f"{verbs[0]} (keeping {low} to {high} replicas until Drained)", *verbs[1:])
    return (
        f"{_names(old)} {verbs[0]}, {verbs[1]} to 0 after {scaledown}, "
        f"{verbs[2]} deleted after {delete}"
    )


def rollout_in_words(worker: str, policy: RolloutPolicy, new: str, old: Sequence[str] = ()) -> str:
    """A new version's rollout in words, ``old`` being the versions it replaces."""
    if not old:
        return f"first version {new} of {worker}; Current once it polls" + (
            f" and {_gate(policy.gate)} completed on it" if policy.gate is not None else ""
        )
    parts = [f"new version {new} of {worker}", _steps(policy)]
    if policy.strategy is Strategy.MANUAL:
        parts.append(f"{_names(old)} {'stay' if len(old) > 1 else 'stays'} until then")
    else:
        parts.append(_sunset(policy, old))
    return "; ".join(parts)


def rollback_in_words(
    worker: str, policy: RolloutPolicy, back_to: str, old: Sequence[str] = ()
) -> str:
    """Going back to a version whose Deployment still exists, in words."""
    if policy.strategy is Strategy.MANUAL:
        return (
            f"{worker} targets version {back_to} again (its Deployment still exists); "
            "Manual: twc does not route it"
        )
    head = (
        f"{worker} rolls back to version {back_to} (its Deployment still exists): "
        "Current again as soon as it polls"
    )
    return f"{head}; {_sunset(policy, old)}" if old else head
