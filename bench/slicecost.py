"""``python -m bench.slicecost``: what a status write costs the shards of one daemon.

Every status the daemon writes is a new version of the TemporalWorker list its shards
share, and each shard's loop reads its part of it in its next iteration. This measures,
in one process and without a cluster, the real :class:`~twc.kube.watch.NativeWatch`
(fed by a stand-in list call) and 20 :class:`~twc.loop.shardviews.ShardNative` views of
250 workers each: one status write, then every shard's ``observed()``. Two ways, in
random order, round by round: the views sharing one
:class:`~twc.shards.NamespaceGroups` (as ``twc run`` wires them), and each view grouping
the whole list on its own (every shard looking at all 5000 objects, as each shard's cut
did before). Wall time of the 20 reads per write; not an end-to-end figure.
"""

from __future__ import annotations

import argparse
import copy
import random
import time
from typing import Any

from bench.stats import summarize
from twc.kube.watch import NativeWatch
from twc.loop.shardviews import FanoutWakeup, ShardNamespaces, ShardNative
from twc.shards import NamespaceGroups

SHARDS = 20
PER_SHARD = 250


class _ListApi:
    """Answers the TemporalWorker list with fixed objects."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def list_cluster_custom_object(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"items": list(self.items), "metadata": {"resourceVersion": "1"}}


def _worker(name: str, namespace: str) -> dict[str, Any]:
    # About the size of a generated view with its status, as the watch keeps it.
    return {
        "apiVersion": "temporal.kmsvc.io/v1alpha1",
        "kind": "TemporalWorker",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "generation": 1,
            "resourceVersion": "1",
            "labels": {"app.kubernetes.io/managed-by": "twc"},
        },
        "spec": {
            "taskQueueName": f"tq-{name}",
            "image": "registry.example/worker:1.0.0",
            "replicas": 1,
            "connectionRef": {"name": "temporal"},
        },
        "status": {
            "phase": "Ready",
            "replicas": 1,
            "readyReplicas": 1,
            "conditions": [
                {"type": "WorkerDeploymentReady", "status": "True", "reason": "ReplicasReady"},
                {"type": "TemporalTaskQueueRegistered", "status": "True", "reason": "Polling"},
            ],
        },
    }


def measure(rounds: int, seed: int) -> dict[str, Any]:
    """``rounds`` writes for each way, in random order; per-write wall times."""
    items = [
        _worker(f"w-{s:02d}-{i:03d}", f"ns-{s:02d}")
        for s in range(SHARDS)
        for i in range(PER_SHARD)
    ]
    watch = NativeWatch(_ListApi(items), (), resync_interval=300, crd_exists=lambda _: True)
    watch.list_now()
    shared = NamespaceGroups()
    ways = {
        "shared groups (twc run)": [
            ShardNative(watch, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), shared)
            for s in range(SHARDS)
        ],
        "each shard on its own": [
            ShardNative(watch, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), NamespaceGroups())
            for s in range(SHARDS)
        ],
    }
    rng = random.Random(seed)
    order = [way for way in ways for _ in range(rounds)]
    rng.shuffle(order)
    times: dict[str, list[float]] = {way: [] for way in ways}
    for view in (v for views in ways.values() for v in views):
        view.observed()
    for n, way in enumerate(order):
        written = copy.deepcopy(rng.choice(items))
        written["status"] = {**written["status"], "observedGeneration": n}
        written["metadata"]["resourceVersion"] = str(n + 2)
        watch._workers._apply("MODIFIED", written)
        # Both ways read every version: the other way's views catch up unmeasured.
        for other, views in ways.items():
            if other != way:
                for view in views:
                    view.observed()
        start = time.perf_counter()
        for view in ways[way]:
            view.observed()
        times[way].append(time.perf_counter() - start)
    return {way: summarize(samples) for way, samples in times.items()}


def main() -> None:
    """Measure and print the two ways' per-write costs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="writes per way (≥ 20)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    found = measure(args.rounds, args.seed)
    print(
        f"{SHARDS} shards of {PER_SHARD} workers: every shard's observed() after one status write"
    )
    for way, summary in found.items():
        print(
            f"  {way}: p50 {summary['p50'] * 1000:.2f} ms, p95 {summary['p95'] * 1000:.2f} ms "
            f"({summary['n']} writes)"
        )


if __name__ == "__main__":
    main()
