"""`twc up` on a sharded stack a daemon runs applies each shard as `twc up` applies a
stack: it takes part in the shard's Lease, so it waits while the daemon's engine runs
that shard's step and applies only after it (the shard's updates never overlap), and
it reads the shard's record, so a TemporalWorker the daemon keeps through an invalid
edit keeps its Deployment byte for byte."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from pulumi.automation import CommandError

from tests.e2e.conftest import FleetStack
from tests.e2e.daemon_process import (
    FAST,
    ROOT,
    Daemons,
    eventually,
    wait_until_settled,
)
from tests.e2e.kept import accepted_worker, edit_invalidly
from tests.e2e.sharded import fresh_namespaces, one_worker_per_shard, wait_for_workers
from tests.faults._checks import deployment_bytes
from twc.engine import engine
from twc.kube.record import record_name
from twc.kube.shards import ShardMapStore, shard_map_name
from twc.local.environment import LocalEnvironment
from twc.shards import shard_stack

pytestmark = pytest.mark.e2e

SETTINGS = {
    **FAST,
    "leader_election": {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 0.5},
    "engine": {"interrupt_grace": 0.5},
    "shards": {"engine_concurrency": 2},
}
ELECT = ["--leader-elect", "--lease-namespace", "default"]


@contextlib.contextmanager
def _shards_removed(daemons: Daemons, kube: Any, fs: FleetStack) -> Iterator[None]:
    """Afterwards: every daemon stopped, and every shard the assignment names (other
    tests' objects may have added some) destroyed, with the assignment and records."""
    try:
        yield
    finally:
        daemons.stop_all()
        shard_map, _ = ShardMapStore(kube.core, namespace="default", stack=fs.name).read()
        for index in range(shard_map.shards if shard_map is not None else 0):
            name = shard_stack(fs.name, index)
            ref = engine.StackRef(name=name, config={"fleetFile": str(fs.fleet_file)}, env=fs.env)
            try:
                with contextlib.suppress(CommandError):  # a stopped daemon's stale lock
                    engine.select_stack(ref).cancel()
                engine.select_stack(ref).destroy(color="never")
            finally:
                engine.select_stack(ref).workspace.remove_stack(name, force=True)
            with contextlib.suppress(ApiException):
                kube.core.delete_namespaced_config_map(record_name(name), "default")
        with contextlib.suppress(ApiException):
            kube.core.delete_namespaced_config_map(shard_map_name(fs.name), "default")


def test_a_sharded_up_waits_for_the_daemons_step_and_keeps_a_kept_workers_deployment(
    local_env: LocalEnvironment, kube: Any, daemons: Daemons, task_queue: str
) -> None:
    with fresh_namespaces(kube, 2, "su") as namespaces:
        a, _ = namespaces
        fleet = one_worker_per_shard(local_env, namespaces)
        fleet["clusterObjects"] = True  # the TemporalWorker object below is a source
        # Each up that adds a worker waits for its pollers (none come): a long step.
        fs = daemons.stack(fleet, waitForPollersSeconds="25")
        with _shards_removed(daemons, kube, fs):
            daemon = daemons.start(fs, settings=SETTINGS, args=ELECT)
            wait_for_workers(kube, namespaces)
            accepted_worker(kube, a, "kept", task_queue)
            edit_invalidly(kube, a, "kept")
            wait_until_settled(daemon)
            kept = deployment_bytes(kube, a)["kept"]

            # The daemon's step on shard 0 (a new worker in a) runs; a manual up arrives.
            fleet["workers"].append({"name": "w2", "namespace": a, "taskQueueName": "tq-w2"})
            fs.write(fleet)
            eventually(
                lambda: daemon.value("twc_engine_in_progress") == 1,
                timeout=60,
                message="the daemon never started its step",
            )
            command = ["up", "--stack", fs.name, "--fleet-file", str(fs.fleet_file)]
            manual = subprocess.run(
                [sys.executable, "-m", "twc", *command],
                cwd=ROOT,
                env={**os.environ, **fs.env},
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert manual.returncode == 0, manual.stderr[-3000:]
            assert "waiting up to" in manual.stderr, manual.stderr[-3000:]
            assert "holding the stack's Lease" in manual.stderr
            assert "over to manual:" in daemon.text()
            # Shard 0's updates one after the other: the manual one after the daemon's.
            shard0 = engine.StackRef(
                name=shard_stack(fs.name, 0), config={"fleetFile": str(fs.fleet_file)}, env=fs.env
            )
            history = sorted(engine.select_stack(shard0).history(), key=lambda u: u.start_time)
            for before, after in itertools.pairwise(history):
                assert before.end_time is not None, vars(before)
                assert after.start_time >= before.end_time, (vars(before), vars(after))
            assert [u.result for u in history][-2:] == ["succeeded", "succeeded"]

            # The kept worker's Deployment, through the daemon's step and the manual up.
            assert kube.get_deployment(a, "w2") is not None
            assert deployment_bytes(kube, a)["kept"] == kept
            wait_until_settled(daemon)
            assert deployment_bytes(kube, a)["kept"] == kept
