"""A worker with ``rollout``: the program declares one Deployment per live version.

The target version is built from the spec as it is now; an older version the inputs
name is rebuilt from the version spec its Deployment recorded (so its pods keep running
the old image), with the current connection; each is ``<worker>-<buildID>``, selects
only its own pods and tells them their Temporal worker deployment and build ID. A
worker without ``rollout`` keeps its single in-place Deployment.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pulumi
import pytest

from tests.unit.pulumi_mocks import RecordingMocks, pulumi_test, reset_runtime
from twc.connections import default_registry
from twc.desired import DesiredInputs, desired_fleet
from twc.rollout import (
    BUILD_ID_LABEL,
    POLICY_ANNOTATION,
    TARGET_ANNOTATION,
    VERSION_ANNOTATION,
    VersionInput,
    WorkerVersions,
    build_id_of,
    version_spec,
)
from twc.spec import load_fleet

FAKE_CHECK = {
    "TaskQueueCheck": {
        "pollers": 1,
        "approximateBacklog": 0,
        "condition": {"type": "TemporalTaskQueueRegistered", "status": "True"},
    }
}


def fleet(image: str, **worker: Any) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "clusterObjects": False,
        "clusterConnections": [{"name": "local", "hostPort": "127.0.0.1:7233"}],
        "defaults": {
            "connectionRef": {
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": "local",
                }
            }
        },
        "workers": [
            {
                "name": "orders",
                "namespace": "apps",
                "taskQueueName": "orders",
                "image": image,
                "replicas": 2,
                "rollout": {
                    "strategy": "Progressive",
                    "steps": [{"rampPercentage": 10, "pauseDuration": "5m"}],
                },
                **worker,
            }
        ],
    }


def _worker(doc: dict[str, Any]) -> Any:
    return load_fleet(doc, "stacks/t.yaml").resolved_workers()[0]


def _build(mocks: RecordingMocks, doc: dict[str, Any], versions: WorkerVersions | None) -> Any:
    from twc.program import ProgramOptions, build

    pulumi.runtime.set_mocks(mocks, preview=False)
    desired = desired_fleet(
        load_fleet(doc, "stacks/t.yaml"),
        DesiredInputs(versions={"apps/orders": versions} if versions else {}),
        registry=default_registry(),
        file="stacks/t.yaml",
    )
    return build(
        desired, file="stacks/t.yaml", options=ProgramOptions(), read_secret=lambda ns, n: None
    )


def _env(inputs: dict[str, Any]) -> dict[str, Any]:
    container = inputs["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


OLD = fleet("registry.example/worker:1.4.2")
NEW = fleet("registry.example/worker:1.5.0")
OLD_BUILD, NEW_BUILD = build_id_of(_worker(OLD)), build_id_of(_worker(NEW))


@pulumi_test
def test_the_target_and_a_draining_version_each_get_their_deployment() -> Any:
    mocks = RecordingMocks(fake_dynamic=FAKE_CHECK)
    spec = version_spec(_worker(OLD))
    versions = WorkerVersions(versions={OLD_BUILD: VersionInput(replicas=None, spec=spec)})
    statuses = _build(mocks, NEW, versions)

    def check(status: Any) -> None:
        deployments = {
            r.inputs["metadata"]["labels"][BUILD_ID_LABEL]: r
            for r in mocks.of_type("kubernetes:apps/v1:Deployment")
        }
        assert set(deployments) == {OLD_BUILD, NEW_BUILD}
        new, old = deployments[NEW_BUILD].inputs, deployments[OLD_BUILD].inputs
        assert deployments[NEW_BUILD].name == f"apps/orders-version-{NEW_BUILD}"
        assert new["metadata"]["name"] == "orders-" + NEW_BUILD.replace(".", "-")
        assert new["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":1.5.0")
        # The draining version runs exactly what it ran: the old image.
        assert old["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":1.4.2")
        for build, inputs in ((NEW_BUILD, new), (OLD_BUILD, old)):
            assert inputs["spec"]["selector"]["matchLabels"][BUILD_ID_LABEL] == build
            assert inputs["spec"]["template"]["metadata"]["labels"][BUILD_ID_LABEL] == build
            env = _env(inputs)
            assert env["TEMPORAL_DEPLOYMENT_NAME"] == "apps/orders"
            assert env["TEMPORAL_WORKER_BUILD_ID"] == build
            assert inputs["spec"]["replicas"] == 2
            assert json.loads(inputs["metadata"]["annotations"][POLICY_ANNOTATION])["strategy"] == (
                "Progressive"
            )
        assert new["metadata"]["annotations"][TARGET_ANNOTATION] == "true"
        assert TARGET_ANNOTATION not in old["metadata"]["annotations"]
        assert json.loads(old["metadata"]["annotations"][VERSION_ANNOTATION]) == spec
        assert status["targetBuildID"] == NEW_BUILD
        assert set(status["versions"]) == {OLD_BUILD, NEW_BUILD}
        assert not mocks.of_type("kubernetes:apps/v1:Deployment")[0].name.endswith("-deployment")

    return statuses["apps/orders"].apply(check)


@pulumi_test
def test_a_drained_version_is_scaled_to_exactly_zero() -> Any:
    mocks = RecordingMocks(fake_dynamic=FAKE_CHECK)
    doc = copy.deepcopy(NEW)
    doc["workers"][0]["autoscaling"] = {
        "minReplicas": 2,
        "maxReplicas": 5,
        "targetBacklogPerReplica": 10,
    }
    spec = version_spec(_worker(OLD))
    versions = WorkerVersions(
        versions={
            OLD_BUILD: VersionInput(replicas=0, spec=spec),
            NEW_BUILD: VersionInput(replicas=4),
        }
    )
    statuses = _build(mocks, doc, versions)

    def check(_: Any) -> None:
        replicas = {
            r.inputs["metadata"]["labels"][BUILD_ID_LABEL]: r.inputs["spec"]["replicas"]
            for r in mocks.of_type("kubernetes:apps/v1:Deployment")
        }
        # Zero below minReplicas (sunset); the autoscaler's count for the target.
        assert replicas == {OLD_BUILD: 0, NEW_BUILD: 4}

    return statuses["apps/orders"].apply(check)


def test_a_version_without_its_recorded_spec_is_never_rebuilt_from_the_current_one() -> None:
    reset_runtime()  # the build raises before any output is awaited: no pulumi_test
    mocks = RecordingMocks(fake_dynamic=FAKE_CHECK)
    versions = WorkerVersions(versions={OLD_BUILD: VersionInput(replicas=None, spec=None)})
    with pytest.raises(ValueError, match="no version spec"):
        _build(mocks, NEW, versions)


@pulumi_test
def test_a_worker_without_rollout_keeps_its_single_in_place_deployment() -> Any:
    mocks = RecordingMocks(fake_dynamic=FAKE_CHECK)
    doc = copy.deepcopy(NEW)
    del doc["workers"][0]["rollout"]
    statuses = _build(mocks, doc, None)

    def check(status: Any) -> None:
        deployments = mocks.of_type("kubernetes:apps/v1:Deployment")
        assert [d.name for d in deployments] == ["apps/orders-deployment"]
        assert deployments[0].inputs["metadata"]["name"] == "orders"
        assert "TEMPORAL_WORKER_BUILD_ID" not in _env(deployments[0].inputs)
        assert "targetBuildID" not in status

    return statuses["apps/orders"].apply(check)


def test_the_build_id_follows_the_pods_not_the_replicas_or_the_rollout() -> None:
    more = copy.deepcopy(OLD)
    more["workers"][0]["replicas"] = 7
    more["workers"][0]["rollout"] = {"strategy": "AllAtOnce"}
    env = copy.deepcopy(OLD)
    env["workers"][0]["env"] = {"FEATURE": "on"}
    given = copy.deepcopy(OLD)
    given["workers"][0]["rollout"]["buildID"] = "release-7"
    assert build_id_of(_worker(more)) == OLD_BUILD
    assert build_id_of(_worker(env)) != OLD_BUILD
    assert OLD_BUILD.startswith("1.4.2-")
    assert NEW_BUILD.startswith("1.5.0-")
    assert build_id_of(_worker(given)) == "release-7"
