"""Temporal's worker-deployment messages → the rollout model. Pure (reads messages only).

Kept apart from the calls so unit tests can feed it messages built by hand: which
version is Current or Ramping comes from the routing config, Draining and Drained from
the version summaries, and a version "had traffic" once Temporal recorded it active.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twc.rollout import GateStatus, Routing, TemporalVersion, VersionStatus

__all__ = ["gate_status", "routing_from_describe", "version_status"]

# temporal.api.enums.v1.WorkerDeploymentVersionStatus
_VERSION_STATUS: Mapping[int, VersionStatus] = {
    1: VersionStatus.INACTIVE,
    2: VersionStatus.CURRENT,
    3: VersionStatus.RAMPING,
    4: VersionStatus.DRAINING,
    5: VersionStatus.DRAINED,
}
# temporal.api.enums.v1.VersionDrainageStatus
_DRAINING, _DRAINED = 1, 2
# temporal.api.enums.v1.WorkflowExecutionStatus
_WORKFLOW_STATUS: Mapping[int, GateStatus] = {
    1: GateStatus.RUNNING,
    2: GateStatus.COMPLETED,
    3: GateStatus.FAILED,
    4: GateStatus.CANCELED,
    5: GateStatus.TERMINATED,
    6: GateStatus.RUNNING,  # continued as new: the chain runs on
    7: GateStatus.TIMED_OUT,
}


def _time(message: Any, name: str) -> float | None:
    if not message.HasField(name):
        return None
    value = getattr(message, name)
    seconds = float(value.seconds) + value.nanos / 1e9
    return seconds if seconds > 0 else None


def version_status(summary: Any, current: str | None, ramping: str | None) -> VersionStatus:
    """A version summary's status; servers that leave ``status`` unset are read as the
    official controller reads them (routing first, then drainage)."""
    build = summary.deployment_version.build_id
    found = _VERSION_STATUS.get(int(summary.status))
    if found is not None:
        return found
    if build == current:
        return VersionStatus.CURRENT
    if build == ramping:
        return VersionStatus.RAMPING
    drainage = int(summary.drainage_info.status) if summary.HasField("drainage_info") else 0
    if drainage == _DRAINING:
        return VersionStatus.DRAINING
    if drainage == _DRAINED:
        return VersionStatus.DRAINED
    return VersionStatus.INACTIVE


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
        status = version_status(summary, current, ramping)
        drained = None
        if status is VersionStatus.DRAINED and summary.HasField("drainage_info"):
            drained = _time(summary.drainage_info, "last_changed_time")
        # Servers that report when a version was last Current say it directly; the
        # first activation (Current or Ramping) is the next best sign it had traffic.
        activated = None
        for name in ("last_current_time", "first_activation_time", "current_since_time"):
            if name in summary.DESCRIPTOR.fields_by_name:
                activated = activated or _time(summary, name)
        versions[build] = TemporalVersion(
            build_id=build,
            status=status,
            drained_since=drained,
            activated_at=activated,
            created_at=_time(summary, "create_time"),
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
        last_modifier=str(info.last_modifier_identity),
    )


def gate_status(status: int) -> GateStatus:
    """A WorkflowExecutionStatus as a gate run's status (unknown values run)."""
    return _WORKFLOW_STATUS.get(int(status), GateStatus.RUNNING)
