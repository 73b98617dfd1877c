"""The daemon parses its fleet file again only when the file's bytes change: a large
fleet's parse is most of a no-op iteration, and the file changes rarely."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.unit._daemon_fakes import fleet_data
from twc.errors import SpecError
from twc.loop.observe import CachedFleetFile


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


def test_loops_that_read_a_changed_file_at_once_share_one_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One edit wakes every shard's loop. At 5000 workers over 20 shards, each loop
    # parsed the edit itself: 20 parses of the same bytes, most of the daemon's time
    # (a profile of the benchmark's Queue figure: 68 % of the shard loops' samples).
    from twc.spec import FleetReader

    real = FleetReader.load

    def slow(self: FleetReader, raw: bytes) -> object:
        time.sleep(0.2)  # a large fleet's parse: long enough for every reader to arrive
        return real(self, raw)

    monkeypatch.setattr(FleetReader, "load", slow)
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    read = CachedFleetFile(path)
    start = threading.Barrier(8)
    fleets: list[object] = []

    def loop() -> None:
        start.wait()
        fleets.append(read())

    threads = [threading.Thread(target=loop) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(fleets) == 8
    assert read.parses == 1
    assert all(fleet is fleets[0] for fleet in fleets)


def test_an_unchanged_iteration_computes_the_desired_state_only_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from tests.unit._daemon_fakes import make_daemon
    from twc.loop.plan import desired_from as real

    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    h = make_daemon()
    h.daemon.observer.sources = replace(h.daemon.observer.sources, fleet=CachedFleetFile(path))
    calls: list[int] = []

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("twc.loop.daemon.desired_from", counting)
    h.step()
    h.step()  # the first iteration's accepted specs are the second's inputs
    first = len(calls)
    for _ in range(3):
        h.step()
    assert len(calls) == first  # nothing changed: computed once, reused

    _write(path, "registry.example/worker:2.0.0")
    h.step()
    assert len(calls) == first + 1
    assert h.engine.last_program().workers[
        f"{h.fleet['workers'][0]['namespace']}/payments"
    ].image == ("registry.example/worker:2.0.0")


def _held_parse(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Make each parse announce itself (``started``) and wait for ``release``."""
    from twc.spec import FleetReader

    real = FleetReader.load
    started, release = threading.Event(), threading.Event()

    def held(self: FleetReader, raw: bytes) -> object:
        started.set()
        assert release.wait(10), "the test never released the parse"
        return real(self, raw)

    monkeypatch.setattr(FleetReader, "load", held)
    return started, release


def test_a_reader_meeting_a_parse_in_progress_goes_on_with_the_last_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # At 5000 workers a parse takes seconds on a busy machine; with the file edited
    # every few seconds, every shard's loop queued behind parses of edits that had
    # nothing to do with the Queue it was about to apply (20 to 60 s in a benchmark).
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    woken = threading.Event()
    read = CachedFleetFile(path, on_parsed=woken.set)
    old = read()
    started, release = _held_parse(monkeypatch)
    _write(path, "registry.example/worker:2.0.0")
    parsed: list[object] = []
    parser = threading.Thread(target=lambda: parsed.append(read()))
    parser.start()
    assert started.wait(10)

    assert read() is old  # not waited for: the last parse answers
    assert read.stale_answers == 1
    assert not woken.is_set()

    release.set()
    parser.join(10)
    assert woken.is_set()  # the reader that went on is told the new fleet is there
    new = read()
    assert new is parsed[0]
    assert new.defaults.image == "registry.example/worker:2.0.0"
    assert read.parses == 2


def test_no_wake_when_every_reader_waited_for_the_parse(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    _write(path, "registry.example/worker:1.0.0")
    woken = threading.Event()
    read = CachedFleetFile(path, on_parsed=woken.set)
    read()
    _write(path, "registry.example/worker:2.0.0")
    read()
    assert read.parses == 2
    assert read.stale_answers == 0
    assert not woken.is_set()


def test_while_a_fix_is_parsed_readers_get_the_last_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The last parse is what the readers know: an invalid file stays invalid to them
    # until the fix is parsed, never a fleet older than the error.
    path = tmp_path / "fleet.yaml"
    path.write_text("apiVersion: twc.temporal.io/v1\nkind: Fleet\nworkers: [{name: 1}]\n")
    read = CachedFleetFile(path)
    with pytest.raises(SpecError):
        read()
    started, release = _held_parse(monkeypatch)
    _write(path, "registry.example/worker:3.0.0")
    parser = threading.Thread(target=read)
    parser.start()
    assert started.wait(10)

    with pytest.raises(SpecError):
        read()

    release.set()
    parser.join(10)
    assert read().defaults.image == "registry.example/worker:3.0.0"
