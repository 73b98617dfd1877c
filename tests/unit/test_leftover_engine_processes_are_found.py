"""The suite's leftover check finds an engine process a test left running, by the mark
the test's environment gave it, and ignores the same process of anyone else."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RUN_MARK_ENV, engine_processes
from tests.helpers import assert_eventually

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


def test_a_plugin_left_running_is_found_by_its_tests_mark_only(tmp_path: Path) -> None:
    sleep = shutil.which("sleep")
    assert sleep is not None
    plugin = tmp_path / "pulumi-resource-kubernetes"
    plugin.symlink_to(sleep)
    mine = subprocess.Popen(
        [str(plugin), "60"], env={**os.environ, RUN_MARK_ENV: "s1/7/"}, start_new_session=True
    )
    theirs = subprocess.Popen(
        [str(plugin), "60"], env={**os.environ, RUN_MARK_ENV: "s2/7/"}, start_new_session=True
    )
    try:
        # Until a child has exec'd, /proc shows the forked interpreter and its
        # environment, not the plugin's (a busy machine made this test miss it).
        for proc in (mine, theirs):
            assert_eventually(
                functools.partial(_execed, proc.pid, plugin),
                timeout=10,
                interval=0.01,
                message="the plugin never started",
            )
        found = engine_processes("s1/")
    finally:
        for proc in (mine, theirs):
            proc.kill()
            proc.wait()

    assert [(pid, mark) for pid, mark, _ in found] == [(mine.pid, "s1/7/")]
    assert engine_processes("s1/") == []  # gone once killed


def _execed(pid: int, program: Path) -> bool:
    return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(str(program).encode())
