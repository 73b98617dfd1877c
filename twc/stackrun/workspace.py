"""The Pulumi CLI's workspace settings file, made safe for several engines on one host.

``pulumi stack select`` rewrites the project's workspace settings file in place; two
selects at once, or one stopped half-way, leave it unreadable, and every later select
fails with "unable to read workspace settings". twc serialises its selects with a lock
file beside it and removes an unreadable settings file (saying so) before selecting;
no other command reads it, as twc names the stack to each.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path

import yaml

__all__ = [
    "UNREADABLE_SETTINGS",
    "project_name",
    "repair_settings",
    "selecting",
    "settings_file",
]

log = logging.getLogger(__name__)

UNREADABLE_SETTINGS = "unable to read workspace settings"
"""The CLI's error when the settings file does not parse."""


@lru_cache(maxsize=16)
def _project_name(project_file: Path) -> str:
    data = yaml.safe_load(project_file.read_text())
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{project_file} names no project")
    return name


def project_name(work_dir: Path) -> str:
    """The name of the Pulumi project in ``work_dir``."""
    return _project_name(Path(work_dir).resolve() / "Pulumi.yaml")


def settings_file(work_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where the CLI keeps the workspace settings of the project in ``work_dir``.

    ``PULUMI_HOME`` from ``env`` (the engine's environment) wins over the process's own,
    as it does for the CLI.
    """
    home = (env or {}).get("PULUMI_HOME") or os.environ.get("PULUMI_HOME")
    base = Path(home) if home else Path.home() / ".pulumi"
    project_file = Path(work_dir).resolve() / "Pulumi.yaml"
    digest = hashlib.sha1(str(project_file).encode(), usedforsecurity=False).hexdigest()
    return base / "workspaces" / f"{_project_name(project_file)}-{digest}-workspace.json"


def repair_settings(path: Path) -> bool:
    """Remove the settings file at ``path`` when it does not parse; ``True`` if removed.

    It only records which stack was selected last, which twc never relies on.
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        return False
    try:
        if isinstance(json.loads(text), dict):
            return False
    except ValueError:
        pass
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    log.warning(
        "removed the unreadable Pulumi workspace settings file %s (%d bytes): an earlier "
        "`stack select` was interrupted while writing it",
        path,
        len(text),
    )
    return True


@contextlib.contextmanager
def selecting(work_dir: Path, env: Mapping[str, str] | None = None) -> Iterator[Path]:
    """Hold the host-wide lock for the project's settings file, repaired; yields its path."""
    path = settings_file(work_dir, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".twc-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            repair_settings(path)
            yield path
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
