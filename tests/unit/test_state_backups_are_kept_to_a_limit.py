"""The file backend's backups and history copies of a stack's state are pruned to the
newest few; the state settings become the CLI's switches."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from twc.desired import DesiredInputs
from twc.engine import engine as engine_module
from twc.engine.automation import AutomationEngine
from twc.engine.workspace import DEFAULT_KEEP_BACKUPS as KEEP_BACKUPS
from twc.engine.workspace import engine_env, prune_backups
from twc.reconcile.settings import DaemonSettings

STACK = "prod.s01"


def _layout(root: Path, stamps: Sequence[int]) -> tuple[Path, Path]:
    backups = root / ".pulumi" / "backups" / "twc" / STACK
    history = root / ".pulumi" / "history" / "twc" / STACK
    backups.mkdir(parents=True)
    history.mkdir(parents=True)
    for stamp in stamps:
        (backups / f"{STACK}.{stamp}.json").write_text("{}")
        (backups / f"{STACK}.{stamp}.json.attrs").write_text("{}")
        (history / f"{STACK}-{stamp}.checkpoint.json").write_text("{}")
        (history / f"{STACK}-{stamp}.history.json").write_text("{}")
    return backups, history


def test_only_the_newest_backups_and_history_copies_are_kept(tmp_path: Path) -> None:
    stamps = [1796120000000000000 + i for i in range(15)]
    backups, history = _layout(tmp_path, stamps)

    removed = prune_backups(f"file://{tmp_path}", project="twc", stack=STACK, keep=10)

    kept = sorted(int(p.name.split(".")[-2]) for p in backups.glob("*.json"))
    assert kept == stamps[-10:]
    assert len(list(backups.glob("*.attrs"))) == 10
    assert (
        sorted(int(p.name.split("-")[-1].split(".")[0]) for p in history.glob("*.checkpoint.json"))
        == stamps[-10:]
    )
    # The small update records `pulumi stack history` lists stay, all of them.
    assert len(list(history.glob("*.history.json"))) == 15
    assert removed == 5 * 2 + 5


def test_fewer_backups_than_the_limit_are_left_alone(tmp_path: Path) -> None:
    backups, _ = _layout(tmp_path, [1796120000000000001, 1796120000000000002])

    assert prune_backups(f"file://{tmp_path}", project="twc", stack=STACK, keep=10) == 0
    assert len(list(backups.iterdir())) == 4


def test_other_backends_are_not_touched(tmp_path: Path) -> None:
    backups, _ = _layout(tmp_path, list(range(1796120000000000000, 1796120000000000012)))

    assert prune_backups("postgres://twc@127.0.0.1/pulumi", project="twc", stack=STACK, keep=1) == 0
    assert len(list(backups.glob("*.json"))) == 12


def test_the_daemons_engine_prunes_after_each_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backups, _ = _layout(tmp_path, list(range(1796120000000000000, 1796120000000000012)))
    summary = SimpleNamespace(resource_changes={"update": 1}, start_time=None)
    ups: list[str] = []

    def fake_up(ref: engine_module.StackRef, **_: object) -> SimpleNamespace:
        ups.append(ref.name)
        return SimpleNamespace(summary=summary, outputs={})

    monkeypatch.setattr(engine_module, "up", fake_up)
    ref = engine_module.StackRef(name=STACK, env={"PULUMI_BACKEND_URL": f"file://{tmp_path}"})
    engine = AutomationEngine(ref, state_dir=tmp_path / "state")
    engine.keep_backups = 3

    report = engine.up(DesiredInputs(), None)

    assert report.changes == {"update": 1}
    assert ups == [STACK]
    assert len(list(backups.glob("*.json"))) == 3


def test_the_default_keeps_ten_and_checkpoints_every_step() -> None:
    state = DaemonSettings().state

    assert KEEP_BACKUPS == 10
    assert state.checkpoints == "every-step"
    assert engine_env(checkpoints=state.checkpoints) == {"PULUMI_SKIP_CHECKPOINTS": "false"}


def test_the_final_checkpoint_setting_is_the_clis_skip_checkpoints_switch() -> None:
    assert engine_env(checkpoints="final") == {"PULUMI_SKIP_CHECKPOINTS": "true"}
