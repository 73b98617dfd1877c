"""A daemon that stops removes the engines' inputs files from its private directory
(megabytes each at a thousand workers), unless an engine run is still ending; the guards'
journals, a few bytes per command, stay as the record of what ran."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import pytest

from twc.cli.run import Wiring
from twc.engine.supervisor import GuardChannel
from twc.reconcile.settings import DaemonSettings

pytestmark = pytest.mark.unit


def _wiring(state_dir: Path) -> tuple[Wiring, GuardChannel]:
    settings = DaemonSettings.model_validate({"engine": {"interrupt_grace": 0.1}})
    channel = GuardChannel(state_dir / "guard")
    (state_dir / "shard-0").mkdir(parents=True)
    (state_dir / "shard-0" / "inputs-s-s00.json").write_text("{}")
    (state_dir / "inputs-s.json").write_text("{}")
    (channel.directory / "journal" / "7.json").write_text("{}")
    wiring = Wiring("s", settings, cast(Any, None), cast(Any, None), "fleet.yaml")
    wiring.channels = [channel]
    wiring.state_dir = state_dir
    return wiring, channel


def test_the_inputs_files_are_removed_when_no_engine_is_left(tmp_path: Path) -> None:
    state_dir = tmp_path / "twc-daemon-x"
    wiring, channel = _wiring(state_dir)
    wiring.close()
    assert wiring.release_leases
    assert list(state_dir.rglob("inputs-*")) == []
    assert (channel.directory / "journal" / "7.json").exists()


def test_the_inputs_stay_while_an_engine_run_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wiring, channel = _wiring(tmp_path / "twc-daemon-x")
    (channel.directory / "guards" / str(os.getpid())).touch()  # a live guard
    wiring.close()
    assert not wiring.release_leases
    assert (tmp_path / "twc-daemon-x" / "inputs-s.json").exists()
    assert (tmp_path / "twc-daemon-x" / "shard-0" / "inputs-s-s00.json").exists()
    assert "it keeps its inputs in" in caplog.text
