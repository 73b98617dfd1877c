"""A `stack select` interrupted while it rewrote the CLI's workspace settings file (a killed
daemon's engine) does not stop later selects; selects side by side do not break it either."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from twc.engine import engine, workspace

pytestmark = pytest.mark.e2e


def _ref(tmp_path: Path, name: str) -> engine.StackRef:
    (tmp_path / "state").mkdir(exist_ok=True)
    return engine.StackRef(
        name=name,
        env={
            "PULUMI_HOME": str(tmp_path / "home"),
            "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": "twc-test",
        },
    )


def test_a_truncated_settings_file_is_repaired_and_the_stack_selected(
    tmp_path: Path, real_tool: Callable[[str], str]
) -> None:
    real_tool("pulumi")
    ref = _ref(tmp_path, "a")
    engine.select_stack(ref)
    path = workspace.settings_file(ref.work_dir, ref.env)
    assert path.exists(), "the CLI wrote its settings somewhere else"
    path.write_text("")  # what a select killed between truncating and writing leaves

    stack = engine.select_stack(ref)

    assert stack.name == "a"
    assert isinstance(json.loads(path.read_text()), dict)


def test_selects_side_by_side_all_succeed(tmp_path: Path, real_tool: Callable[[str], str]) -> None:
    real_tool("pulumi")
    refs = [_ref(tmp_path, f"s{i}") for i in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        names = list(pool.map(lambda ref: engine.select_stack(ref).name, refs * 2))
    assert names == [ref.name for ref in refs * 2]
    path = workspace.settings_file(refs[0].work_dir, refs[0].env)
    assert isinstance(json.loads(path.read_text()), dict)
