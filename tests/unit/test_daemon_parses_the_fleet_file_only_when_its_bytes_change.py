"""The daemon parses its fleet file again only when the file's bytes change: a large
fleet's parse is most of a no-op iteration, and the file changes rarely."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit._daemon_fakes import fleet_data
from twc.errors import SpecError
from twc.reconcile.observe import CachedFleetFile


def _write(path: Path, image: str) -> None:
    doc = fleet_data()
    doc["defaults"]["image"] = image
    path.write_text(yaml.safe_dump(doc))


def test_unchanged_bytes_are_not_parsed_again(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    read = CachedFleetFile(path)

    first = read()
    for _ in range(5):
        assert read() is first
    assert read.parses == 1


def test_changed_bytes_are_parsed_and_the_new_fleet_returned(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    read = CachedFleetFile(path)
    read()

    _write(path, "registry.example/worker:2.0.0")
    fleet = read()

    assert read.parses == 2
    assert fleet.defaults.image == "registry.example/worker:2.0.0"


def test_an_invalid_edit_raises_every_time_until_fixed(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    read = CachedFleetFile(path)
    read()

    path.write_text("apiVersion: twc.temporal.io/v1\nkind: Fleet\nworkers: [{name: 1}]\n")
    for _ in range(2):
        with pytest.raises(SpecError):
            read()

    _write(path, "registry.example/worker:3.0.0")
    assert read().defaults.image == "registry.example/worker:3.0.0"


def test_an_invalid_edit_is_parsed_once_while_its_bytes_stay(tmp_path: Path) -> None:
    # Every shard's loop reads the file on every iteration; a broken 5000-worker file
    # was parsed again by each of them, each time, until someone fixed it.
    path = tmp_path / "fleet.yaml"
    path.write_text("apiVersion: twc.temporal.io/v1\nkind: Fleet\nworkers: [{name: 1}]\n")
    read = CachedFleetFile(path)
    messages = set()
    for _ in range(3):
        with pytest.raises(SpecError) as err:
            read()
        messages.add(str(err.value))
    assert read.parses == 1
    assert len(messages) == 1
