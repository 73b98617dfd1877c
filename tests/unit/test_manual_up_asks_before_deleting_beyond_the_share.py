"""``twc up`` asks before deleting more than the deletion guard's share of the running
workers (``--yes`` skips the question; nobody to ask means no), and ``twc preview``
names those deletions in every format."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit._daemon_fakes import NS, fleet_data
from tests.unit._preview import events
from twc.commands import common, stack_lease
from twc.commands import preview as preview_cmd
from twc.commands import up as up_cmd
from twc.stackrun import engine

RUNNING = {f"{NS}/w{i}": 1 for i in range(4)}


@pytest.fixture
def file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fleet file (the file alone) keeping one of the four running workers."""
    doc = fleet_data(workers=[{"name": "w0", "namespace": NS, "taskQueueName": "q0"}])
    doc["clusterObjects"] = False
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(common, "_running_workers", lambda ref: dict(RUNNING))
    # No daemon manages the stack (its outputs name no Lease): the up runs on its own.
    monkeypatch.setattr(stack_lease, "daemon_lease", lambda ref: None)
    return str(path)


class Engine:
    def __init__(self) -> None:
        self.ups: list[engine.StackRef] = []

    def up(self, ref: engine.StackRef, **_: Any) -> Any:
        self.ups.append(ref)

        class Result:
            def __init__(self) -> None:
                self.outputs: dict[str, Any] = {}

        return Result()


@pytest.mark.parametrize(
    ("yes", "answer", "applied"),
    [(False, None, False), (False, "n", False), (False, "y", True), (True, None, True)],
)
def test_up_deletes_beyond_the_share_only_when_told_yes(
    file: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    yes: bool,
    answer: str | None,
    applied: bool,
) -> None:
    fake = Engine()
    monkeypatch.setattr(engine, "up", fake.up)
    ask = (lambda prompt: answer) if answer is not None else None

    code = up_cmd.run_up("prod", file, out=io.StringIO(), yes=yes, ask=ask)

    assert code == (0 if applied else 1)
    assert len(fake.ups) == (1 if applied else 0)
    err = capsys.readouterr().err
    if not yes:
        assert "deletes 3 of the 4 running workers" in err
        assert f"{NS}/w1, {NS}/w2, {NS}/w3" in err
    if not applied:
        assert "nothing was applied" in err


def test_up_within_the_share_does_not_ask(file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "_running_workers", lambda ref: {f"{NS}/w0": 1, f"{NS}/w1": 1})
    fake = Engine()
    monkeypatch.setattr(engine, "up", fake.up)

    def never(prompt: str) -> str:
        raise AssertionError("asked")

    assert up_cmd.run_up("prod", file, out=io.StringIO(), ask=never) == 0
    assert len(fake.ups) == 1


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_preview_names_the_deletions_beyond_the_share(
    file: str, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    def replay(ref: engine.StackRef, *, on_event: Any, **_: Any) -> None:
        for event in events("image_change"):
            on_event(event)

    monkeypatch.setattr(engine, "preview", replay)
    out = io.StringIO()
    code = preview_cmd.run_preview(
        "prod", fmt=fmt, detailed=True, fleet_file=file, out=out, err=io.StringIO()
    )

    assert code == 2
    text = out.getvalue()
    if fmt == "json":
        held = json.loads(text)["heldDeletions"]
        assert held == {"workers": [f"{NS}/w1", f"{NS}/w2", f"{NS}/w3"], "running": 4, "allowed": 1}
    else:
        assert "Held deletions" in text
        assert f"{NS}/w1, {NS}/w2, {NS}/w3" in text
        assert "twc approve --stack prod" in text
