"""A fleet file that is not UTF-8 text reads as unsharded, so the unsharded verbs refuse it
with the loader's own message (exit 1) instead of a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from twc.cli.shards import is_sharded

pytestmark = pytest.mark.unit


def test_a_file_of_invalid_utf8_is_not_sharded(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_bytes(b"sharding: {by: namespace}\nname: \xff\xfe\n")

    assert is_sharded("s", str(path)) is False


def test_a_file_asking_for_shards_is_sharded(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text("sharding: {by: namespace, maxWorkersPerShard: 250}\n")

    assert is_sharded("s", str(path)) is True
