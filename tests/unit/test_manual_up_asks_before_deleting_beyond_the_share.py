"""``twc up`` asks before deleting more than the fleet's deletion share of the running
workers (``--yes`` or an approval on the stack's record skips the question, and the
approval is spent; nobody to ask means no, with the held set put on the record for
``twc approve``); a guard that cannot read what runs holds; ``twc preview`` names those
deletions in every format."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit._daemon_fakes import NS, fleet_data
from tests.unit._fake_configmaps import FakeConfigMaps
from tests.unit._preview import events
from twc import program
from twc.cli import common, stack_lease
from twc.cli import preview as preview_cmd
from twc.cli import up as up_cmd
from twc.engine import engine
from twc.kube.record import RecordStore

RUNNING = {f"{NS}/w{i}": 1 for i in range(4)}


@pytest.fixture
def record(monkeypatch: pytest.MonkeyPatch) -> RecordStore:
    """The stack's record, on a fake cluster whose stack runs :data:`RUNNING`."""
    store = RecordStore(FakeConfigMaps(), namespace="twc", stack="prod")
    monkeypatch.setattr(common, "stack_kube", lambda ref: contextlib.nullcontext())
    monkeypatch.setattr(common, "stack_record", lambda ref, kube: store)
    monkeypatch.setattr(program, "running_workers", lambda kube, stack, config: set(RUNNING))
    return store


@pytest.fixture
def file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: RecordStore) -> str:
    """A fleet file (the file alone) keeping one of the four running workers."""
    doc = fleet_data(workers=[{"name": "w0", "namespace": NS, "taskQueueName": "q0"}])
    doc["clusterObjects"] = False
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(doc))
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
        assert "twc up --stack prod --yes" in err
        assert "twc approve --stack prod" in err


def test_an_approval_lets_one_up_through_and_is_spent(
    file: str, record: RecordStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = Engine()
    monkeypatch.setattr(engine, "up", fake.up)
    assert up_cmd.run_up("prod", file, out=io.StringIO()) == 1
    held = record.load()
    assert held is not None
    assert held.held is not None
    assert held.held.workers == (f"{NS}/w1", f"{NS}/w2", f"{NS}/w3")

    record.approve(held.held.digest)
    assert up_cmd.run_up("prod", file, out=io.StringIO()) == 0
    assert len(fake.ups) == 1
    assert record.approved() is None

    # The same deletions again (the workers came back meanwhile): held again.
    assert up_cmd.run_up("prod", file, out=io.StringIO()) == 1
    assert len(fake.ups) == 1


def test_up_that_cannot_read_what_runs_applies_nothing(
    file: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def forbidden(kube: Any, stack: str, config: Any) -> set[str]:
        raise PermissionError("deployments is forbidden")

    monkeypatch.setattr(program, "running_workers", forbidden)
    fake = Engine()
    monkeypatch.setattr(engine, "up", fake.up)

    assert up_cmd.run_up("prod", file, out=io.StringIO(), yes=True) == 1
    assert fake.ups == []
    err = capsys.readouterr().err
    assert "deployments is forbidden" in err
    assert "nothing was applied" in err


def test_up_uses_the_share_the_fleet_sets(file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = yaml.safe_load(Path(file).read_text())
    doc["deletionGuard"] = {"maxShare": 0.75}
    Path(file).write_text(yaml.safe_dump(doc))
    fake = Engine()
    monkeypatch.setattr(engine, "up", fake.up)

    def never(prompt: str) -> str:
        raise AssertionError("asked")

    assert up_cmd.run_up("prod", file, out=io.StringIO(), ask=never) == 0
    assert len(fake.ups) == 1


def test_up_within_the_share_does_not_ask(file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        program, "running_workers", lambda kube, stack, config: {f"{NS}/w0", f"{NS}/w1"}
    )
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
