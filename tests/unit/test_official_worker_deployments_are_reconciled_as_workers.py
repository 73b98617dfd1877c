"""The official controller's WorkerDeployment objects join the desired state as versioned
workers, and their status is written in the official shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit._daemon_fakes import fleet_data
from tests.unit._native_objects import (
    CONNECTION,
    conn_obj,
    merge_connection_objects,
    merge_worker_objects,
)
from tests.unit.test_pod_template_env import FP, PLAIN
from twc.builders import deployment_spec
from twc.connections import Registry
from twc.native.status import official_status
from twc.spec import load_fleet

OFFICIAL = Path(__file__).parent.parent / "fixtures" / "official"
NOW = "2026-12-05T06:00:00Z"


def _docs_worker(namespace: str = "team") -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((OFFICIAL / "migration-workerdeployment.yaml").read_text())
    obj["metadata"] |= {"namespace": namespace, "uid": "u-1", "generation": 3}
    return obj


def test_the_docs_worker_deployment_is_a_versioned_worker_of_its_connection() -> None:
    fleet = load_fleet(fleet_data(), "fleet.yaml")
    conns = {CONNECTION: [conn_obj("production-temporal")]}
    merged = merge_connection_objects(fleet, conns, file="fleet.yaml")

    docs = _docs_worker()
    docs["spec"] |= {"minReadySeconds": 5, "progressDeadlineSeconds": 120}
    workers = merge_worker_objects(
        merged.fleet, [docs], registry=Registry.with_builtins(), file="fleet.yaml"
    )

    assert workers.rejected == ()
    native = workers.accepted["team/payment-processor"]
    assert (native.group, native.version, native.plural, native.kind) == (
        "temporal.io",
        "v1alpha1",
        "workerdeployments",
        "WorkerDeployment",
    )
    [worker] = [w for w in workers.fleet.resolved_workers() if w.name == "payment-processor"]
    assert worker.temporal_namespace == "production"
    assert worker.connection.name == "production-temporal"
    assert worker.rollout is not None
    assert [s.ramp_percentage for s in worker.rollout.steps or ()] == [1, 5, 25]
    assert worker.image == "payment-processor:v1.5.2"
    # The official Deployment fields reach each version's Deployment.
    spec = deployment_spec(worker, PLAIN, FP)
    assert (spec["minReadySeconds"], spec["progressDeadlineSeconds"]) == (5, 120)


def test_an_invalid_worker_deployment_is_rejected_alone() -> None:
    broken = _docs_worker()
    broken["spec"]["rollout"]["strategy"] = "Sideways"
    broken["metadata"]["name"] = "broken"
    fleet = load_fleet(fleet_data(), "fleet.yaml")
    merged = merge_connection_objects(
        fleet, {CONNECTION: [conn_obj("production-temporal")]}, file="fleet.yaml"
    )

    workers = merge_worker_objects(
        merged.fleet,
        [broken, _docs_worker()],
        registry=Registry.with_builtins(),
        file="fleet.yaml",
    )

    assert set(workers.accepted) == {"team/payment-processor"}
    assert [r.obj.key for r in workers.rejected] == ["team/broken"]


def _status(rollout: str, **extra: Any) -> dict[str, Any]:
    ready = {"type": "WorkerDeploymentReady", "status": "True", "reason": "ReplicasReady"}
    return {
        "phase": "Ready",
        "replicas": 3,
        "observedGeneration": 3,
        "conditions": [ready],
        "targetVersion": {"buildID": "v2-ab", "status": "Ramping", "rampPercentage": 5.0},
        "currentVersion": {"buildID": "v1-cd", "status": "Current", "deployment": "pp-v1-cd"},
        "rollout": {"phase": rollout, "reason": "Ramping", "message": "step 2 of 3"},
        "versionCount": 2,
        **extra,
    }


def test_a_ramping_version_is_progressing_and_not_ready_in_the_official_shape() -> None:
    out = official_status(_status("Progressing"), {}, namespace="team", now=NOW)

    assert out["targetVersion"] == {"buildID": "v2-ab", "status": "Ramping", "rampPercentage": 5.0}
    assert out["currentVersion"]["deployment"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "pp-v1-cd",
        "namespace": "team",
    }
    assert out["deprecatedVersions"] is None
    assert out["versionCount"] == 2
    conditions = {c["type"]: c for c in out["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "Ramping")
    assert conditions["Progressing"]["status"] == "True"
    assert conditions["Ready"]["observedGeneration"] == 3
    assert "phase" not in out
    assert "replicas" not in out


def test_a_complete_rollout_is_ready_and_keeps_its_transition_time() -> None:
    before = official_status(
        _status("Progressing"), {}, namespace="team", now="2026-01-01T00:00:00Z"
    )
    done = official_status(_status("Complete"), before, namespace="team", now=NOW)
    again = official_status(_status("Complete"), done, namespace="team", now="2027-01-01T00:00:00Z")

    ready = {c["type"]: c for c in again["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "RolloutComplete")
    assert ready["lastTransitionTime"] == NOW


def test_a_rejected_worker_deployment_is_not_ready_with_the_rejection_reason() -> None:
    rejected = {
        "phase": "Failed",
        "conditions": [
            {
                "type": "WorkerDeploymentReady",
                "status": "False",
                "reason": "InvalidSpec",
                "message": "bad",
            }
        ],
    }

    out = official_status(rejected, {}, namespace="team", now=NOW)

    ready = {c["type"]: c for c in out["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "InvalidSpec", "bad")
    assert out["targetVersion"] is None
