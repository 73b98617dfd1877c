"""A TemporalWorker edited into a spec the CRD admits but the fleet model refuses keeps
its running Deployment byte for byte, with the real daemon, and says so: the object's
status (``SpecAccepted=False``, reason ``InvalidSpec``, "its last accepted spec keeps
running"), an Event and ``twc_kept_objects``. A restarted daemon reads the last accepted
spec back from the stack's record and keeps it too; fixing the object takes it back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import conditions, object_ref, temporal_worker
from tests.faults._checks import (
    assert_converged,
    assert_unchanged,
    deployment_bytes,
    events,
    metric,
)
from twc.local.environment import LocalEnvironment, project_root

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

GROUP, VERSION, PLURAL = "temporal.kmsvc.io", "v1", "temporalworkers"


def _object(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    return dict(kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))


def _spec_condition(kube: Any, namespace: str, name: str) -> dict[str, Any] | None:
    return conditions(_object(kube, namespace, name)).get("SpecAccepted")


def test_an_invalid_edit_keeps_the_deployment_byte_identical_and_reports_invalid_spec(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    fs = daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address()))
    daemon = daemons.start(fs)
    wait_for_success(daemon, timeout=120)
    ref = object_ref("ClusterConnection", "local")
    for name in ("orders", "billing"):
        body = temporal_worker(namespace, name, f"{task_queue}-{name}", ref)
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    for name in ("orders", "billing"):
        eventually(
            lambda name=name: (
                (_spec_condition(kube, namespace, name) or {}).get("status") == "True"
            ),
            timeout=120,
            message=f"{name} was never accepted",
        )
    wait_until_settled(daemon)
    generation = _object(kube, namespace, "orders")["metadata"]["generation"]
    before = deployment_bytes(kube, namespace)
    assert sorted(before) == ["billing", "orders"]
    ups = daemon.ups()

    # The edit: admitted by the CRD (a quantity is int-or-string), refused by the model.
    edited = time.monotonic()
    kube.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        "orders",
        {"spec": {"resources": {"requests": {"cpu": "lots"}}}},
    )
    spec = eventually(
        lambda: (c := _spec_condition(kube, namespace, "orders")) and c["status"] == "False" and c,
        timeout=60,
        message="the invalid edit was never reported on the object",
    )
    reported = time.monotonic() - edited
    assert spec["reason"] == "InvalidSpec"
    assert f"last accepted spec (generation {generation}) keeps running" in spec["message"]
    status = _object(kube, namespace, "orders")["status"]
    assert status["observedGeneration"] == generation
    assert status["phase"] != "Failed"
    eventually(
        lambda: events(kube, namespace, "orders", "InvalidSpec"),
        timeout=30,
        message="no InvalidSpec Event",
    )
    assert "keeps running" in events(kube, namespace, "orders", "InvalidSpec")[0]
    assert metric(daemon, "twc_kept_objects", kind="TemporalWorker") == 1
    assert "InvalidSpec" in daemon.text()
    wait_until_settled(daemon)
    assert daemon.ups() == ups  # the desired state did not change: no engine run at all
    assert_unchanged(before, deployment_bytes(kube, namespace))

    # With the daemon stopped, the others read the last accepted spec from the stack's
    # record: `twc preview` shows no change (no deletion of "orders"), and plain
    # `pulumi up` (the program reading the cluster itself) changes nothing.
    assert daemon.terminate() == 0
    env = {**os.environ, **fs.env}
    preview = subprocess.run(
        [
            sys.executable,
            "-m",
            "twc",
            "preview",
            "--stack",
            fs.name,
            "--fleet-file",
            str(fs.fleet_file),
            "--format",
            "json",
            "--detailed-exitcode",
        ],
        cwd=project_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert json.loads(preview.stdout)["summary"]["resources"]["delete"] == 0
    fs.up()
    assert_unchanged(before, deployment_bytes(kube, namespace))

    # A restarted daemon reads the last accepted spec from the stack's record.
    restarted = daemons.start(fs, settings=FAST, name="restarted")
    wait_for_success(restarted, timeout=120)
    wait_until_settled(restarted)
    assert "accepted specs from ConfigMap" in restarted.text()
    assert metric(restarted, "twc_kept_objects", kind="TemporalWorker") == 1
    assert_unchanged(before, deployment_bytes(kube, namespace))

    # Fixed (the edit undone): accepted again, the condition turns True, and since the
    # spec is the one running, nothing of the Deployment changes either.
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "orders", {"spec": {"resources": None}}
    )
    eventually(
        lambda: (_spec_condition(kube, namespace, "orders") or {}).get("status") == "True",
        timeout=120,
        message="the fixed object was never accepted",
    )
    wait_until_settled(restarted)
    fixed = _object(kube, namespace, "orders")
    assert fixed["status"]["observedGeneration"] == fixed["metadata"]["generation"]
    assert metric(restarted, "twc_kept_objects", kind="TemporalWorker") == 0
    assert_unchanged(before, deployment_bytes(kube, namespace))
    assert_converged(kube, restarted, fs, namespace, {"orders", "billing"})
    print(f"invalid TemporalWorker edit: InvalidSpec on the object {reported:.1f} s after the edit")
