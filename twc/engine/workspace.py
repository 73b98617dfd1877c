"""The Pulumi CLI's workspace settings file, made safe for several engines on one host:
selects are serialised with a lock file and an unreadable settings file is removed."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

UNREADABLE_SETTINGS = "unable to read workspace settings"
"""The CLI's error when the settings file does not parse."""


def project_name(work_dir: Path) -> str:
    """The name of the Pulumi project in ``work_dir``."""
    project_file = Path(work_dir).resolve() / "Pulumi.yaml"
    data = yaml.safe_load(project_file.read_text())
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{project_file} names no project")
    return name


def settings_file(work_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where the CLI keeps the workspace settings of the project in ``work_dir``."""
    home = (env or {}).get("PULUMI_HOME") or os.environ.get("PULUMI_HOME")
    base = Path(home) if home else Path.home() / ".pulumi"
    project_file = Path(work_dir).resolve() / "Pulumi.yaml"
    digest = hashlib.sha1(str(project_file).encode(), usedforsecurity=False).hexdigest()
    return base / "workspaces" / f"{project_name(work_dir)}-{digest}-workspace.json"


def repair_settings(path: Path) -> bool:
    """Remove the settings file at ``path`` when it does not parse; ``True`` if removed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return False
    with contextlib.suppress(ValueError):
        if isinstance(json.loads(text), dict):
            return False
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
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        repair_settings(path)
        yield path
