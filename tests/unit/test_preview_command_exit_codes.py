"""``twc preview``: validation first, the report of the engine's events, exit codes 0/2/1.

The engine is replaced by a replay of recorded events (``golden/preview``), so these
run without tools; the end-to-end tests run the real engine.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.automation import CommandError
from pulumi.automation._cmd import CommandResult

from tests.unit._preview import events, golden_path
from twc import cli
from twc.cli import preview as preview_cmd
from twc.engine import engine

VALID_FLEET = {
    "apiVersion": "twc.temporal.io/v1",
    "kind": "Fleet",
    # The file alone: these replay recorded engine events, there is no cluster to read.
    "clusterObjects": False,
    "defaults": {"image": "registry.example/worker:1.4.2"},
    "clusterConnections": [{"name": "prod", "hostPort": "temporal.example:7233"}],
    "workers": [
        {
            "name": "worker-orders",
            "namespace": "temporal",
            "taskQueueName": "orders",
            "connectionRef": {
                "objectRef": {
                    "apiGroup": "temporal.io",
                    "kind": "ClusterConnection",
                    "name": "prod",
                }
            },
        }
    ],
}


@pytest.fixture
def fleet_file(tmp_path: Path) -> str:
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(VALID_FLEET))
    return str(path)


def _replay(scenario: str, calls: list[engine.StackRef]) -> Callable[..., None]:
    def fake_preview(ref: engine.StackRef, *, on_event: Callable[[Any], Any], **_: Any) -> None:
        calls.append(ref)
        for event in events(scenario):
            on_event(event)

    return fake_preview


def _run(fleet_file: str, fmt: str = "text", *, detailed: bool = True) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        "prod", fmt=fmt, detailed=detailed, fleet_file=fleet_file, out=out, err=err
    )
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("fmt", "ext"), [("text", "txt"), ("markdown", "md"), ("json", "json")])
def test_preview_prints_the_rendering_of_the_engine_events_and_exits_2_on_changes(
    monkeypatch: pytest.MonkeyPatch, fleet_file: str, fmt: str, ext: str
) -> None:
    calls: list[engine.StackRef] = []
    monkeypatch.setattr(engine, "preview", _replay("image_change", calls))
    code, out, err = _run(fleet_file, fmt)
    assert (code, err) == (2, "")
    assert out == golden_path("image_change", ext).read_text()
    assert [(c.name, dict(c.config or {})) for c in calls] == [("prod", {"fleetFile": fleet_file})]


def test_preview_with_changes_exits_0_without_detailed_exitcode(
    monkeypatch: pytest.MonkeyPatch, fleet_file: str
) -> None:
    monkeypatch.setattr(engine, "preview", _replay("image_change", []))
    code, out, _ = _run(fleet_file, detailed=False)
    assert code == 0
    assert "image tag 1.4.2 → 1.5.0" in out


def test_preview_without_changes_exits_0_with_detailed_exitcode(
    monkeypatch: pytest.MonkeyPatch, fleet_file: str
) -> None:
    monkeypatch.setattr(engine, "preview", _replay("real_no_changes", []))
    code, out, _ = _run(fleet_file, "json")
    assert code == 0
    assert json.loads(out)["summary"]["hasChanges"] is False


def test_an_invalid_fleet_exits_1_with_its_errors_and_never_starts_the_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[engine.StackRef] = []
    monkeypatch.setattr(engine, "preview", _replay("image_change", calls))
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**VALID_FLEET, "workers": [{"name": "Not_A_Name"}]}))
    code, out, err = _run(str(bad))
    assert (code, out, calls) == (1, "", [])
    assert f"{bad}: workers[0].name" in err


def test_an_engine_failure_still_renders_a_report_with_the_error_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, fleet_file: str
) -> None:
    def failing(ref: engine.StackRef, **_: Any) -> None:
        raise CommandError(CommandResult("", "error: the stack is locked by another update", 255))

    monkeypatch.setattr(engine, "preview", failing)
    code, out, _ = _run(fleet_file, "markdown")
    assert code == 1
    assert "**The preview failed** with 1 error." in out
    assert "the stack is locked by another update" in out
    code, out, _ = _run(fleet_file, "json")
    assert code == 1
    assert json.loads(out)["errors"] == [
        {
            "severity": "error",
            "message": "error: the stack is locked by another update",
            "urn": None,
        }
    ]


def test_an_engine_failure_with_its_own_error_diagnostics_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, fleet_file: str
) -> None:
    # replace_and_error records the program's error as a diagnostic; the exception
    # that follows repeats it and must not be listed a second time.
    def replay_then_fail(ref: engine.StackRef, *, on_event: Callable[[Any], Any]) -> None:
        for event in events("replace_and_error"):
            on_event(event)
        raise CommandError(CommandResult("", "error: preview failed", 1))

    monkeypatch.setattr(engine, "preview", replay_then_fail)
    code, out, _ = _run(fleet_file, "json")
    assert code == 1
    messages = [e["message"] for e in json.loads(out)["errors"]]
    assert messages
    assert "error: preview failed" not in messages


def test_the_command_line_runs_preview_with_format_and_detailed_exitcode(
    monkeypatch: pytest.MonkeyPatch, fleet_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine, "preview", _replay("connection_hostport", []))
    argv = ["preview", "--stack", "prod", "--fleet-file", fleet_file]
    code = cli.main([*argv, "--format", "json", "--detailed-exitcode"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2
    assert doc["summary"]["restartingWorkers"] == [
        "temporal/worker-billing",
        "temporal/worker-orders",
    ]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("Preview of twc/prod\n")


def test_the_command_line_refuses_an_unknown_format() -> None:
    with pytest.raises(SystemExit) as exc:
        cli.build_parser().parse_args(["preview", "--stack", "prod", "--format", "yaml"])
    assert exc.value.code == 2
