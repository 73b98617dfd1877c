"""Temporal's worker-deployment messages read as the rollout model.

Built with temporalio's own generated messages, shaped as the dev server (1.29) returns
them: Current and Ramping come from the routing config, Draining and Drained from the
version summaries (with when it drained), and a version "had traffic" once Temporal
recorded its first activation.
"""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.deployment.v1 import (
    RoutingConfig,
    VersionDrainageInfo,
    WorkerDeploymentInfo,
    WorkerDeploymentVersion,
)
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentResponse

from twc.rollout import GateStatus, VersionStatus
from twc.versioning import gate_status, routing_from_describe

DEP = "apps/orders"


def _ts(seconds: int) -> Timestamp:
    return Timestamp(seconds=seconds)


def _summary(
    build: str, status: int, **fields: object
) -> WorkerDeploymentInfo.WorkerDeploymentVersionSummary:
    return WorkerDeploymentInfo.WorkerDeploymentVersionSummary(
        deployment_version=WorkerDeploymentVersion(deployment_name=DEP, build_id=build),
        status=status,  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


def test_a_ramp_in_progress_with_a_drained_and_a_draining_version() -> None:
    response = DescribeWorkerDeploymentResponse(
        conflict_token=b"tok",
        worker_deployment_info=WorkerDeploymentInfo(
            name=DEP,
            routing_config=RoutingConfig(
                current_deployment_version=WorkerDeploymentVersion(
                    deployment_name=DEP, build_id="v2"
                ),
                ramping_deployment_version=WorkerDeploymentVersion(
                    deployment_name=DEP, build_id="v3"
                ),
                ramping_version_percentage=25.0,
                ramping_version_percentage_changed_time=_ts(1_700),
            ),
            version_summaries=[
                _summary("v3", 3, first_activation_time=_ts(1_600)),
                _summary("v2", 2, first_activation_time=_ts(1_000)),
                _summary(
                    "v1",
                    5,
                    first_activation_time=_ts(500),
                    last_deactivation_time=_ts(1_000),
                    drainage_info=VersionDrainageInfo(status=2, last_changed_time=_ts(1_200)),  # type: ignore[arg-type]
                ),
                _summary(
                    "v0",
                    4,
                    first_activation_time=_ts(100),
                    drainage_info=VersionDrainageInfo(status=1, last_changed_time=_ts(900)),  # type: ignore[arg-type]
                ),
                _summary("v9", 1),
            ],
        ),
    )
    routing = routing_from_describe(response)
    assert routing.conflict_token == b"tok"
    assert (routing.current, routing.ramping, routing.ramp_percentage) == ("v2", "v3", 25.0)
    assert routing.ramp_changed_at == 1_700
    statuses = {b: v.status for b, v in routing.versions.items()}
    assert statuses == {
        "v3": VersionStatus.RAMPING,
        "v2": VersionStatus.CURRENT,
        "v1": VersionStatus.DRAINED,
        "v0": VersionStatus.DRAINING,
        "v9": VersionStatus.INACTIVE,
    }
    assert routing.versions["v1"].drained_since == 1_200
    assert routing.versions["v0"].drained_since is None
    assert routing.versions["v1"].deactivated_at == 1_000
    assert routing.versions["v2"].deactivated_at is None
    assert routing.status("v7") is VersionStatus.NOT_REGISTERED


def test_a_server_without_version_status_is_read_from_routing_and_drainage() -> None:
    response = DescribeWorkerDeploymentResponse(
        worker_deployment_info=WorkerDeploymentInfo(
            routing_config=RoutingConfig(
                current_deployment_version=WorkerDeploymentVersion(
                    deployment_name=DEP, build_id="v2"
                )
            ),
            version_summaries=[
                _summary("v2", 0),
                _summary(
                    "v1",
                    0,
                    drainage_info=VersionDrainageInfo(status=2, last_changed_time=_ts(42)),  # type: ignore[arg-type]
                ),
                _summary("v3", 0),
            ],
        )
    )
    routing = routing_from_describe(response)
    assert routing.ramping is None
    assert routing.ramp_percentage == 0
    assert routing.ramp_changed_at is None
    assert {b: v.status for b, v in routing.versions.items()} == {
        "v2": VersionStatus.CURRENT,
        "v1": VersionStatus.DRAINED,
        "v3": VersionStatus.INACTIVE,
    }
    assert routing.versions["v1"].drained_since == 42


def test_workflow_statuses_read_as_gate_statuses() -> None:
    assert gate_status(1) is GateStatus.RUNNING
    assert gate_status(2) is GateStatus.COMPLETED
    assert gate_status(3) is GateStatus.FAILED
    assert gate_status(7) is GateStatus.TIMED_OUT
    assert gate_status(6) is GateStatus.RUNNING  # continued as new
    assert not GateStatus.COMPLETED.failed
    assert GateStatus.TERMINATED.failed
