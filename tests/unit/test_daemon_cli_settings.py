"""``twc run`` builds its settings from a file, then the command-line flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from twc.cli import build_parser
from twc.cli.run import RunOptions, load_settings, run_daemon


def test_flags_override_the_settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    file = tmp_path / "settings.yaml"
    file.write_text(
        "reconcile_interval: 15\nmetrics_port: 9000\n"
        "autoscale: {scale_up: {policies: []}}\n"
        "leader_election: {lease_duration: 30, renew_deadline: 20, retry_period: 5}\n"
    )

    settings = load_settings(
        RunOptions(stack="s", settings_file=str(file), port=9100, leader_elect=True)
    )

    assert settings.reconcile_interval == 15
    assert settings.metrics_port == 9100
    assert settings.autoscale.scale_up.policies == ()
    assert settings.leader_election.enabled is True
    assert settings.leader_election.lease_duration == 30
    assert settings.leader_election.lease_namespace == "default"


def test_the_lease_defaults_to_the_pods_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "twc-system")

    assert load_settings(RunOptions(stack="s")).leader_election.lease_namespace == "twc-system"
    explicit = RunOptions(stack="s", lease_namespace="ops", lease_name="mine")
    election = load_settings(explicit).leader_election
    assert (election.lease_namespace, election.lease_name) == ("ops", "mine")


def test_invalid_settings_exit_1_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "settings.yaml"
    file.write_text("reconcile_interval: -1\n")

    assert run_daemon(RunOptions(stack="s", settings_file=str(file))) == 1
    assert "invalid settings" in capsys.readouterr().err


def test_the_run_verb_parses_every_flag() -> None:
    args = build_parser().parse_args(
        [
            "run",
            "--stack",
            "prod",
            "--fleet-file",
            "f.yaml",
            "--port",
            "0",
            "--interval",
            "5",
            "--settings",
            "s.yaml",
            "--leader-elect",
            "--lease-namespace",
            "ops",
            "--lease-name",
            "l",
            "--once",
        ]
    )

    assert (args.stack, args.fleet_file, args.port, args.interval, args.settings) == (
        "prod",
        "f.yaml",
        0,
        5.0,
        "s.yaml",
    )
    assert (args.leader_elect, args.lease_namespace, args.lease_name, args.once) == (
        True,
        "ops",
        "l",
        True,
    )
