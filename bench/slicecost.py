"""``python -m bench.slicecost``: what a status write, and an iteration with nothing
changed, cost the shards of one daemon.

Every status the daemon writes is a new version of the TemporalWorker list its shards
share, and each shard's loop reads its part of it in its next iteration. This measures,
in one process and without a cluster, the real :class:`~twc.kube.watch.NativeWatch`
(fed by a stand-in list call) and 20 :class:`~twc.loop.shardviews.ShardNative` views of
250 workers each: one status write, then every shard's ``observed()``. Three ways, in
random order, round by round: the watch keeping its objects by namespace (as ``twc run``
reads it now: the write rebuilds its namespace's group), the views sharing one
:class:`~twc.shards.NamespaceGroups` over the watch's whole list (grouped once per
version, as before), and each view grouping the whole list on its own (every shard
looking at all 5000 objects, as each shard's cut did before that).

Then the same for an iteration with nothing changed, on 20
:class:`~twc.loop.shardviews.ShardQueues` views of 5000 Queues: every shard's
``observed()`` and ``snapshot()``, with the watch's snapshot handed out again (now) and
sorted afresh on every call (before).

Then a Deployment event (the autoscaler's writes are such events) on a
:class:`~twc.kube.caches.DeploymentCache` of 5000 worker Deployments, and every shard's
three readings of it (replicas, Deployments, the autoscaled): derived per namespace and
taken by namespace (now), and derived from the whole cache and cut from all its keys by
each shard (before). Wall time of the 20 shards' reads; not an end-to-end figure.

Last, the daemon's load of its 5000-worker fleet file after a one-worker image change
(the benchmark's busy load makes one every 2 s): by the entries that changed (now) and
whole (before). Wall time of the load alone, in one process on whatever core is free.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import threading
import time
from functools import partial
from typing import Any

import yaml

from bench.stats import summarize
from twc.desired import ObjectList
from twc.kube.caches import DeploymentCache
from twc.kube.watch import NativeSnapshot, NativeWatch, QueueWatcher
from twc.loop.shardviews import (
    FanoutWakeup,
    ShardNamespaces,
    ShardNative,
    ShardQueues,
    shard_keyed,
    shard_keys,
)
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


class _WholeList:
    """The native watch as shards read it before it kept its objects by namespace: its
    whole lists only (no ``grouped``)."""

    def __init__(self, watch: NativeWatch) -> None:
        self._watch = watch

    def start(self, wakeup: threading.Event) -> None:
        """Nothing to start: the test feeds the watch."""

    def stop(self) -> None:
        """Nothing to stop."""

    def observed(self) -> dict[str, ObjectList]:
        return self._watch.observed()

    def snapshot(self) -> NativeSnapshot | None:
        return self._watch.snapshot()


class _SortedAfresh:
    """The Queue watch as shards read it before its snapshot was handed out again: the
    objects sorted afresh on every call (and no ``grouped``)."""

    def __init__(self, watch: QueueWatcher) -> None:
        self._watch = watch

    def start(self, wakeup: threading.Event) -> None:
        """Nothing to start: the test feeds the watch."""

    def stop(self) -> None:
        """Nothing to stop."""

    def snapshot(self) -> tuple[dict[str, Any], ...] | None:
        found = self._watch.by_key()
        return None if found is None else tuple(found[k] for k in sorted(found))  # type: ignore[misc]

    def observed(self) -> ObjectList:
        return self._watch.observed()


def _queue(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
        "spec": {"taskQueue": f"tq-{name}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
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
    whole = _WholeList(watch)
    ways = {
        "kept by namespace in the watch (twc run)": [
            ShardNative(watch, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), NamespaceGroups())
            for s in range(SHARDS)
        ],
        "the whole list grouped once per version, shared (before)": [
            ShardNative(whole, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), shared)
            for s in range(SHARDS)
        ],
        "each shard on its own": [
            ShardNative(whole, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), NamespaceGroups())
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


def measure_unchanged(rounds: int, seed: int) -> dict[str, Any]:
    """``rounds`` rounds of every shard reading its Queues with nothing changed, for each
    way, in random order; per-round wall times."""
    queues = QueueWatcher(
        _ListApi(
            [
                _queue(f"q-{s:02d}-{i:03d}", f"ns-{s:02d}")
                for s in range(SHARDS)
                for i in range(PER_SHARD)
            ]
        ),
        resync_interval=300,
        crd_exists=lambda _: True,
    )
    queues.list_now()
    afresh = _SortedAfresh(queues)
    ways = {
        "the snapshot handed out again (twc run)": [
            ShardQueues(
                queues, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), NamespaceGroups()
            )
            for s in range(SHARDS)
        ],
        "sorted afresh on every call (before)": [
            ShardQueues(
                afresh, ShardNamespaces((f"ns-{s:02d}",)), FanoutWakeup(), NamespaceGroups()
            )
            for s in range(SHARDS)
        ],
    }
    for view in (v for views in ways.values() for v in views):
        view.observed()
    rng = random.Random(seed)
    order = [way for way in ways for _ in range(rounds)]
    rng.shuffle(order)
    times: dict[str, list[float]] = {way: [] for way in ways}
    for way in order:
        start = time.perf_counter()
        for view in ways[way]:
            view.observed()
            view.snapshot()
        times[way].append(time.perf_counter() - start)
    return {way: summarize(samples) for way, samples in times.items()}


class _DeploymentList:
    """A ``list_deployment_for_all_namespaces`` answering fixed Deployments."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __call__(self, **_: Any) -> Any:
        # Raw JSON, as the cache asks for it (``_preload_content=False``).
        body = {"items": self.items, "metadata": {"resourceVersion": "1"}}
        return type("Response", (), {"data": json.dumps(body).encode()})()


