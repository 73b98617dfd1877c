"""Which build of twc renders a stack (a restarted daemon may skip its first ``up``)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

NOT_RENDERING = ("cli", "reconcile", "engine", "local")
"""twc's modules (``twc.<name>``) the program cannot import: left out of the build."""

_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def build_id(root: Path = _ROOT) -> str:
    """A digest of the project's rendering sources under ``root`` (read once a process)."""
    digest = hashlib.sha256()
    files = [root / "__main__.py", root / "Pulumi.yaml", root / "requirements.txt"]
    for package in ("twc", "providers"):
        files.extend(sorted((root / package).rglob("*.py")))
    skipped = {root / "twc" / name for name in NOT_RENDERING}
    for path in files:
        if path.is_file() and not skipped.intersection((path.with_suffix(""), *path.parents)):
            digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
