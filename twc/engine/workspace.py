"""The engine's files on this host, made safe for several engines that may be killed: the
Pulumi CLI's workspace settings file (selects are serialised with a lock file and an
unreadable settings file is removed) and the file backend's state (engines skip metadata
sidecars, and each select removes unreadable ones first); how the engine writes a stack's
state, and how many old copies the file backend keeps."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import yaml

log = logging.getLogger(__name__)

UNREADABLE_SETTINGS = "unable to read workspace settings"
"""The CLI's error when the settings file does not parse."""
DEFAULT_KEEP_BACKUPS = 10

_SIDECAR = ".attrs"
_STAMP = re.compile(r"[.-](\d{10,})\.")


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


def _remove_unreadable(path: Path, what: str, cause: str) -> bool:
    """Remove the JSON file at ``path`` when it does not parse as an object; ``True`` if so."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return False  # gone meanwhile: nothing to repair
    with contextlib.suppress(ValueError):
        if isinstance(json.loads(data.decode()), dict):
            return False
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    log.warning("removed the unreadable %s %s (%d bytes): %s", what, path, len(data), cause)
    return True


def repair_settings(path: Path) -> bool:
    """Remove the settings file at ``path`` when it does not parse; ``True`` if removed."""
    cause = "an earlier `stack select` was interrupted while writing it"
    return _remove_unreadable(path, "Pulumi workspace settings file", cause)


@contextlib.contextmanager
def selecting(work_dir: Path, env: Mapping[str, str] | None = None) -> Iterator[Path]:
    """Hold the host-wide lock for the project's settings file, repaired; yields its path."""
    path = settings_file(work_dir, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".twc-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        repair_settings(path)
        yield path


def backend_root(backend_url: str) -> Path | None:
    """The directory of a ``file://`` backend; ``None`` for any other backend."""
    if not backend_url.startswith("file://"):
        return None
    return Path(urlparse(backend_url).path or backend_url.removeprefix("file://"))


def atomic_url(backend_url: str) -> str:
    """``backend_url`` with ``metadata=skip`` for a ``file://`` backend that sets none."""
    parts = urlparse(backend_url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if backend_root(backend_url) is None or any(key == "metadata" for key, _ in query):
        return backend_url
    return urlunparse(parts._replace(query=urlencode([*query, ("metadata", "skip")])))


def repair_sidecars(backend_url: str, *, project: str, stack: str) -> list[Path]:
    """Remove the sidecars of ``stack`` (and ``meta.yaml``) that do not parse; returns them."""
    base = backend_root(backend_url)
    if base is None:
        return []
    pulumi = base / ".pulumi"
    found = [pulumi / f"meta.yaml{_SIDECAR}"]
    # Project-scoped stacks and locks, and the legacy layout without a project directory.
    for directory, prefix in (
        (pulumi / "stacks" / project, f"{stack}.json"),
        (pulumi / "stacks", f"{stack}.json"),
        (pulumi / "locks" / "organization" / project / stack, ""),
        (pulumi / "locks" / stack, ""),
    ):
        with contextlib.suppress(OSError):
            found += [
                path
                for path in directory.iterdir()
                if path.name.startswith(prefix) and path.name.endswith(_SIDECAR)
            ]
    cause = (
        "a Pulumi CLI was stopped while writing it, and the CLI cannot read the stack while it "
        "is there"
    )
    return [path for path in found if _remove_unreadable(path, "state metadata file", cause)]


def engine_env(*, checkpoints: str) -> dict[str, str]:
    """The CLI's environment for ``checkpoints``: ``every-step`` or ``final``."""
    return {"PULUMI_SKIP_CHECKPOINTS": str(checkpoints == "final").lower()}


def prune_backups(backend_url: str, *, project: str, stack: str, keep: int) -> int:
    """Delete all but the newest ``keep`` backups of ``stack``'s state; returns the count."""
    root = backend_root(backend_url)
    if root is None or keep < 0:
        return 0
    removed = 0
    for directory, kind in (("backups", ".json"), ("history", ".checkpoint.")):
        # Grouped by the last nanosecond stamp in the name (a copy and its ``.attrs``
        # share one; a stack's own name may hold digits too).
        groups: dict[int, list[os.DirEntry[str]]] = {}
        with contextlib.suppress(OSError):
            for entry in os.scandir(root / ".pulumi" / directory / project / stack):
                stamps = _STAMP.findall(entry.name) if kind in entry.name else []
                if stamps:
                    groups.setdefault(int(stamps[-1]), []).append(entry)
        for stamp in sorted(groups)[: max(0, len(groups) - keep)]:
            for entry in groups[stamp]:
                try:
                    os.unlink(entry.path)
                    removed += 1
                except OSError as exc:
                    log.warning("could not remove %s: %s", entry.path, exc)
    return removed


def backend_url(env: Mapping[str, str] | None) -> str:
    """The backend URL the engine uses (the stack's environment, else the process's)."""
    return (env or {}).get("PULUMI_BACKEND_URL") or os.environ.get("PULUMI_BACKEND_URL", "")