def _deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"twc.temporal.io/worker": name, "twc.temporal.io/stack": "bench"},
        },
        "spec": {"replicas": replicas},
        "status": {"readyReplicas": replicas},
    }


def measure_deployment_event(rounds: int, seed: int) -> dict[str, Any]:
    """``rounds`` Deployment events for each way, in random order; per-event wall times
    of every shard's three readings."""
    items = [
        _deployment(f"w-{s:02d}-{i:03d}", f"ns-{s:02d}", 1)
        for s in range(SHARDS)
        for i in range(PER_SHARD)
    ]
    apps = type("Apps", (), {"list_deployment_for_all_namespaces": _DeploymentList(items)})
    kube: Any = type("Kube", (), {"apps": apps()})()
    cache = DeploymentCache(kube, resync_interval=300, stack="bench")
    cache.watcher.list_now()

    def whole_cut(read: Any, mine: tuple[str, ...]) -> Any:
        # Each shard testing every key of a reading derived from the whole cache.
        def cut() -> Any:
            found = read()
            keys = found.items() if isinstance(found, dict) else ((k, None) for k in found)
            return {k: v for k, v in keys if k.partition("/")[0] in mine}

        return cut

    ways: dict[str, list[Any]] = {
        "derived per namespace, taken by namespace (twc run)": [
            reader
            for s in range(SHARDS)
            for reader in (
                shard_keyed(
                    partial(cache.by_namespace, "replicas"), ShardNamespaces((f"ns-{s:02d}",))
                ),
                shard_keys(
                    partial(cache.by_namespace, "scaled"), ShardNamespaces((f"ns-{s:02d}",))
                ),
                shard_keyed(
                    partial(cache.by_namespace, "deployments"), ShardNamespaces((f"ns-{s:02d}",))
                ),
            )
        ],
        "derived from the whole cache, cut by each shard (before)": [
            whole_cut(read, (f"ns-{s:02d}",))
            for s in range(SHARDS)
            for read in (cache.worker_replicas, cache.scaled, cache.worker_deployments)
        ],
    }
    rng = random.Random(seed)
    order = [way for way in ways for _ in range(rounds)]
    rng.shuffle(order)
    times: dict[str, list[float]] = {way: [] for way in ways}
    for readers in ways.values():
        for read in readers:
            read()
    for n, way in enumerate(order):
        picked = rng.choice(items)
        meta = picked["metadata"]
        cache.watcher._apply("MODIFIED", _deployment(meta["name"], meta["namespace"], n + 2))
        for other, readers in ways.items():
            if other != way:
                for read in readers:
                    read()
        start = time.perf_counter()
        for read in ways[way]:
            read()
        times[way].append(time.perf_counter() - start)
    return {way: summarize(samples) for way, samples in times.items()}


def measure_fleet_edit(rounds: int, seed: int, n: int = SHARDS * PER_SHARD) -> dict[str, Any]:
    """``rounds`` one-worker image changes of the benchmark's ``n``-worker fleet file
    (written as the benchmark's busy load writes it), loaded each way in random order:
    by the daemon's :class:`~twc.spec.FleetReader` (the changed entry parsed alone,
    unchanged workers not resolved again) and whole (parse, validation, resolution of
    all, as before). The reader is brought to the version before each change first."""
    from bench import fleets
    from twc.spec import FleetReader, load_fleet
    from twc.spec._yaml import parse_yaml

    namespaces = fleets.namespaces_for(n, PER_SHARD)

    def text(revisions: dict[int, int]) -> bytes:
        doc = fleets.generate_fleet(
            n,
            namespaces=namespaces,
            revisions=revisions,
            max_workers_per_shard=PER_SHARD,
            autoscale=True,
        )
        return yaml.safe_dump(doc, sort_keys=False).encode()

    reader = FleetReader("fleet.yaml")
    revisions: dict[int, int] = {}
    before = text(revisions)
    reader.load(before)
    rng = random.Random(seed)
    ways = ["only what changed (FleetReader, twc run)", "the whole file (before)"]
    order = [way for way in ways for _ in range(rounds)]
    rng.shuffle(order)
    times: dict[str, list[float]] = {way: [] for way in ways}
    for round_, way in enumerate(order, start=1):
        revisions[rng.randrange(n)] = round_
        after = text(revisions)
        start = time.perf_counter()
        if way == ways[0]:
            reader.load(after)
        else:
            load_fleet(parse_yaml(after), "fleet.yaml")
        times[way].append(time.perf_counter() - start)
        if way != ways[0]:
            reader.load(after)  # the reader's last version is the one before the next
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
    _print(found, "writes")
    unchanged = measure_unchanged(args.rounds, args.seed)
    print(
        f"{SHARDS} shards of {PER_SHARD} Queues: every shard's observed() and snapshot(), "
        "nothing changed"
    )
    _print(unchanged, "rounds")
    events = measure_deployment_event(args.rounds, args.seed)
    print(
        f"{SHARDS} shards of {PER_SHARD} Deployments: every shard's three readings after one "
        "Deployment event"
    )
    _print(events, "events")
    edits = measure_fleet_edit(max(20, args.rounds // 10), args.seed)
    print(f"{SHARDS * PER_SHARD}-worker fleet file: load after a one-worker image change")
    _print(edits, "edits")


def _print(found: dict[str, Any], what: str) -> None:
    for way, summary in found.items():
        print(
            f"  {way}: p50 {summary['p50'] * 1000:.3f} ms, p95 {summary['p95'] * 1000:.3f} ms "
            f"({summary['n']} {what})"
        )


if __name__ == "__main__":
    main()
