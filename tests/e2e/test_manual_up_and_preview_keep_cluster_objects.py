"""`twc up`, `twc preview` and plain `pulumi up` on a stack the daemon manages include
the cluster's objects as the daemon does: a pull request's preview shows no deletion of
the workers that come from Queue and TemporalWorker objects, and a manual up — twc's or
Pulumi's own — keeps them."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import create_queue, fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import object_ref, temporal_worker
from twc.cli import preview as preview_cmd
from twc.cli import up
from twc.engine.engine import ROOT
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]


def _preview(stack: str, file: Path, **kwargs: Any) -> tuple[int, dict[str, Any], str]:
    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        stack,
        fmt="json",
        detailed=True,
        fleet_file=str(file),
        out=out,
        err=err,
        **kwargs,
    )
    return code, json.loads(out.getvalue() or "{}"), err.getvalue()


def test_preview_and_up_of_a_daemon_managed_stack_keep_queue_and_temporalworker_workers(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": "static", "namespace": namespace, "taskQueueName": task_queue}],
    )
    fs = daemons.stack(fleet)
    daemon = daemons.start(fs)
    wait_for_success(daemon)
    create_queue(kube, namespace, "orders")
    conn = fleet["clusterConnections"][0]["name"]
    kube.custom.create_namespaced_custom_object(
        "temporal.kmsvc.io",
        "v1",
        namespace,
        "temporalworkers",
        temporal_worker(
            namespace, "native", f"{task_queue}-n", object_ref("ClusterConnection", conn)
        ),
    )
    for name in ("worker-orders", "native"):
        eventually(
            lambda name=name: kube.get_deployment(namespace, name),
            timeout=90,
            message=f"the daemon never created {name}",
        )
    wait_until_settled(daemon)
    assert daemon.terminate() == 0

    # The daemon's stack: the preview merges the cluster's objects and shows no change.
    code, report, err = _preview(fs.name, fs.fleet_file)
    assert "including from the cluster, as the daemon does: " in err
    assert code == 0, (report, err)

    # The fleet file alone would delete both workers: that is what --file-only shows.
    code, report, err = _preview(fs.name, fs.fleet_file, cluster_objects=False)
    assert code == 2
    deleted = {
        g["name"]
        for g in report.get("groups", [])
        if g["kind"] == "worker" and g["operation"] == "delete"
    }
    assert {f"{namespace}/worker-orders", f"{namespace}/native"} <= deleted, report

    out = io.StringIO()
    assert up.run_up(fs.name, str(fs.fleet_file), out=out) == 0
    for name in ("worker-orders", "native", "static"):
        assert kube.get_deployment(namespace, name) is not None, name

    # Plain `pulumi up`, Pulumi's own CLI on the project: the program reads the cluster's
    # objects itself, through the same desired-state function, and changes nothing.
    before = {n: _version(kube, namespace, n) for n in ("worker-orders", "native", "static")}
    for command in (
        ["preview", "--expect-no-changes"],
        ["up", "--yes", "--skip-preview", "--expect-no-changes"],
    ):
        done = subprocess.run(
            ["pulumi", *command, "--stack", fs.name, "--non-interactive"],
            cwd=ROOT,
            env={**os.environ, **fs.env},
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    after = {n: _version(kube, namespace, n) for n in before}
    assert after == before


def _version(kube: Any, namespace: str, name: str) -> str:
    dep = kube.get_deployment(namespace, name)
    assert dep is not None, f"Deployment {namespace}/{name} is gone"
    return str(dep["metadata"]["resourceVersion"])
