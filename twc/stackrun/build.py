"""Which build of twc renders a stack.

A restarted daemon skips its first ``up`` only when its stack is as the last recorded
``up`` left it *and* it would render the same desired state the same way: a new twc
(another builder, another provider version) may not. The build is a digest of what
renders: the program, twc's and the providers' sources, and the pinned requirements.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["build_id"]

_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def build_id(root: Path = _ROOT) -> str:
    """A digest of the project's rendering sources under ``root`` (cached)."""
    digest = hashlib.sha256()
    files = [root / "__main__.py", root / "Pulumi.yaml", root / "requirements.txt"]
    for package in ("twc", "providers"):
        files.extend(sorted((root / package).rglob("*.py")))
    for path in files:
        if not path.is_file():
            continue
        digest.update(str(path.relative_to(root)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]
