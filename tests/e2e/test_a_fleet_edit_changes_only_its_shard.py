"""A sharded ``twc run``: a fleet-file edit wakes the loop of the shard it changed and no
other, whose Deployments stay as they were; a worker in a namespace no shard holds yet is
assigned and applied at once; SIGHUP wakes every shard's loop."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.daemon_process import FAST, DaemonProcess, Daemons, eventually, settle
from tests.e2e.sharded import (
    fresh_namespaces,
    one_worker_per_shard,
    sharded_stack,
    wait_for_workers,
)
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

SHARDS = 3
SETTINGS = {
    **FAST,
    "reconcile_interval": 3600.0,
    "shards": {"engine_concurrency": 2},
}


@pytest.fixture
def namespaces(kube: Any) -> Iterator[list[str]]:
    with fresh_namespaces(kube, SHARDS + 1, "e") as made:
        yield made


def _iterations(daemon: DaemonProcess, shards: list[str]) -> dict[str, float]:
    return {shard: daemon.count("twc_reconcile_total", stack=shard) for shard in shards}


def _quiet(daemon: DaemonProcess, shards: list[str]) -> dict[str, float]:
    """The shards' iteration counts once each has iterated, no engine runs (an
    iteration is counted when it ends, after its up) and none has changed for 3 s."""
    last = _iterations(daemon, shards)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        settle(3.0)
        now = _iterations(daemon, shards)
        running = daemon.value("twc_engine_in_progress")
        if now == last and min(now.values()) > 0 and running == 0:
            return now
        last = now
    raise AssertionError(f"the shards' loops never went quiet: {last}")


def test_an_edit_changes_only_its_shard_and_a_new_namespace_is_assigned_at_once(
    local_env: LocalEnvironment, kube: Any, namespaces: list[str], daemons: Daemons
) -> None:
    placed, extra = namespaces[:SHARDS], namespaces[SHARDS]
    fleet = one_worker_per_shard(local_env, placed)
    with sharded_stack(daemons, kube, fleet, SHARDS + 1) as (fs, shard_stacks):
        fs.write(fleet)
        daemon = daemons.start(fs, settings=SETTINGS)
        wait_for_workers(kube, placed)
        shards = shard_stacks[:SHARDS]
        before = _quiet(daemon, shards)
        deployments = {ns: kube.get_deployment(ns, "w") for ns in placed}

        # One worker's image, in the middle shard's namespace.
        fleet["workers"][1]["image"] = "registry.example/worker:2.0.0"
        fs.write(fleet)

        def image(ns: str) -> str:
            return str(
                kube.get_deployment(ns, "w")["spec"]["template"]["spec"]["containers"][0]["image"]
            )

        eventually(
            lambda: image(placed[1]) == "registry.example/worker:2.0.0",
            timeout=120,
            message="the edited worker never got its new image",
        )
        # Its iteration is counted when it ends (after its up).
        eventually(
            lambda: _iterations(daemon, shards)[shards[1]] > before[shards[1]],
            timeout=120,
            message="the edited shard's iteration never ended",
        )
        after = _quiet(daemon, shards)
        # The other shards' loops were not woken at all ...
        assert after[shards[0]] == before[shards[0]]
        assert after[shards[2]] == before[shards[2]]
        # ... and their Deployments are as they were.
        for ns in (placed[0], placed[2]):
            now = kube.get_deployment(ns, "w")
            assert (
                now["metadata"]["resourceVersion"] == deployments[ns]["metadata"]["resourceVersion"]
            )

        # A worker in a namespace no shard holds: the assignment gives it a shard now.
        fleet["workers"].append({"name": "w", "namespace": extra, "taskQueueName": f"tq-{extra}"})
        fs.write(fleet)
        eventually(
            lambda: kube.get_deployment(extra, "w"),
            timeout=180,
            message="the worker of a new namespace waited for the assignment's next round",
        )
        assert sorted(daemon.status()["shards"]) == shard_stacks

        # SIGHUP: every shard's loop reconciles now.
        before = _quiet(daemon, shards)
        daemon.proc.send_signal(signal.SIGHUP)
        eventually(
            lambda: all(n > before[s] for s, n in _iterations(daemon, shards).items()),
            timeout=120,
            message="SIGHUP did not wake every shard's loop",
        )
        assert daemon.alive()
