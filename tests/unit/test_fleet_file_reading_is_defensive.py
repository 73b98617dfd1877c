"""Fleet files are read safely: hostile or ambiguous YAML is refused with a clear reason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tests.unit.fleet_data import valid_fleet
from twc.errors import SpecError
from twc.spec import _yaml, load_fleet_file
from twc.spec._yaml import MAX_BYTES


def _write(tmp_path: Path, content: bytes | str) -> Path:
    path = tmp_path / "fleet.yaml"
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def _reject(path: Path) -> str:
    with pytest.raises(SpecError) as caught:
        load_fleet_file(path)
    (line,) = caught.value.lines()
    assert line.startswith(f"{path}: ")
    return line


def test_a_valid_file_loads(tmp_path: Path) -> None:
    path = _write(tmp_path, yaml.safe_dump(valid_fleet()))

    assert len(load_fleet_file(path).resolved_workers()) == 3


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, "\ufeff" + yaml.safe_dump(valid_fleet()))

    assert load_fleet_file(str(path)).kind == "Fleet"


def test_anchors_are_refused(tmp_path: Path) -> None:
    text = "apiVersion: twc.temporal.io/v1\nkind: Fleet\ndefaults: &d {replicas: 1}\n"

    assert "YAML anchors are not allowed (line 3" in _reject(_write(tmp_path, text))


def test_aliases_are_refused(tmp_path: Path) -> None:
    text = "a: 1\nb: *a\n"

    assert "YAML aliases are not allowed (line 2" in _reject(_write(tmp_path, text))


def test_merge_keys_are_refused(tmp_path: Path) -> None:
    text = "apiVersion: twc.temporal.io/v1\nkind: Fleet\ndefaults:\n  <<: {replicas: 1}\n"

    assert "merge keys (<<) are not allowed" in _reject(_write(tmp_path, text))


def test_a_billion_laughs_document_is_refused_quickly(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    path = _write(tmp_path, "\n".join(lines) + "\n")

    started = time.monotonic()
    reason = _reject(path)

    assert "YAML anchors are not allowed" in reason
    assert time.monotonic() - started < 2


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: " + "[" * 200 + "]" * 200 + "\n")

    assert "nesting deeper than 64 levels" in _reject(path)


def test_huge_documents_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "# " + "x" * MAX_BYTES + "\n")

    assert f"file is larger than {MAX_BYTES // 1024} KiB" in _reject(path)


def test_documents_with_too_many_nodes_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real limit (a million nodes) takes seconds to reach; the count is the same.
    monkeypatch.setattr(_yaml, "MAX_NODES", 1000)
    path = _write(tmp_path, "a: [" + ",".join(["1"] * 1001) + "]\n")

    assert "more than 1000 nodes" in _reject(path)


def test_non_utf8_bytes_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, b"apiVersion: twc.temporal.io/v1\nkind: \xff\xfe\n")

    assert "not valid UTF-8 (byte 37)" in _reject(path)


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    text = "apiVersion: twc.temporal.io/v1\nkind: Fleet\nkind: Fleet\n"

    assert "duplicate key 'kind' (line 3, column 1)" in _reject(_write(tmp_path, text))


def test_several_documents_are_refused(tmp_path: Path) -> None:
    text = "apiVersion: twc.temporal.io/v1\nkind: Fleet\n---\nkind: Fleet\n"

    assert "invalid YAML" in _reject(_write(tmp_path, text))


def test_python_tags_are_refused(tmp_path: Path) -> None:
    text = "apiVersion: !!python/object/apply:os.system ['true']\n"

    assert "invalid YAML" in _reject(_write(tmp_path, text))


def test_unhashable_keys_are_refused(tmp_path: Path) -> None:
    text = "? [a, b]\n: 1\n"

    assert "mapping keys must be scalars" in _reject(_write(tmp_path, text))


def test_syntax_errors_name_the_position(tmp_path: Path) -> None:
    text = "apiVersion: twc.temporal.io/v1\nkind: [Fleet\n"

    assert "invalid YAML" in (reason := _reject(_write(tmp_path, text)))
    assert "line " in reason


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    assert "the document is empty; expected a Fleet" in _reject(_write(tmp_path, ""))


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    assert "cannot read file: No such file or directory" in _reject(tmp_path / "absent.yaml")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert "cannot read file: Is a directory" in _reject(tmp_path)


def test_control_characters_are_refused(tmp_path: Path) -> None:
    # Found by the property test: PyYAML checks characters in its constructor.
    assert "special characters are not allowed" in _reject(_write(tmp_path, b"kind: \x00\n"))
