"""``twc validate`` and ``twc schema``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.fleet_data import valid_fleet
from twc.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_validate_accepts_a_valid_file_with_a_one_line_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, valid_fleet())

    code = main(["validate", str(path)])

    out, err = capsys.readouterr()
    assert code == 0
    assert out == f"{path}: valid: 2 connections, 2 queues, 3 workers (1 derived)\n"
    assert err == ""


def test_validate_rejects_an_invalid_file_one_error_per_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = valid_fleet()
    data["workers"][0]["name"] = "Bad"
    data["workers"][1]["connectionRef"] = {
        "objectRef": {"apiGroup": "example.com", "kind": "ClusterConnection", "name": "prod"}
    }
    path = _write(tmp_path, data)

    code = main(["validate", str(path)])

    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err.splitlines() == [
        f"{path}: workers[0].name: 'Bad' must be a DNS-1123 label: at most 63 lower-case "
        "alphanumeric characters or '-', starting and ending with an alphanumeric character",
        f"{path}: workers[1].connectionRef.objectRef: apiGroup must be temporal.io, "
        "got 'example.com'",
    ]


def test_validate_reports_unknown_connection_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = valid_fleet()
    data["workers"][1]["connectionRef"] = {
        "objectRef": {"apiGroup": "temporal.io", "kind": "VaultConnection", "name": "prod"}
    }
    path = _write(tmp_path, data)

    code = main(["validate", str(path)])

    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(
        f"{path}: workers[1].connectionRef.objectRef: UnknownConnectionKind: no connection "
        "provider for VaultConnection.temporal.io"
    )


def test_validate_rejects_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["validate", str(tmp_path / "nope.yaml")])

    assert code == 1
    assert "cannot read file" in capsys.readouterr().err


def _properties(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for model, definition in schema.get("$defs", {}).items():
        for name, prop in definition.get("properties", {}).items():
            out.append((model, name, prop))
    for name, prop in schema.get("properties", {}).items():
        out.append(("Fleet", name, prop))
    return out


def test_schema_prints_a_json_schema_with_camel_case_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema"]) == 0

    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "twc Fleet"
    assert schema["additionalProperties"] is False
    assert {"clusterConnections", "connections", "queues", "workers", "defaults"} <= set(
        schema["properties"]
    )
    assert "mutualTLSSecretRef" in schema["$defs"]["ClusterConnection"]["properties"]
    assert "hostPort" in schema["$defs"]["Connection"]["properties"]


def test_every_field_in_the_schema_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    main(["schema"])
    schema = json.loads(capsys.readouterr().out)

    undocumented = [f"{m}.{n}" for m, n, p in _properties(schema) if not p.get("description")]

    assert _properties(schema)
    assert undocumented == []


def test_python_dash_m_twc_validate_runs_as_a_process() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twc", "validate", "stacks/prod.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("stacks/prod.yaml: valid: ")


def test_validate_imports_neither_pulumi_nor_temporalio() -> None:
    probe = (
        "import sys\n"
        "from twc.cli import main\n"
        "code = main(['validate', 'stacks/prod.yaml'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pulumi', 'temporalio'))\n"
        "print(code, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert result.stdout.splitlines()[-1] == "0 []"
