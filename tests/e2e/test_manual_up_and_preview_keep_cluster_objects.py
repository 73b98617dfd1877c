"""`twc up` and `twc preview` on a stack the daemon manages merge the cluster's objects
as the daemon does: a pull request's preview shows no deletion of the workers that come
from Queue and TemporalWorker objects, and a manual up keeps them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import create_queue, fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import object_ref, temporal_worker
from twc.commands import preview as preview_cmd
from twc.commands import up
from twc.local import LocalEnvironment

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _engine_environment(pulumi_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in pulumi_env.items():
        monkeypatch.setenv(key, value)


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
