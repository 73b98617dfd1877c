"""Versioned workers in a preview: the rollout plan in words and time.

From the old and new state of a versioned worker's Deployments (each labelled with its
build ID, annotated with the rollout policy, the target marked) this says what the
update starts:

* a new version's Deployment and a target moving to it: the new version, its steps
  with their pauses (and gates), and how the version it replaces drains, scales down and
  is deleted;
* the target moving back to a version whose Deployment still exists: a rollback;
* a version scaled to 0 or deleted while it is not the target: its sunset.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import JsonValue

from twc.rollout import (
    BUILD_ID_LABEL,
    POLICY_ANNOTATION,
    TARGET_ANNOTATION,
    RolloutPolicy,
    rollback_in_words,
    rollout_in_words,
)

__all__ = ["VersionState", "rollout_reasons"]


@dataclass(frozen=True)
class VersionState:
    """One version Deployment in a preview."""

    build_id: str
    """Its build ID."""
    op: str
    """``create``, ``update``, ``delete``, ``same`` (or ``replace``)."""
    was_target: bool
    """Target in the old state."""
    is_target: bool
    """Target in the new state."""
    old_replicas: int | None
    """``spec.replicas`` before."""
    new_replicas: int | None
    """``spec.replicas`` after."""
    policy: RolloutPolicy | None
    """The policy it records (new state, else old)."""


def _lookup(state: JsonValue, *path: str) -> JsonValue:
    for key in path:
        if not isinstance(state, dict):
            return None
        state = state.get(key)
    return state


def version_state(op: str, old: JsonValue, new: JsonValue) -> VersionState | None:
    """The version a Deployment's old and new state describe; ``None`` when it is not a
    version's Deployment."""
    build = _lookup(new, "metadata", "labels", BUILD_ID_LABEL) or _lookup(
        old, "metadata", "labels", BUILD_ID_LABEL
    )
    if not isinstance(build, str) or not build:
        return None
    policy = None
    for state in (new, old):
        text = _lookup(state, "metadata", "annotations", POLICY_ANNOTATION)
        if isinstance(text, str) and policy is None:
            try:
                policy = RolloutPolicy.from_json(json.loads(text))
            except ValueError:
                policy = None

    def replicas(state: JsonValue) -> int | None:
        value = _lookup(state, "spec", "replicas")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return VersionState(
        build_id=build,
        op=op,
        was_target=_lookup(old, "metadata", "annotations", TARGET_ANNOTATION) == "true",
        is_target=_lookup(new, "metadata", "annotations", TARGET_ANNOTATION) == "true",
        old_replicas=replicas(old) if op != "create" else None,
        new_replicas=replicas(new) if op != "delete" else None,
        policy=policy,
    )


def rollout_reasons(worker: str, versions: Sequence[VersionState]) -> list[tuple[str, str]]:
    """``(code, message)`` reasons for a versioned worker's group, most important first.

    Codes: ``NewVersion``, ``VersionRollback``, ``VersionSunset``.
    """
    reasons: list[tuple[str, str]] = []
    target = next((v for v in versions if v.is_target and v.op != "delete"), None)
    previous = [v.build_id for v in versions if v.was_target and v is not target]
    if target is not None and target.policy is not None:
        if target.op == "create":
            reasons.append(
                ("NewVersion", rollout_in_words(worker, target.policy, target.build_id, previous))
            )
        elif not target.was_target and target.op != "same":
            reasons.append(
                (
                    "VersionRollback",
                    rollback_in_words(worker, target.policy, target.build_id, previous),
                )
            )
    for version in versions:
        if version is target or version.is_target:
            continue
        if version.op == "delete":
            reasons.append(
                ("VersionSunset", f"version {version.build_id} is deleted (drained, sunset)")
            )
        elif (
            version.op == "update"
            and version.new_replicas == 0
            and version.old_replicas not in (None, 0)
        ):
            reasons.append(
                (
                    "VersionSunset",
                    f"version {version.build_id} is scaled to 0 "
                    f"(drained, replicas {version.old_replicas} → 0)",
                )
            )
    return reasons
