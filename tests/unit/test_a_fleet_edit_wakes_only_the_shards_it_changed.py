"""A fleet-file edit wakes the loops of the shards whose part of the file it changed,
not every shard's loop; an edit that may concern them all (the defaults, an invalid
file) still wakes every one; the fleet file is read again only when its stat says it
changed."""

from __future__ import annotations

import copy
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_a_shard_sees_and_builds_only_its_namespaces import FLEET
from twc.loop.observe import CachedFleetFile
from twc.loop.shardviews import FanoutWakeup, FleetEditWakeup
from twc.shards import namespaces_changed, slice_fleet
from twc.spec import Fleet, load_fleet


def _fleet(edit: Any = None) -> Fleet:
    doc = copy.deepcopy(FLEET)
    if edit is not None:
        edit(doc)
    return load_fleet(doc, "fleet.yaml")


def _worker(name: str) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        next(w for w in doc["workers"] if w["name"] == name)["image"] = "registry.example/w:2"

    return edit


def test_one_workers_change_concerns_its_namespace_only() -> None:
    assert namespaces_changed(_fleet(), _fleet(_worker("w3"))) == frozenset({"b"})
    assert namespaces_changed(_fleet(), _fleet(_worker("w1"))) == frozenset({"a"})
    assert namespaces_changed(_fleet(), _fleet()) == frozenset()


def test_a_worker_in_a_new_namespace_concerns_that_namespace() -> None:
    def add(doc: dict[str, Any]) -> None:
        doc["workers"].append({"name": "w9", "namespace": "c", "taskQueueName": "w9"})

    assert namespaces_changed(_fleet(), _fleet(add)) == frozenset({"c"})


def test_a_queue_polled_from_another_namespace_concerns_the_polling_workers_too() -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["queues"][1]["workerEnabled"] = True  # b/shared, polled by a/w4

    assert namespaces_changed(_fleet(), _fleet(edit)) == frozenset({"a", "b"})


def test_an_edit_outside_the_namespaced_lists_concerns_every_shard() -> None:
    def defaults(doc: dict[str, Any]) -> None:
        doc["defaults"]["image"] = "registry.example/worker:2.0.0"

    def cluster_connection(doc: dict[str, Any]) -> None:
        doc["clusterConnections"][0]["hostPort"] = "elsewhere.example:7233"

    assert namespaces_changed(_fleet(), _fleet(defaults)) is None
    assert namespaces_changed(_fleet(), _fleet(cluster_connection)) is None


@settings(max_examples=60, deadline=None)
@given(
    images=st.lists(
        st.sampled_from(["", "registry.example/x:1", "registry.example/x:2"]),
        min_size=4,
        max_size=4,
    ),
    enabled=st.booleans(),
    host=st.sampled_from(["a.example:7233", "a2.example:7233"]),
)
def test_every_shard_not_named_keeps_the_same_slice(
    images: list[str], enabled: bool, host: str
) -> None:
    def edit(doc: dict[str, Any]) -> None:
        for worker, image in zip(doc["workers"], images, strict=True):
            if image:
                worker["image"] = image
        doc["queues"][1]["workerEnabled"] = enabled
        doc["connections"][0]["hostPort"] = host

    old, new = _fleet(), _fleet(edit)
    changed = namespaces_changed(old, new)
    assert changed is not None
    for namespace in ("a", "b", "c"):
        if namespace not in changed:
            assert slice_fleet(old, [namespace]) == slice_fleet(new, [namespace])


class _Loops:
    """Two shards' loops (a and b) subscribed to one fan-out."""

    def __init__(self) -> None:
        self.fanout = FanoutWakeup()
        self.a, self.b = threading.Event(), threading.Event()
        self.fanout.subscribe(self.a, lambda: ("a",))
        self.fanout.subscribe(self.b, lambda: ("b",))
        self.unassigned = threading.Event()

    def woken(self) -> set[str]:
        out = {name for name in ("a", "b") if getattr(self, name).is_set()}
        self.a.clear()
        self.b.clear()
        return out


