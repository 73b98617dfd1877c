"""How the engine writes a stack's state, and how many old copies the file backend keeps.

**Writing.** :func:`engine_env` turns the daemon's ``state`` settings into the CLI's
switches: ``PULUMI_SKIP_CHECKPOINTS`` (write once, at the end),
``PULUMI_DIY_BACKEND_GZIP`` and ``PULUMI_PARALLEL_DIFF``. What a crash in the middle of
an ``up`` loses with each is in docs/daemon.md.

**Keeping.** Every ``up`` on a DIY backend writes a backup and a history copy of the
state and never removes either; :func:`prune_backups` keeps the newest ``keep`` of each
per stack (the small update records ``pulumi stack history`` lists stay).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twc.stackrun import filebackend

__all__ = ["DEFAULT_KEEP_BACKUPS", "PruningEngine", "backend_url", "engine_env", "prune_backups"]

DEFAULT_KEEP_BACKUPS = 10
"""Backups (and history copies) of a stack's state the file backend keeps."""

logger = logging.getLogger(__name__)

_STAMP = re.compile(r"[.-](\d{10,})\.")


def engine_env(*, checkpoints: str, compression: str, parallel_diff: bool) -> dict[str, str]:
    """The CLI's environment for these state settings.

    Args:
        checkpoints: ``every-step`` (the engine's default) or ``final``.
        compression: ``none`` or ``gzip``.
        parallel_diff: Diff resources in parallel.
    """
    if checkpoints not in ("every-step", "final"):
        raise ValueError(f"checkpoints: every-step or final, got {checkpoints!r}")
    if compression not in ("none", "gzip"):
        raise ValueError(f"compression: none or gzip, got {compression!r}")
    return {
        "PULUMI_SKIP_CHECKPOINTS": "true" if checkpoints == "final" else "false",
        "PULUMI_DIY_BACKEND_GZIP": "true" if compression == "gzip" else "false",
        "PULUMI_PARALLEL_DIFF": "true" if parallel_diff else "false",
    }


def _stamped(directory: Path, suffix: str) -> dict[int, list[Path]]:
    """Files of one kind in ``directory`` grouped by the nanosecond stamp in their name
    (a copy and its ``.attrs`` side file share one)."""
    groups: dict[int, list[Path]] = {}
    if not directory.is_dir():
        return groups
    for path in directory.iterdir():
        if suffix not in path.name:
            continue
        # The last stamp in the name: a stack's own name may hold digits too.
        found = _STAMP.findall(path.name)
        if found:
            groups.setdefault(int(found[-1]), []).append(path)
    return groups


def prune_backups(backend_url: str, *, project: str, stack: str, keep: int) -> int:
    """Delete all but the newest ``keep`` backups and history copies of ``stack``'s state.

    Only the file backend is pruned (``file://``); other backends keep theirs.

    Returns:
        How many files were removed.
    """
    root = filebackend.root(backend_url)
    if root is None or keep < 0:
        return 0
    removed = 0
    for directory, suffix in (
        (root / ".pulumi" / "backups" / project / stack, ".json"),
        (root / ".pulumi" / "history" / project / stack, ".checkpoint."),
    ):
        groups = _stamped(directory, suffix)
        for stamp in sorted(groups)[: max(0, len(groups) - keep)]:
            for path in groups[stamp]:
                try:
                    path.unlink()
                    removed += 1
                except OSError as exc:
                    logger.warning("could not remove %s: %s", path, exc)
    return removed


def backend_url(env: Mapping[str, str] | None) -> str:
    """The backend URL the engine uses (the stack's environment, else the process's)."""
    return (env or {}).get("PULUMI_BACKEND_URL") or os.environ.get("PULUMI_BACKEND_URL", "")


def PruningEngine(  # compat: `twc run`'s wiring calls it by this name
    engine: Any, *, stack: str, project: str, keep: int, env: Mapping[str, str] | None = None
) -> Any:
    """``engine`` itself, its :class:`~twc.stackrun.automation.AutomationEngine` told to
    keep ``keep`` backups (``stack``, ``project`` and ``env`` are the engine's own)."""
    getattr(engine, "engine", engine).keep_backups = keep
    return engine
