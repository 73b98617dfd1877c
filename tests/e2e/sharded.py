"""A sharded stack of one worker per namespace for the daemon's e2e tests: the fleet, its
shards' stacks, and their removal (engine state, stacks, the assignment) afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException
from pulumi.automation import CommandError

from tests.e2e.conftest import FleetStack, fleet_doc
from tests.e2e.daemon_process import Daemons, eventually
from tests.helpers import delete_twc_objects
from twc.engine import engine
from twc.kube.shards import shard_map_name
from twc.local.environment import LocalEnvironment


@contextlib.contextmanager
def fresh_namespaces(kube: Any, count: int, prefix: str) -> Iterator[list[str]]:
    """``count`` new namespaces (sorted, so shard ``i`` gets the ``i``-th); afterwards
    twc's objects in them deleted."""
    made = sorted(f"{prefix}-{uuid.uuid4().hex[:6]}" for _ in range(count))
    for ns in made:
        kube.ensure_namespace(ns)
    try:
        yield made
    finally:
        for ns in made:
            delete_twc_objects(kube, ns)


def one_worker_per_shard(local_env: LocalEnvironment, namespaces: list[str]) -> dict[str, Any]:
    """A fleet of a worker ``w`` in each namespace, a shard each."""
    fleet = fleet_doc(
        "",
        host_port=local_env.temporal_address(),
        workers=[{"name": "w", "namespace": ns, "taskQueueName": f"tq-{ns}"} for ns in namespaces],
    )
    fleet["sharding"] = {"maxWorkersPerShard": 1}
    # The fleet file alone: another test's Queue or TemporalWorker in the shared embedded
    # cluster would join this stack as a namespace, and a shard, of its own.
    fleet["clusterObjects"] = False
    return fleet


@contextlib.contextmanager
def sharded_stack(
    daemons: Daemons, kube: Any, fleet: dict[str, Any], shards: int
) -> Iterator[tuple[FleetStack, list[str]]]:
    """The fleet's stack and its shards' stack names; afterwards every daemon stopped
    and the shards' stacks and assignment removed."""
    fs = daemons.stack(fleet)
    shard_stacks = [f"{fs.name}.s{i:02d}" for i in range(shards)]
    try:
        yield fs, shard_stacks
    finally:
        daemons.stop_all()
        for name in shard_stacks:
            ref = engine.StackRef(name=name, config={"fleetFile": str(fs.fleet_file)}, env=fs.env)
            try:
                # Every daemon is stopped: a lock left by one stopped mid-up is stale.
                with contextlib.suppress(CommandError):
                    engine.select_stack(ref).cancel()
                engine.select_stack(ref).destroy(color="never")
            finally:
                engine.select_stack(ref).workspace.remove_stack(name, force=True)
        # Absent when no daemon got as far as assigning the shards.
        with contextlib.suppress(ApiException):
            kube.core.delete_namespaced_config_map(shard_map_name(fs.name), "default")


def wait_for_workers(kube: Any, namespaces: list[str]) -> None:
    """Until each namespace's shard has created its worker."""
    for ns in namespaces:
        eventually(
            lambda ns=ns: kube.get_deployment(ns, "w"),
            timeout=300,
            message=f"the shard of {ns} never created its worker",
        )