class _File:
    """The cached reader as the edits see it: its current parse and its parse count."""

    def __init__(self) -> None:
        self.fleet: Fleet | Exception = _fleet()
        self.parses = 1

    def parsed(self, fleet: Fleet | Exception, parses: int = 1) -> None:
        self.fleet = fleet
        self.parses += parses

    def __call__(self) -> Fleet:
        if isinstance(self.fleet, Exception):
            raise self.fleet
        return self.fleet


def _edits(loops: _Loops, file: _File) -> FleetEditWakeup:
    return FleetEditWakeup(
        loops.fanout, file, parses=lambda: file.parses, unassigned=loops.unassigned.set
    )


def test_an_edit_wakes_the_loop_of_the_shard_it_changed_and_no_other() -> None:
    loops, file = _Loops(), _File()
    edits = _edits(loops, file)
    edits.set()  # the first edit seen: nothing to compare with, every loop
    assert loops.woken() == {"a", "b"}

    file.parsed(_fleet(_worker("w3")))
    edits.set()
    assert loops.woken() == {"b"}
    assert edits.targeted == 1

    file.parsed(_fleet(_worker("w3")))  # the same content again: nobody
    edits.set()
    assert loops.woken() == set()
    assert not loops.unassigned.is_set()


def test_a_version_a_loop_parsed_between_two_edits_wakes_every_loop() -> None:
    loops, file = _Loops(), _File()
    edits = _edits(loops, file)
    edits.set()
    loops.woken()

    # w1 (shard a) changed and set back before the watch looked, a loop having parsed
    # the first write: shard a may hold the first one, so it must be woken too.
    file.parsed(_fleet(), parses=2)
    edits.set()
    assert loops.woken() == {"a", "b"}
    assert edits.targeted == 0


def test_a_new_namespace_wakes_the_assignment_and_an_invalid_file_every_loop() -> None:
    loops, file = _Loops(), _File()
    edits = _edits(loops, file)
    edits.set()
    loops.woken()

    def add(doc: dict[str, Any]) -> None:
        doc["workers"].append({"name": "w9", "namespace": "c", "taskQueueName": "w9"})

    file.parsed(_fleet(add))
    edits.set()
    assert loops.woken() == set()
    assert loops.unassigned.is_set()

    file.parsed(RuntimeError("fleet.yaml: line 3: not a mapping"))
    edits.set()
    assert loops.woken() == {"a", "b"}
    file.parsed(_fleet(add))
    edits.set()  # back from an invalid file: every loop reads it again
    assert loops.woken() == {"a", "b"}


def test_the_fleet_file_is_read_again_only_when_its_stat_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(FLEET, sort_keys=False))
    old = time.time() - 60
    os.utime(path, (old, old))  # written a minute ago: its stat is trusted
    reads: list[Path] = []
    real = Path.read_bytes

    def counting(self: Path) -> bytes:
        reads.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    cached = CachedFleetFile(path)

    first = cached()
    assert cached() is first
    assert cached() is first
    assert len(reads) == 1

    # A new version (written now: racily recent, so read on every call until older).
    doc = copy.deepcopy(FLEET)
    doc["workers"][0]["image"] = "registry.example/w:2"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    second = cached()
    assert second is not first
    assert second.workers[0].image == "registry.example/w:2"
    cached()
    assert len(reads) == 3


def test_a_rewrite_that_keeps_size_and_time_is_still_seen_while_racily_recent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(FLEET, sort_keys=False))
    cached = CachedFleetFile(path)
    first = cached()
    st0 = path.stat()
    # The same length, the same modification time, other bytes: only a read sees it.
    text = path.read_text().replace("w1", "x1")
    with open(path, "r+") as f:
        f.write(text)
    os.utime(path, ns=(st0.st_atime_ns, st0.st_mtime_ns))
    assert path.stat().st_size == st0.st_size
    second = cached()
    assert second.workers[0].name == "x1"
    assert second is not first
