"""The daemon parses its fleet file again only when the file's bytes change: a large
fleet's parse is most of a no-op iteration, and the file changes rarely."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.unit._daemon_fakes import fleet_data
from twc.errors import SpecError
from twc.reconcile import observe
from twc.reconcile.observe import CachedFleetFile
from twc.spec import Fleet, load_fleet_file


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


def _rewrite_keeping_the_signature(path: Path, image: str, mtime_ns: int) -> None:
    before = path.stat()
    with path.open("r+") as file:  # in place: the same inode
        file.write(path.read_text().replace("1.0.0", image))
    os.utime(path, ns=(mtime_ns, mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)


def test_an_edit_that_keeps_a_recent_signature_is_still_seen(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    read = CachedFleetFile(path)
    read()

    _rewrite_keeping_the_signature(path, "2.0.0", path.stat().st_mtime_ns)

    assert read().defaults.image == "registry.example/worker:2.0.0"
    assert read.parses == 2


def test_a_signature_older_than_the_last_read_is_trusted_without_reading(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    old = time.time_ns() - 10 * 10**9
    os.utime(path, ns=(old, old))
    read = CachedFleetFile(path)
    first = read()

    # Git's rule for racily clean files: the same inode, size and an mtime well before the
    # last read stand for the same bytes (an edit that forges them goes unseen, as in git).
    _rewrite_keeping_the_signature(path, "2.0.0", old)

    assert read() is first
    assert read.parses == 1


def test_a_read_while_another_thread_parses_answers_the_last_parse_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 5000-worker file takes seconds to parse: the loops that were not woken for the
    # edit go on with the fleet they had; the fleet file's watch waits for the new one.
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    read = CachedFleetFile(path)
    first = read()
    parsing, release = threading.Event(), threading.Event()

    def slow_load(file: Path) -> Fleet:
        parsing.set()
        assert release.wait(30)
        return load_fleet_file(file)

    monkeypatch.setattr(observe, "load_fleet_file", slow_load)
    _write(path, "registry.example/worker:2.0.0")
    waited: list[Fleet] = []
    watch = threading.Thread(target=lambda: waited.append(read(wait=True)))
    watch.start()
    assert parsing.wait(30)

    assert read() is first

    release.set()
    watch.join(30)
    assert [f.defaults.image for f in waited] == ["registry.example/worker:2.0.0"]
    assert read() is waited[0]
    assert read.parses == 2
