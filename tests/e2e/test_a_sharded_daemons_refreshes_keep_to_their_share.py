"""A real `twc run` over a sharded stack whose refreshes are always due: the real CLI's
refreshes, as the engine guards journal them, keep to the refresh share of the
time (each one's next starts no sooner than its length times (1 - share) / share after
it ended), every shard takes its turn before any takes a second, and nothing is lost:
no up ran for them and every worker's Deployment is as it was."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.daemon_process import FAST, DaemonProcess, Daemons, eventually
from tests.e2e.sharded import (
    fresh_namespaces,
    one_worker_per_shard,
    sharded_stack,
    wait_for_workers,
)
from twc.cli.run import REFRESH_SHARE
from twc.engine.supervisor import JournalEntry
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

SHARDS = 3
SHARE = REFRESH_SHARE
SETTINGS = {
    **FAST,
    # Due one second after the last: without the budget, the one refresh slot is never
    # idle.
    "refresh_interval": 1.0,
    "shards": {"engine_concurrency": 2},
}


@pytest.fixture
def namespaces(kube: Any) -> Iterator[list[str]]:
    with fresh_namespaces(kube, SHARDS, "r") as made:
        yield made


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
    fleet = one_worker_per_shard(local_env, namespaces)
    with sharded_stack(daemons, kube, fleet, SHARDS) as (fs, _):
        daemon = daemons.start(fs, settings=SETTINGS)
        wait_for_workers(kube, namespaces)
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
