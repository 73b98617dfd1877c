"""An edit of the fleet file wakes the loop at once, not at its next iteration."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import yaml

from tests.unit._daemon_fakes import fleet_data
from twc.reconcile.observe import FleetFileWatch, signature

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
