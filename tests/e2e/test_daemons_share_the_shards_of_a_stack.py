"""Real `twc run` processes on a sharded stack: one process runs every shard's loop (its
engine runs bounded), two replicas share the shards through one Lease per shard (each
at most its share), and a Lease taken away from a replica stops only that shard there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.daemon_process import FAST, DaemonProcess, Daemons, eventually
from tests.e2e.sharded import (
    fresh_namespaces,
    one_worker_per_shard,
    sharded_stack,
    wait_for_workers,
)
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

SHARDS = 3
ELECT = ["--leader-elect", "--lease-namespace", "default"]
SETTINGS = {
    **FAST,
    "leader_election": {"lease_duration": 6.0, "renew_deadline": 4.0, "retry_period": 1.0},
    # A shard's engine is gone before its Lease may be taken: renew deadline + grace + kill.
    "engine": {"interrupt_grace": 0.5},
    "shards": {"engine_concurrency": 2},
}


def _take_lease(kube: Any, lease_name: str) -> None:
    """Write another holder into the Lease. Its holder renews it every second, so a write
    can lose the race on resourceVersion (409): read it again and write again, as any
    other contender would."""
    for _ in range(20):
        lease = kube.coordination.read_namespaced_lease(lease_name, "default")
        lease.spec.holder_identity = "intruder"
        lease.spec.lease_duration_seconds = 3600
        try:
            kube.coordination.replace_namespaced_lease(lease_name, "default", lease)
            return
        except ApiException as err:
            if err.status != 409:
                raise
    raise AssertionError(f"the Lease {lease_name} could not be taken in 20 tries")


@pytest.fixture
def namespaces(kube: Any) -> Iterator[list[str]]:
    with fresh_namespaces(kube, SHARDS, "d") as made:
        yield made


def _leading(daemon: DaemonProcess) -> list[str]:
    try:
        return list(daemon.status().get("leadingShards") or [])
    except OSError:
        return []


def test_replicas_share_the_shards_and_a_lost_lease_stops_only_its_shard(
    local_env: LocalEnvironment, kube: Any, namespaces: list[str], daemons: Daemons
) -> None:
    fleet = one_worker_per_shard(local_env, namespaces)
    with sharded_stack(daemons, kube, fleet, SHARDS) as (fs, shard_stacks):
        first = daemons.start(fs, settings=SETTINGS, args=ELECT, name="first")
        wait_for_workers(kube, namespaces)
        eventually(
            lambda: len(_leading(first)) == SHARDS,
            timeout=60,
            message="the only replica never led every shard",
        )
        status = first.status()
        assert sorted(status["shards"]) == shard_stacks
        slots = status["engineSlots"]
        assert slots["limit"] == 2
        assert 1 <= slots["peak"] <= 2, slots

        second = daemons.start(fs, settings=SETTINGS, args=ELECT, name="second")
        # Three shards, two replicas: a share of two; the first hands one back.
        eventually(
            lambda: len(_leading(first)) == 2 and len(_leading(second)) == 1,
            timeout=90,
            message="the replicas never split the shards 2 + 1",
        )
        assert set(_leading(first)) | set(_leading(second)) == set(shard_stacks)

        # Take one of the first replica's Leases away (another holder writes it): that
        # shard stops there; its other shard goes on; the process lives.
        taken = sorted(_leading(first))[0]
        kept = sorted(_leading(first))[1]
        _take_lease(kube, f"twc-{taken}-daemon")
        eventually(
            lambda: taken not in _leading(first),
            timeout=30,
            message=f"the first replica kept leading {taken} after losing its Lease",
        )
        assert first.alive()
        assert kept in _leading(first)
        # The shard's loop notices at its next iteration and turns standby.
        eventually(
            lambda: first.status()["shards"][taken]["leading"] is False,
            timeout=30,
            message=f"the loop of {taken} never turned standby",
        )
        assert first.status()["shards"][kept]["leading"] is True
        # Ready again once the kept shard's first up succeeded (a standby shard is ready).
        eventually(
            lambda: first.probe("/readyz") == 200,
            timeout=120,
            message="the first replica never turned ready with one shard standing by",
        )
