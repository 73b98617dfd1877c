"""PostgreSQL as the embedded environment's Pulumi state backend (``--state postgres``).

Debian's PostgreSQL 15 (``/usr/lib/postgresql/15/bin``; ``tools/setup.sh postgres``
installs it when missing) runs as one more real part of the environment:

* its own data directory, ``<env>/postgres/data``, made by ``initdb`` on first use, with
  a database ``pulumi`` for the state;
* loopback only (``127.0.0.1``, no Unix socket), password authentication
  (``scram-sha-256``) for the one role ``twc``;
* the password is random, kept in ``<env>/postgres/password`` (0600) and handed to the
  Pulumi CLI through a 0600 ``pgpass`` file (``PGPASSFILE``): it never appears in the
  backend URL, the environment's printed variables or a log.

The server refuses to run as root, so under root (a CI container) it runs in a user
namespace of its own (``unshare -U``): unprivileged inside, and its files stay the
invoking user's.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from twc.local.processes import ProcessRecord
from twc.local.processes import start as start_process

__all__ = ["DATABASE", "PG_BIN", "USER", "Postgres", "postgres_tool"]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
"""Where Debian's ``postgresql-15`` package installs the server."""
USER = "twc"
"""The one role, owner of the state database."""
DATABASE = "pulumi"
"""The database holding the Pulumi state (table ``pulumi_state``)."""


def postgres_tool(name: str) -> str:
    """A PostgreSQL 15 binary (``initdb``, ``postgres``, ``pg_isready``).

    Raises:
        FileNotFoundError: PostgreSQL 15 is not installed (``tools/setup.sh postgres`` installs it).
    """
    candidate = PG_BIN / name
    if candidate.exists():
        return str(candidate)
    raise FileNotFoundError(
        f"{candidate} not found: install Debian 12's postgresql-15 (`tools/setup.sh postgres` does)"
    )


def _unprivileged(argv: list[str]) -> list[str]:
    # PostgreSQL will not run as root; a user namespace makes it an ordinary user while
    # the files it writes stay ours.
    if os.geteuid() == 0:
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        return [unshare, "-U", *argv]
    return argv


class Postgres:
    """The PostgreSQL part of one embedded environment."""

    def __init__(self, env_dir: Path) -> None:
        """Keep everything under ``env_dir / "postgres"``."""
        self.dir = env_dir / "postgres"
        self.data = self.dir / "data"
        self.password_file = self.dir / "password"
        self.passfile = self.dir / "pgpass"
        self.log_file = env_dir / "logs" / "postgres.log"

    def url(self, port: int) -> str:
        """The Pulumi backend URL (no password in it)."""
        return f"postgres://{USER}@127.0.0.1:{port}/{DATABASE}?sslmode=disable"

    def env(self, port: int) -> dict[str, str]:
        """What the Pulumi CLI needs: the backend URL, and where the password is."""
        self._write_passfile(port)
        return {"PULUMI_BACKEND_URL": self.url(port), "PGPASSFILE": str(self.passfile)}

    def _private(self, path: Path, text: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(path, 0o600)

    def _password(self) -> str:
        if not self.password_file.exists():
            self.dir.mkdir(parents=True, exist_ok=True)
            self._private(self.password_file, secrets.token_urlsafe(24))
        return self.password_file.read_text().strip()

    def _write_passfile(self, port: int) -> None:
        line = f"127.0.0.1:{port}:{DATABASE}:{USER}:{self._password()}\n"
        if not self.passfile.exists() or self.passfile.read_text() != line:
            self._private(self.passfile, line)

    def initialize(self) -> bool:
        """Make the data directory and the state database once; whether it did now.

        Raises:
            FileNotFoundError: PostgreSQL 15 is not installed.
            RuntimeError: ``initdb`` or the database's creation failed (with the output).
        """
        if (self.data / "PG_VERSION").exists():
            return False
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._password()
        # initdb reads the password from a file; it is the password file itself (0600).
        init = subprocess.run(
            _unprivileged(
                [
                    postgres_tool("initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    USER,
                    f"--pwfile={self.password_file}",
                    "--auth=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ]
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{init.stdout}{init.stderr}")
        create = subprocess.run(
            _unprivileged(
                [postgres_tool("postgres"), "--single", "-D", str(self.data), "postgres"]
            ),
            input=f"CREATE DATABASE {DATABASE} OWNER {USER};\n",
            capture_output=True,
            text=True,
            check=False,
        )
        if create.returncode != 0 or "ERROR" in create.stdout + create.stderr:
            raise RuntimeError(f"creating the database failed:\n{create.stdout}{create.stderr}")
        return True

    def start(self, port: int) -> ProcessRecord:
        """Start the server on ``127.0.0.1:port`` (it must be initialized)."""
        argv = _unprivileged(
            [
                postgres_tool("postgres"),
                "-D",
                str(self.data),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-k",
                "",  # no Unix socket: loopback TCP only
                "-c",
                "logging_collector=off",
                # A throwaway test store: durability is not worth an fsync per commit.
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ]
        )
        return start_process("postgres", argv, self.log_file)

    def ready(self, port: int) -> bool:
        """Whether this environment's server accepts connections on ``port``.

        ``pg_isready`` alone answers for whatever listens there: when two environments
        on one host (tests side by side) drew the same free port, the one whose server
        could not bind took the other's for its own, and its clients then failed with
        "password authentication failed". So the server of this data directory must say,
        in its ``postmaster.pid``, that it is ready on that port.
        """
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        # Line 4 is the port, line 8 the status ("starting", "ready", ...).
        if len(lines) < 8 or lines[3].strip() != str(port) or lines[7].strip() != "ready":
            return False
        check = subprocess.run(
            [postgres_tool("pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-d", DATABASE],
            capture_output=True,
            check=False,
        )
        return check.returncode == 0
