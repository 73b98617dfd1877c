"""The engine's file backend writes no metadata sidecars, and a sidecar an interrupted CLI
left unreadable is removed before a select; readable ones and other stacks' stay."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from twc.engine import engine, workspace

pytestmark = pytest.mark.unit

VALID = json.dumps({"user.content_type": "application/octet-stream", "md5": "AAAA"})


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("file:///state", "file:///state?metadata=skip"),
        ("file:///state?no_tmp_dir=true", "file:///state?no_tmp_dir=true&metadata=skip"),
        ("file:///state?metadata=", "file:///state?metadata="),  # the owner chose sidecars
        ("postgres://twc@127.0.0.1:5432/pulumi", "postgres://twc@127.0.0.1:5432/pulumi"),
    ],
)
def test_a_file_backend_is_handed_to_the_engine_without_sidecars(given: str, expected: str) -> None:
    assert workspace.atomic_url(given) == expected
    assert engine.engine_env({"PULUMI_BACKEND_URL": given})["PULUMI_BACKEND_URL"] == expected


def test_the_engine_env_takes_the_process_backend_when_the_stack_names_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PULUMI_BACKEND_URL", "file:///from-shell")
    assert engine.engine_env({})["PULUMI_BACKEND_URL"] == "file:///from-shell?metadata=skip"


def test_the_root_of_a_skipping_url_is_the_directory(tmp_path: Path) -> None:
    assert workspace.backend_root(f"file://{tmp_path}?metadata=skip") == tmp_path
    assert workspace.backend_root("postgres://x/y") is None


def _backend(tmp_path: Path) -> dict[str, Path]:
    pulumi = tmp_path / ".pulumi"
    files = {
        "meta": pulumi / "meta.yaml.attrs",
        "state": pulumi / "stacks" / "twc" / "s1.json.attrs",
        "gzip": pulumi / "stacks" / "twc" / "s1.json.gz.attrs",
        "backup": pulumi / "stacks" / "twc" / "s1.json.bak.attrs",
        "lock": pulumi / "locks" / "organization" / "twc" / "s1" / "7f.json.attrs",
        "other stack": pulumi / "stacks" / "twc" / "s10.json.attrs",
        "other lock": pulumi / "locks" / "organization" / "twc" / "s10" / "8a.json.attrs",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(VALID)
    return files


@pytest.mark.parametrize("torn", ["", '{"user.content_type": "appl', "[]"])
def test_unreadable_sidecars_of_the_stack_are_removed_and_the_rest_kept(
    tmp_path: Path, torn: str, caplog: pytest.LogCaptureFixture
) -> None:
    files = _backend(tmp_path)
    for name in ("meta", "state", "gzip", "backup", "lock", "other stack", "other lock"):
        files[name].write_text(torn)
    kept = files["state"].with_name("s1.json")
    kept.write_text("{}")  # the state itself is never touched

    with caplog.at_level(logging.WARNING):
        removed = workspace.repair_sidecars(f"file://{tmp_path}", project="twc", stack="s1")

    mine = {files[n] for n in ("meta", "state", "gzip", "backup", "lock")}
    assert set(removed) == mine
    assert not any(path.exists() for path in mine)
    assert files["other stack"].read_text() == torn  # another stack's: its own select
    assert files["other lock"].read_text() == torn
    assert kept.read_text() == "{}"
    assert caplog.text.count("removed the unreadable state metadata file") == len(mine)


def test_readable_sidecars_are_kept(tmp_path: Path) -> None:
    files = _backend(tmp_path)
    assert workspace.repair_sidecars(f"file://{tmp_path}", project="twc", stack="s1") == []
    assert all(path.read_text() == VALID for path in files.values())


def test_other_backends_and_a_missing_directory_are_left_alone(tmp_path: Path) -> None:
    assert workspace.repair_sidecars("postgres://x/y", project="twc", stack="s1") == []
    missing = f"file://{tmp_path / 'none'}"
    assert workspace.repair_sidecars(missing, project="twc", stack="s1") == []


def test_the_legacy_layout_without_a_project_directory_is_repaired(tmp_path: Path) -> None:
    legacy = tmp_path / ".pulumi" / "stacks" / "s1.json.attrs"
    legacy.parent.mkdir(parents=True)
    legacy.write_text("")
    assert workspace.repair_sidecars(f"file://{tmp_path}", project="twc", stack="s1") == [legacy]
