"""`twc local up --state postgres`: Debian's PostgreSQL 15 runs as one more real part of
the embedded environment and holds the Pulumi state; its password lives only in 0600
files, never in the backend URL or the printed variables."""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc
from twc.local.environment import DATABASE, USER, LocalEnvironment, Postgres, postgres_tool

pytestmark = pytest.mark.e2e


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_state_lives_in_postgres_and_the_password_only_in_private_files(
    local_env: LocalEnvironment, postgres_env: dict[str, str], namespace: str, tmp_path: Path
) -> None:
    pg = Postgres(local_env.dir)
    password = pg.password_file.read_text().strip()
    url = postgres_env["PULUMI_BACKEND_URL"]
    assert url.startswith(f"postgres://{USER}@127.0.0.1:")
    assert password not in url
    assert all(password not in value for value in postgres_env.values())
    assert _mode(pg.password_file) == 0o600
    assert _mode(Path(postgres_env["PGPASSFILE"])) == 0o600
    # The file backend stays the environment's choice for everything else.
    assert LocalEnvironment(local_env.dir).env()["PULUMI_BACKEND_URL"].startswith("file://")

    name = f"e2e-pg-{uuid.uuid4().hex[:6]}"
    fs = FleetStack(name, tmp_path / f"{name}.yaml", dict(postgres_env))
    fs.write(
        fleet_doc(
            namespace,
            host_port=local_env.temporal_address(),
            workers=[{"name": "pg", "namespace": namespace, "taskQueueName": f"tq-{name}"}],
        )
    )
    try:
        assert fs.up().summary.result == "succeeded"
        assert f"{namespace}/pg" in str(fs.stack().outputs()["workers"].value)

        port = url.split("@127.0.0.1:", 1)[1].split("/", 1)[0]
        rows = subprocess.run(
            [
                postgres_tool("psql"),
                f"postgres://{USER}@127.0.0.1:{port}/{DATABASE}?sslmode=disable",
                "-Atc",
                f"select count(*) from pulumi_state where key like '%{name}%'",  # noqa: S608 - the test's own stack name
            ],
            env={**os.environ, "PGPASSFILE": postgres_env["PGPASSFILE"]},
            capture_output=True,
            text=True,
            check=True,
        )
        assert int(rows.stdout.strip()) >= 1  # the stack's state, locks and history rows

        refused = subprocess.run(
            [postgres_tool("psql"), url, "-Atc", "select 1"],
            env={k: v for k, v in os.environ.items() if k != "PGPASSFILE"}
            | {"PGPASSFILE": "/dev/null"},
            capture_output=True,
            text=True,
            check=False,
        )
        assert refused.returncode != 0  # no password, no access
    finally:
        fs.destroy()
        fs.stack().workspace.remove_stack(name, force=True)


def test_a_restart_of_the_environment_keeps_the_postgres_state(
    local_env: LocalEnvironment, postgres_env: dict[str, str]
) -> None:
    env = LocalEnvironment(local_env.dir, state="postgres", record_backend=False)
    before = env.status()
    assert any(s.name == "postgres" and s.running for s in before)

    env.up(progress=lambda m: None)  # idempotent: nothing restarted

    after = {s.name: s.pid for s in env.status()}
    assert after["postgres"] == next(s.pid for s in before if s.name == "postgres")
