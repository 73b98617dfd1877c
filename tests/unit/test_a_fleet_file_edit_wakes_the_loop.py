"""An edit of the fleet file wakes the loop at once, not at its next iteration."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import assert_eventually
from tests.unit._daemon_fakes import fleet_data
from twc.reconcile.observe import CachedFleetFile, FleetFileWatch, signature
from twc.reconcile.shards import FanoutWakeup
from twc.shards import namespaces_changed
from twc.spec import load_fleet

pytestmark = pytest.mark.unit


def _write(path: Path, image: str) -> None:
    doc = fleet_data()
    doc["defaults"]["image"] = image
    path.write_text(yaml.safe_dump(doc))


def _watch(path: Path) -> tuple[FleetFileWatch, threading.Event]:
    wakeup = threading.Event()
    watch = FleetFileWatch(path, wakeup, interval=0.02)
    watch.start()
    return watch, wakeup


def test_an_edit_wakes_the_loop(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("workers: []\n")
    watch, wakeup = _watch(fleet)
    try:
        fleet.write_text("workers: [{name: a}]\n")
        assert wakeup.wait(10), "the edit never woke the loop"
        assert watch.changes == 1
    finally:
        watch.stop()


def test_a_mounted_configmaps_symlink_swap_wakes_the_loop(tmp_path: Path) -> None:
    # The kubelet updates a mounted ConfigMap by pointing ..data at a new directory: the
    # path's own bytes never change in place.
    old, new = tmp_path / "..2026_1", tmp_path / "..2026_2"
    old.mkdir()
    new.mkdir()
    (old / "fleet.yaml").write_text("workers: []\n")
    (new / "fleet.yaml").write_text("workers: []\n")  # same size, new inode
    (tmp_path / "..data").symlink_to(old.name)
    fleet = tmp_path / "fleet.yaml"
    fleet.symlink_to("..data/fleet.yaml")
    watch, wakeup = _watch(fleet)
    try:
        swap = tmp_path / "..data_tmp"
        swap.symlink_to(new.name)
        os.replace(swap, tmp_path / "..data")
        assert wakeup.wait(10), "the symlink swap never woke the loop"
    finally:
        watch.stop()


def test_an_untouched_file_never_wakes_the_loop(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("workers: []\n")
    watch, wakeup = _watch(fleet)
    try:
        assert not wakeup.wait(0.3)
        assert watch.changes == 0
    finally:
        watch.stop()


def test_a_file_that_goes_and_comes_back_wakes_the_loop_each_time(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("workers: []\n")
    watch, wakeup = _watch(fleet)
    try:
        fleet.unlink()
        assert wakeup.wait(10), "the removal never woke the loop (it reports the file gone)"
        assert signature(fleet) is None
        wakeup.clear()
        fleet.write_text("workers: []\n")
        assert wakeup.wait(10), "the file's return never woke the loop"
    finally:
        watch.stop()


def test_an_invalid_edit_still_wakes_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    watch, wakeup = _watch(path)
    try:
        path.write_text("apiVersion: twc.temporal.io/v1\nkind: Fleet\nworkers: [{name: 1}]\n")
        assert wakeup.wait(5)  # the loop reads it and reports why it is invalid
    finally:
        watch.stop()


def _doc(**edits: Any) -> dict[str, Any]:
    workers = [{"name": "w", "namespace": ns, "taskQueueName": f"tq-{ns}"} for ns in ("a", "b")]
    doc = fleet_data(workers=workers, queues=[{"name": "q", "namespace": "c"}])
    for edit in edits.values():
        edit(doc)
    return doc


def _image(ns: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        next(w for w in doc["workers"] if w["namespace"] == ns)["image"] = "r.example/w:2"

    return edit


def _poll_q(doc: dict[str, Any]) -> None:
    doc["workers"][1] = {"name": "w", "namespace": "b", "queueRef": {"name": "q", "namespace": "c"}}


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        (_doc(), _doc(), frozenset()),
        (_doc(), _doc(e=_image("a")), frozenset({"a"})),
        (_doc(), _doc(e=_image("a"), f=_image("b")), frozenset({"a", "b"})),
        (
            _doc(),
            _doc(
                e=lambda d: d["workers"].append(
                    {"name": "x", "namespace": "n", "taskQueueName": "x"}
                )
            ),
            None,
        ),
        (
            _doc(p=_poll_q),
            _doc(p=_poll_q, e=lambda d: d["queues"][0].update(workerEnabled=True)),
            {"b", "c"},
        ),
        (_doc(), _doc(e=lambda d: d["defaults"].update(image="r.example/w:3")), None),
        (_doc(), _doc(e=lambda d: d["clusterConnections"][0].update(hostPort="t:1")), None),
    ],
)
def test_an_edit_concerns_the_namespaces_whose_part_it_changed(
    before: dict[str, Any], after: dict[str, Any], changed: frozenset[str] | None
) -> None:
    assert namespaces_changed(load_fleet(before, "f"), load_fleet(after, "f")) == changed


def test_through_a_fanout_an_edit_wakes_only_the_loops_of_its_namespaces(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(_doc()))
    fanout = FanoutWakeup()
    loops = {ns: threading.Event() for ns in ("a", "b")}
    assignment = threading.Event()
    for ns, event in loops.items():
        fanout.subscribe(event, functools.partial(tuple, (ns,)))
    fanout.subscribe(assignment, lambda: ())
    watch = FleetFileWatch(path, fanout, interval=0.02, read=CachedFleetFile(path))
    watch.start()
    try:
        path.write_text(yaml.safe_dump(_doc(e=_image("b"))))
        assert loops["b"].wait(10), "the edit never woke its namespace's loop"
        assert not loops["a"].is_set()
        assert not assignment.is_set()
        loops["b"].clear()
        os.utime(path, ns=(1, 1))  # the same bytes: nothing to wake
        assert_eventually(lambda: watch.changes == 2, message="the touch was never looked at")
        assert not any(e.is_set() for e in (*loops.values(), assignment))
        doc = _doc(e=_image("b"))
        doc["workers"].append({"name": "x", "namespace": "new", "taskQueueName": "x"})
        path.write_text(yaml.safe_dump(doc))
        assert assignment.wait(10), "a namespace no shard holds never woke the assignment"
    finally:
        watch.stop()
