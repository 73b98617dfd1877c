"""Which build of twc renders a stack.

A restarted daemon skips its first ``up`` only when its stack is as the last recorded
``up`` left it *and* this build renders the same way. The build is a digest of what
renders: the program, twc's and the providers' sources and the pinned requirements,
leaving out the packages the program cannot import (:data:`NOT_RENDERING`).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["NOT_RENDERING", "build_id"]

NOT_RENDERING = ("cli", "commands", "loop", "stackrun", "local")
"""twc's modules (``twc.<name>``) the program cannot import: left out of the build."""

_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def build_id(root: Path = _ROOT) -> str:
    """A digest of the project's rendering sources under ``root`` (cached)."""
    digest = hashlib.sha256()
    files = [root / "__main__.py", root / "Pulumi.yaml", root / "requirements.txt"]
    for package in ("twc", "providers"):
        files.extend(sorted((root / package).rglob("*.py")))
    skipped = {root / "twc" / name for name in NOT_RENDERING}
    files = [
        path for path in files if not skipped.intersection((path.with_suffix(""), *path.parents))
    ]
    for path in files:
        if not path.is_file():
            continue
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]
