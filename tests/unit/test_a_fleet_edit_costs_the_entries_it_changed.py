"""A fleet file's next version costs the worker entries that changed, not the fleet.

At 5000 workers a whole load of the file is about half a second of Python (the parse's
composition and each worker's resolution), and the daemon paid it on every edit of one
line. :class:`~twc.spec.FleetReader` parses only the changed worker entry when that is
all that changed, and resolves only the workers that differ. Every answer must be the
whole load's: the property tests edit files at random, in the characters YAML cares
about, and compare the two.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twc.errors import SpecError
from twc.spec import FleetReader, load_fleet
from twc.spec._yaml import YamlDocument, YamlRejected, parse_yaml


def _fleet(n: int, *, image: str = "registry.example/worker:1.0.0") -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "clusterConnections": [{"name": "prod", "hostPort": "temporal.example:7233"}],
        "defaults": {
            "image": image,
            "connectionRef": {
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": "prod",
                }
            },
        },
        "workers": [
            {
                "name": f"w-{i:03d}",
                "namespace": f"team-{i % 3}",
                "replicas": 1 + i % 2,
                "taskQueueName": f"tq-{i:03d}",
            }
            for i in range(n)
        ],
    }


def _text(doc: dict[str, Any], *, indent_sequence: bool = False) -> bytes:
    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            super().increase_indent(flow, False if indent_sequence else indentless)

    return yaml.dump(doc, Dumper=Dumper, sort_keys=False).encode()


def _whole(raw: bytes) -> object:
    try:
        return ("ok", parse_yaml(raw))
    except YamlRejected as err:
        return ("rejected", str(err))


def _then(document: YamlDocument, raw: bytes) -> tuple[object, YamlDocument | None]:
    try:
        found = document.then(raw)
    except YamlRejected as err:
        return ("rejected", str(err)), None
    return ("ok", found.data), found


@pytest.mark.parametrize("indent_sequence", [False, True], ids=["indentless", "indented"])
def test_one_workers_image_change_parses_that_entry_alone(indent_sequence: bool) -> None:
    doc = _fleet(200)
    before = YamlDocument.parse(_text(doc, indent_sequence=indent_sequence))
    doc["workers"][120]["image"] = "registry.example/worker:2.0.0"
    raw = _text(doc, indent_sequence=indent_sequence)

    after = before.then(raw)

    assert after.data == parse_yaml(raw)
    entry = yaml.dump([doc["workers"][120]], sort_keys=False)
    assert after.parsed == len(entry) + (2 * entry.count("\n") if indent_sequence else 0)
    assert after.parsed < len(after.text) / 100
    assert after.entries == YamlDocument.parse(raw).entries
    assert after.nodes == YamlDocument.parse(raw).nodes


def test_a_worker_added_or_deleted_parses_its_neighbourhood_alone() -> None:
    doc = _fleet(200)
    document = YamlDocument.parse(_text(doc))
    doc["workers"].insert(50, {"name": "added", "namespace": "team-0"})
    raw = _text(doc)
    added = document.then(raw)
    assert added.data == parse_yaml(raw)
    assert added.parsed < len(added.text) / 50

    del doc["workers"][10]
    raw = _text(doc)
    deleted = added.then(raw)
    assert deleted.data == parse_yaml(raw)
    assert deleted.parsed == 0, "the deleted entry leaves nothing to parse"
    assert deleted.entries == YamlDocument.parse(raw).entries


def test_a_change_outside_the_workers_parses_the_whole_file() -> None:
    doc = _fleet(50)
    document = YamlDocument.parse(_text(doc))
    doc["defaults"]["image"] = "registry.example/worker:9.9.9"
    raw = _text(doc)
    after = document.then(raw)
    assert after.parsed == len(after.text)
    assert after.data == parse_yaml(raw)


def test_an_entry_edited_into_bad_yaml_is_refused_as_the_whole_file_is() -> None:
    doc = _fleet(30)
    raw = _text(doc)
    document = YamlDocument.parse(raw)
    broken = raw.replace(b"name: w-017", b'name: "w-017', 1)
    with pytest.raises(YamlRejected) as whole:
        parse_yaml(broken)
    with pytest.raises(YamlRejected) as part:
        document.then(broken)
    assert str(part.value) == str(whole.value)
    assert "line" in str(part.value)


def test_an_entry_line_moved_back_to_the_sequences_column_is_read_as_the_whole_file_reads_it() -> (
    None
):
    doc = _fleet(30)
    raw = _text(doc)
    document = YamlDocument.parse(raw)
    # "  replicas: 2" of one entry at the column of the "-": the whole file refuses it.
    moved = raw.replace(
        b"- name: w-011\n  namespace: team-2\n  replicas: 2\n",
        b"- name: w-011\n  namespace: team-2\nreplicas: 2\n",
        1,
    )
    assert moved != raw
    assert _then(document, moved)[0] == _whole(moved)


@pytest.mark.parametrize("instead", ["...\n", "---\n", "# gone\n", "\n"])
def test_an_entry_replaced_by_a_marker_or_a_comment_reads_as_the_whole_file_reads(
    instead: str,
) -> None:
    doc = _fleet(5)
    raw = _text(doc)
    document = YamlDocument.parse(raw)
    entry = "- name: w-002\n  namespace: team-2\n  replicas: 1\n  taskQueueName: tq-002\n"
    assert entry in raw.decode()
    edited = raw.decode().replace(entry, instead, 1).encode()
    assert _then(document, edited)[0] == _whole(edited)


ALPHABET = [*" \n-:#'\"|>[]{}&*!,?%@`a1.\t", "\n- ", "\n  ", ": ", "- name: x\n"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=1, max_value=6),
    indent_sequence=st.booleans(),
    comments=st.booleans(),
    at=st.floats(min_value=0.0, max_value=1.0),
    cut=st.integers(min_value=0, max_value=12),
    insert=st.lists(st.sampled_from(ALPHABET), max_size=4),
)
def test_any_edit_reads_as_the_whole_file_reads(
    n: int, indent_sequence: bool, comments: bool, at: float, cut: int, insert: list[str]
) -> None:
    doc = _fleet(n)
    doc["workers"][0]["env"] = {"NOTE": "first line\nsecond line\n"}  # a block scalar
    raw = _text(doc, indent_sequence=indent_sequence)
    if comments:
        raw = re.sub(rb"\n( +)replicas:", rb"\n\1# how many\n\1replicas:", raw, count=1)
    document = YamlDocument.parse(raw)
    text = raw.decode()
    # Most edits land in the workers, where the partial parse is tried.
    start = text.index("workers:")
    where = start + int(at * (len(text) - start))
    edited = (text[:where] + "".join(insert) + text[where + cut :]).encode()

    answer, found = _then(document, edited)
    assert answer == _whole(edited)
    if found is not None:
        fresh = YamlDocument.parse(edited)
        assert found.nodes == fresh.nodes
        if found.parsed < len(found.text):
            assert found.entries == fresh.entries


def test_a_reader_resolves_as_a_whole_load_through_a_run_of_edits() -> None:
    rng = random.Random(20261203)
    doc = _fleet(40)
    reader = FleetReader("fleet.yaml")
    whole_parses = loaded = 0
    for _ in range(150):
        action = rng.choice(
            ["image", "image", "replicas", "add", "delete", "defaults", "bad", "invalid"]
        )
        workers = doc["workers"]
        if action == "image":
            rng.choice(workers)["image"] = f"registry.example/worker:{rng.randrange(100)}"
        elif action == "replicas":
            rng.choice(workers)["replicas"] = rng.randrange(1, 5)
        elif action == "add":
            workers.insert(
                rng.randrange(len(workers) + 1),
                {
                    "name": f"n-{rng.randrange(10**6)}",
                    "namespace": "team-1",
                    "taskQueueName": "tq-new",
                },
            )
        elif action == "delete" and len(workers) > 2:
            del workers[rng.randrange(len(workers))]
        elif action == "defaults":
            doc["defaults"]["image"] = f"registry.example/default:{rng.randrange(100)}"
        raw = _text(doc)
        if action == "invalid":
            # Valid YAML, an invalid worker: the one entry parsed again fails validation.
            raw = raw.replace(b"replicas: ", b"replicas: -", 1)
        if action == "bad":
            raw = raw.replace(b"replicas: ", b"replicas: [", 1)
        try:
            expected = load_fleet(parse_yaml(raw), "fleet.yaml")
        except (SpecError, YamlRejected):
            expected = None
        if expected is None:
            with pytest.raises(SpecError) as refused:
                reader.load(raw)
            if action == "invalid":
                with pytest.raises(SpecError) as whole:
                    load_fleet(parse_yaml(raw), "fleet.yaml")
                assert refused.value.lines() == whole.value.lines()
            continue
        got = reader.load(raw)
        loaded += 1
        assert got == expected
        assert got.resolved_workers() == expected.resolved_workers()
        assert reader.document is not None
        whole_parses += reader.document.parsed == len(reader.document.text)
    assert loaded > 75, "most versions are valid fleets, compared with a whole load"
    assert whole_parses < 75, "most single-worker edits parse that worker alone"


def test_a_reader_validates_only_the_worker_entries_it_parsed_again() -> None:
    doc = _fleet(30)
    reader = FleetReader("fleet.yaml")
    first = reader.load(_text(doc))
    doc["workers"][7]["image"] = "registry.example/worker:2.0.0"
    raw = _text(doc)

    second = reader.load(raw)

    assert reader.document is not None
    assert reader.document.parsed < len(reader.document.text), "one entry parsed again"
    kept = [i for i in range(30) if second.workers[i] is first.workers[i]]
    assert kept == [i for i in range(30) if i != 7], "unchanged entries keep their workers"
    assert second.workers[7].image == "registry.example/worker:2.0.0"
    assert second == load_fleet(parse_yaml(raw), "fleet.yaml")
    assert second.resolved_workers() == load_fleet(parse_yaml(raw), "fleet.yaml").resolved_workers()


def test_an_invalid_edit_then_its_fix_reads_as_whole_loads_do() -> None:
    doc = _fleet(12)
    reader = FleetReader("fleet.yaml")
    reader.load(_text(doc))
    doc["workers"][3]["replicas"] = -2
    bad = _text(doc)

    with pytest.raises(SpecError) as refused:
        reader.load(bad)
    with pytest.raises(SpecError) as whole:
        load_fleet(parse_yaml(bad), "fleet.yaml")
    assert refused.value.lines() == whole.value.lines()
    assert any("workers[3]" in line or "workers.3" in line for line in refused.value.lines())

    doc["workers"][3]["replicas"] = 3
    fixed = _text(doc)
    assert reader.load(fixed) == load_fleet(parse_yaml(fixed), "fleet.yaml")
