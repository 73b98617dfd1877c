"""A real `twc run` over a sharded stack whose refreshes are always due: the real CLI's
refreshes, as the engine guards journal them, keep to `shards.refresh_share` of the
time (each one's next starts no sooner than its length times (1 - share) / share after
it ended), every shard takes its turn before any takes a second, and nothing is lost:
no up ran for them and every worker's Deployment is as it was."""

from __future__ import annotations

import contextlib
import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from pulumi.automation import CommandError

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, DaemonProcess, Daemons, eventually
from tests.helpers import delete_twc_objects
from twc.kube.shardmap import shard_map_name
from twc.local import LocalEnvironment
from twc.stackrun import engine
from twc.stackrun.guard import JournalEntry

pytestmark = pytest.mark.e2e

SHARDS = 3
SHARE = 0.25
SETTINGS = {
    **FAST,
    # Due one second after the last: without the budget, the one refresh slot is never
    # idle.
    "refresh_interval": 1.0,
    "shards": {"engine_concurrency": 2, "assignment_interval": 1.0, "refresh_share": SHARE},
}


@pytest.fixture
def namespaces(kube: Any) -> Iterator[list[str]]:
    made = sorted(f"r-{uuid.uuid4().hex[:6]}" for _ in range(SHARDS))
    for ns in made:
        kube.ensure_namespace(ns)
    yield made
    for ns in made:
        delete_twc_objects(kube, ns)


def _refreshes(daemon: DaemonProcess) -> list[tuple[str, JournalEntry]]:
    """Every refresh the shards' guards journalled, ``(shard directory, entry)``, by
    start time."""
    found = []
    for path in daemon.tmpdir.glob("twc-daemon-*/shard-*/guard/journal/*.json"):
        entry = JournalEntry.from_json(json.loads(path.read_text()))
        if entry.command[:1] == ("refresh",):
            found.append((path.parents[2].name, entry))
    return sorted(found, key=lambda f: f[1].started)


def _deployments(kube: Any, namespaces: list[str]) -> dict[str, tuple[str, Any]]:
    out = {}
    for ns in namespaces:
        dep = kube.get_deployment(ns, "w")
        assert dep is not None, f"the worker of {ns} is gone"
        out[ns] = (
            dep["metadata"]["uid"],
            dep["spec"]["template"]["spec"]["containers"][0]["image"],
        )
    return out


def test_refreshes_take_their_share_of_the_time_every_shard_in_turn(
    local_env: LocalEnvironment, kube: Any, namespaces: list[str], daemons: Daemons
) -> None:
    fleet = fleet_doc(
        "",
        host_port=local_env.temporal_address(),
        workers=[{"name": "w", "namespace": ns, "taskQueueName": f"tq-{ns}"} for ns in namespaces],
    )
    fleet["sharding"] = {"maxWorkersPerShard": 1}
    fleet["clusterObjects"] = False
    fs = daemons.stack(fleet)
    shard_stacks = [f"{fs.name}.s{i:02d}" for i in range(SHARDS)]
    try:
        daemon = daemons.start(fs, settings=SETTINGS)
        for ns in namespaces:
            eventually(
                lambda ns=ns: kube.get_deployment(ns, "w"),
                timeout=300,
                message=f"the shard of {ns} never created its worker",
            )
        eventually(
            lambda: all(
                s.get("lastOutcome") is not None for s in daemon.status()["shards"].values()
            ),
            timeout=300,
            message="the shards never finished their first iteration",
        )
        before = _deployments(kube, namespaces)
        ups = daemon.ups()

        eventually(
            lambda: len(_refreshes(daemon)) >= SHARDS + 1,
            timeout=600,
            interval=1.0,
            message="the shards never refreshed one after another",
        )
        refreshes = _refreshes(daemon)

        # Every shard once before any twice: the most overdue goes first.
        assert len({shard for shard, _ in refreshes[:SHARDS]}) == SHARDS, refreshes
        # Each refresh's next starts no sooner than its share allows (the slot is held a
        # little longer than the CLI runs, so the CLI's own times bound it from below).
        for (_, done), (_, following) in itertools.pairwise(refreshes):
            took = done.ended - done.started
            assert took > 0
            gap = following.started - done.ended
            assert gap >= took * (1 - SHARE) / SHARE - 0.05, (
                f"a refresh of {took:.1f} s was followed after {gap:.1f} s"
            )
        status = daemon.status()["engineSlots"]
        assert status["refreshShare"] == SHARE
        assert status["refreshSeconds"] > 0

        # Nothing lost: no up for the refreshes (none found drift), every worker as it was.
        assert daemon.ups() == ups
        assert _deployments(kube, namespaces) == before
        assert daemon.alive()
    finally:
        daemons.stop_all()
        for name in shard_stacks:
            ref = engine.StackRef(name=name, config={"fleetFile": str(fs.fleet_file)}, env=fs.env)
            try:
                with contextlib.suppress(CommandError):
                    engine.select_stack(ref).cancel()
                engine.destroy(ref)
            finally:
                engine.select_stack(ref).workspace.remove_stack(name, force=True)
        with contextlib.suppress(ApiException):
            kube.core.delete_namespaced_config_map(shard_map_name(fs.name), "default")
