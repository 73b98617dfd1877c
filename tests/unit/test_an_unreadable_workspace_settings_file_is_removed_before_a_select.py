"""An unreadable Pulumi workspace settings file is removed before a select; a readable one stays."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from twc.engine import workspace

pytestmark = pytest.mark.unit


def _project(tmp_path: Path) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: demo\nruntime: python\n")
    return tmp_path


def test_the_settings_file_is_named_as_the_cli_names_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = workspace.settings_file(_project(tmp_path), {"PULUMI_HOME": str(home)})
    assert path.parent == home / "workspaces"
    assert path.name.startswith("demo-")
    assert path.name.endswith("-workspace.json")
    assert len(path.name.removeprefix("demo-").removesuffix("-workspace.json")) == 40


@pytest.mark.parametrize("content", ["", '{\n    "stacks": {\n        "file:///x', "[]"])
def test_an_empty_or_half_written_file_is_removed_and_logged(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"PULUMI_HOME": str(tmp_path / "home")}
    path = workspace.settings_file(_project(tmp_path), env)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with caplog.at_level(logging.WARNING), workspace.selecting(tmp_path, env) as selected:
        assert selected == path
        assert not path.exists()
    assert "removed the unreadable Pulumi workspace settings file" in caplog.text


def test_a_readable_file_is_kept(tmp_path: Path) -> None:
    env = {"PULUMI_HOME": str(tmp_path / "home")}
    path = workspace.settings_file(_project(tmp_path), env)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"stacks": {"file:///s": "organization/demo/a"}}))
    assert workspace.repair_settings(path) is False
    assert json.loads(path.read_text())["stacks"] == {"file:///s": "organization/demo/a"}
