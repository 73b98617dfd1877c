"""How the engine writes a stack's state, and how many old copies the file backend keeps."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Mapping

from twc.engine import filebackend

DEFAULT_KEEP_BACKUPS = 10

logger = logging.getLogger(__name__)

_STAMP = re.compile(r"[.-](\d{10,})\.")


def engine_env(*, checkpoints: str) -> dict[str, str]:
    """The CLI's environment for ``checkpoints``: ``every-step`` or ``final``."""
    return {"PULUMI_SKIP_CHECKPOINTS": str(checkpoints == "final").lower()}


def prune_backups(backend_url: str, *, project: str, stack: str, keep: int) -> int:
    """Delete all but the newest ``keep`` backups of ``stack``'s state; returns the count."""
    root = filebackend.root(backend_url)
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
                    logger.warning("could not remove %s: %s", entry.path, exc)
    return removed


def backend_url(env: Mapping[str, str] | None) -> str:
    """The backend URL the engine uses (the stack's environment, else the process's)."""
    return (env or {}).get("PULUMI_BACKEND_URL") or os.environ.get("PULUMI_BACKEND_URL", "")
