"""A laptop's shell (no ``POD_NAMESPACE``, no ``TWC_CONTROL_NAMESPACE``, a working copy
whose stack settings lack ``twc:controlNamespace``) finds the record the daemon keeps in
its own namespace: `twc up` keeps a TemporalWorker's Deployment byte for byte through an
invalid edit, and `twc approve` reads that record. While the daemon holds the stack's
Lease, `twc shards migrate` refuses and moves nothing."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, ROOT, Daemons, wait_for_success, wait_until_settled
from tests.e2e.kept import accepted_worker, edit_invalidly
from tests.faults._checks import assert_unchanged, deployment_bytes
from twc.cli import up
from twc.engine.shards import stack_resources
from twc.kube.record import record_name
from twc.kube.shards import shard_map_name
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("operator_shell")]

SETTINGS = {
    **FAST,
    "leader_election": {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5},
    "engine": {"interrupt_grace": 0.5},
}


def _migrate(stack: str, fleet_file: Path) -> subprocess.CompletedProcess[str]:
    command = ["shards", "migrate", "--stack", stack, "--fleet-file", str(fleet_file)]
    return subprocess.run(
        [sys.executable, "-m", "twc", *command],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _forget_control_namespace(stack: str) -> str | None:
    """Drop ``twc:controlNamespace`` from the stack's settings file (a working copy the
    daemon never ran in); the value it had."""
    settings = ROOT / f"Pulumi.{stack}.yaml"
    data = yaml.safe_load(settings.read_text())
    value: str | None = data["config"].pop("twc:controlNamespace", None)
    settings.write_text(yaml.safe_dump(data))
    return value


def test_a_laptop_finds_the_daemons_record_and_migrate_refuses_while_the_daemon_runs(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": "static", "namespace": namespace, "taskQueueName": task_queue}],
    )
    fs = daemons.stack(fleet)
    fs.env["POD_NAMESPACE"] = namespace  # the daemon runs in its pod's namespace
    args = ["--leader-elect", "--lease-namespace", namespace, "--lease-name", "twc-rec"]
    daemon = daemons.start(fs, settings=SETTINGS, args=args)
    wait_for_success(daemon, timeout=120)
    accepted_worker(kube, namespace, "native", f"{task_queue}-n")
    edit_invalidly(kube, namespace, "native")
    wait_until_settled(daemon)
    kube.core.read_namespaced_config_map(record_name(fs.name), namespace)  # the record
    before = deployment_bytes(kube, namespace)
    assert sorted(before) == ["native", "static"]

    # While the daemon holds the stack's Lease, moving the stack to shards is refused.
    sharded = tmp_path / "sharded.yaml"
    sharded.write_text(yaml.safe_dump({**fleet, "sharding": {"maxWorkersPerShard": 1}}))
    try:
        refused = _migrate(fs.name, sharded)
        assert refused.returncode != 0, refused.stdout + refused.stderr
        assert "holds the stack's Lease" in refused.stderr, refused.stderr
        assert stack_resources(fs.ref)  # the unsharded stack keeps its state
        with pytest.raises(ApiException) as absent:
            kube.core.read_namespaced_config_map(shard_map_name(fs.name), "default")
        assert absent.value.status == 404  # no assignment was recorded
    finally:
        with contextlib.suppress(ApiException):
            kube.core.delete_namespaced_config_map(shard_map_name(fs.name), "default")

    # The laptop: the daemon stopped, and a working copy without the daemon's settings.
    assert daemon.terminate() == 0
    pinned = _forget_control_namespace(fs.name)
    out = io.StringIO()
    assert up.run_up(fs.name, str(fs.fleet_file), out=out) == 0, out.getvalue()[-3000:]
    assert_unchanged(before, deployment_bytes(kube, namespace))

    out, err = io.StringIO(), io.StringIO()
    assert up.run_approve(fs.name, out=out, err=err) == 1  # nothing is held ...
    # ... in the daemon's record, which it found
    assert f"ConfigMap {namespace}/{record_name(fs.name)}" in err.getvalue(), err.getvalue()
    assert pinned == namespace  # the daemon wrote where its record is to the stack's config
