"""PostgreSQL 15 as the embedded environment's Pulumi state backend (``--state postgres``):
loopback only, its random password in 0600 files (``PGPASSFILE``), never in a URL or log;
under root in a user namespace of its own."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")  # Debian's postgresql-15
USER = "twc"
DATABASE = "pulumi"


def postgres_tool(name: str) -> str:
    """A PostgreSQL 15 binary; FileNotFoundError when it is not installed."""
    candidate = PG_BIN / name
    if not candidate.exists():
        raise FileNotFoundError(f"{candidate} not found: `tools/setup.sh postgres` installs it")
    return str(candidate)


def _unprivileged(argv: list[str]) -> list[str]:
    # PostgreSQL will not run as root; in a user namespace its files stay ours.
    if os.geteuid() == 0:
        return [shutil.which("unshare") or "/usr/bin/unshare", "-U", *argv]
    return argv


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


class Postgres:
    """The PostgreSQL part of one embedded environment, under ``env_dir / "postgres"``."""

    def __init__(self, env_dir: Path) -> None:
        self.dir = env_dir / "postgres"
        self.data = self.dir / "data"
        self.password_file = self.dir / "password"
        self.passfile = self.dir / "pgpass"

    def env(self, port: int) -> dict[str, str]:
        """The Pulumi backend URL (no password in it) and where the password is."""
        write_private(self.passfile, f"127.0.0.1:{port}:{DATABASE}:{USER}:{self._password()}\n")
        url = f"postgres://{USER}@127.0.0.1:{port}/{DATABASE}?sslmode=disable"
        return {"PULUMI_BACKEND_URL": url, "PGPASSFILE": str(self.passfile)}

    def _password(self) -> str:
        if not self.password_file.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            write_private(self.password_file, secrets.token_urlsafe(24))
        return self.password_file.read_text().strip()

    def _run(self, argv: list[str], stdin: str | None = None) -> None:
        done = subprocess.run(_unprivileged(argv), input=stdin, capture_output=True, text=True)
        if done.returncode != 0 or "ERROR" in done.stdout + done.stderr:
            raise RuntimeError(f"{Path(argv[0]).name} failed:\n{done.stdout}{done.stderr}")

    def initialize(self) -> bool:
        """Make the data directory and the database once; whether it did now."""
        if (self.data / "PG_VERSION").exists():
            return False
        self._password()
        initdb = [postgres_tool("initdb"), "-D", str(self.data), "-U", USER, "-E", "UTF8"]
        auth = (f"--pwfile={self.password_file}", "--auth=scram-sha-256", "--no-instructions")
        self._run([*initdb, *auth])
        create = f"CREATE DATABASE {DATABASE} OWNER {USER};\n"
        self._run([postgres_tool("postgres"), "--single", "-D", str(self.data), "postgres"], create)
        return True

    def argv(self, port: int) -> list[str]:
        """The server on ``127.0.0.1:port``, no Unix socket, no durability (a test store)."""
        settings = ("logging_collector", "fsync", "synchronous_commit", "full_page_writes")
        off = [arg for name in settings for arg in ("-c", f"{name}=off")]
        server = [postgres_tool("postgres"), "-D", str(self.data), "-h", "127.0.0.1"]
        return _unprivileged([*server, "-p", str(port), "-k", "", *off])

    def ready(self, port: int) -> bool:
        """Whether this data directory's server is ready on ``port`` (``postmaster.pid``)."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        # Line 4 is the port, line 8 the status ("starting", "ready", ...).
        if len(lines) < 8 or lines[3].strip() != str(port) or lines[7].strip() != "ready":
            return False
        argv = [postgres_tool("pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-d", DATABASE]
        return subprocess.run(argv, capture_output=True).returncode == 0
