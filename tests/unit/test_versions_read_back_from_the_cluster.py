"""Which versions exist is read back from the cluster, never remembered: each version
Deployment names its worker, build ID and version spec; what cannot be read is kept
(without a spec) rather than dropped, so nothing is deleted by a misread."""

from __future__ import annotations

import json
from typing import Any

from twc.cli.status import format_status_table
from twc.kube.workloads import parse_versions
from twc.rollout import (
    Routing,
    TemporalVersion,
    VersionDeployment,
    VersionStatus,
    rollout_status,
)


def dep(
    namespace: str, worker: str, build: str | None, replicas: int | None, **annotations: str
) -> dict[str, Any]:
    labels = {"twc.temporal.io/worker": worker}
    if build:
        labels["temporal.io/build-id"] = build
    return {
        "metadata": {
            "name": f"{worker}-{build}",
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"replicas": replicas} if replicas is not None else {},
        "status": {"readyReplicas": 1},
    }


def test_version_deployments_parse_per_worker_and_build() -> None:
    spec = {"image": "w:1"}
    found = parse_versions(
        [
            dep(
                "apps",
                "orders",
                "1.0-aa",
                2,
                **{
                    "twc.temporal.io/version-spec": json.dumps(spec),
                    "twc.temporal.io/target-version": "true",
                },
            ),
            dep("apps", "orders", "0.9-bb", 0, **{"twc.temporal.io/version-spec": "{broken"}),
            dep("apps", "orders", None, 1),  # the in-place Deployment of an unversioned worker
            dep("other", "orders", "1.0-aa", None),
        ]
    )
    assert set(found) == {"apps/orders", "other/orders"}
    one = found["apps/orders"]["1.0-aa"]
    assert one.deployment == VersionDeployment("1.0-aa", "orders-1.0-aa", 2, 1)
    assert one.spec == spec
    assert one.target is True
    broken = found["apps/orders"]["0.9-bb"]
    assert broken.spec is None
    assert broken.deployment.replicas == 0
    assert broken.target is False
    # No replicas field is Kubernetes' default, 1.
    assert found["other/orders"]["1.0-aa"].deployment.replicas == 1


def test_twc_status_lists_each_version_under_its_worker() -> None:
    routing = Routing(
        conflict_token=b"",
        current="v1",
        ramping="v2",
        ramp_percentage=25,
        versions={
            "v1": TemporalVersion("v1", VersionStatus.CURRENT),
            "v2": TemporalVersion("v2", VersionStatus.RAMPING),
            "v0": TemporalVersion("v0", VersionStatus.DRAINED, drained_since=1_800_000_000),
        },
    )
    record = rollout_status(
        target="v2",
        deployment_name="apps/orders",
        routing=routing,
        deployments={
            "v2": VersionDeployment("v2", "orders-v2", 1, 1),
            "v1": VersionDeployment("v1", "orders-v1", 2, 2),
            "v0": VersionDeployment("v0", "orders-v0", 0, 0),
        },
    )
    assert record["targetVersion"]["rampPercentage"] == 25
    assert record["currentVersion"]["buildID"] == "v1"
    assert [v["buildID"] for v in record["deprecatedVersions"]] == ["v0"]
    assert record["deprecatedVersions"][0]["drainedSince"] == "2027-01-15T08:00:00Z"
    table = format_status_table(
        {
            "apps/orders": {
                "phase": "Ready",
                "replicas": 1,
                "readyReplicas": 1,
                "taskQueue": "orders",
                "conditions": [],
                "rollout": record,
            }
        }
    )
    lines = table.splitlines()
    assert lines[1].startswith("apps/orders")
    assert lines[2:] == [
        "  target      v2  Ramping 25 %, 1/1 ready",
        "  current     v1  Current, 2/2 ready",
        "  deprecated  v0  Drained, 0/0 ready",
    ]
