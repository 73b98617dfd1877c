"""The test bed's PostgreSQL is ready only when the server of its own data directory says
it is ready on its port: a server of another environment that took the port (two
environments drew the same free port) is never taken for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from twc.local.environment import Postgres

pytestmark = pytest.mark.unit


def _pid_file(pg: Postgres, port: int, status: str) -> None:
    pg.data.mkdir(parents=True, exist_ok=True)
    lines = ["4242", str(pg.data), "1764700000", str(port), "", "127.0.0.1", "0 1", status]
    (pg.data / "postmaster.pid").write_text("\n".join(lines) + "\n")


def test_no_server_of_its_own_is_not_ready(tmp_path: Path) -> None:
    assert not Postgres(tmp_path).ready(5432)


@pytest.mark.parametrize(("port", "status"), [(5433, "ready"), (5432, "starting")])
def test_its_server_on_another_port_or_still_starting_is_not_ready(
    tmp_path: Path, port: int, status: str
) -> None:
    pg = Postgres(tmp_path)
    _pid_file(pg, port, status)
    assert not pg.ready(5432)
