"""The file backend's state files, made safe for an engine that may be killed: engines
skip metadata sidecars, and each select removes unreadable ones first."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

log = logging.getLogger(__name__)

_SIDECAR = ".attrs"


def root(backend_url: str) -> Path | None:
    """The directory of a ``file://`` backend; ``None`` for any other backend."""
    if not backend_url.startswith("file://"):
        return None
    return Path(urlparse(backend_url).path or backend_url.removeprefix("file://"))


def atomic_url(backend_url: str) -> str:
    """``backend_url`` with ``metadata=skip`` for a ``file://`` backend that sets none."""
    parts = urlparse(backend_url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if root(backend_url) is None or any(key == "metadata" for key, _ in query):
        return backend_url
    return urlunparse(parts._replace(query=urlencode([*query, ("metadata", "skip")])))


def _unreadable(sidecar: Path) -> bool:
    try:
        return not isinstance(json.loads(sidecar.read_bytes()), dict)
    except FileNotFoundError:
        return False  # gone meanwhile: nothing to repair
    except ValueError:
        return True


def repair_sidecars(backend_url: str, *, project: str, stack: str) -> list[Path]:
    """Remove the sidecars of ``stack`` (and ``meta.yaml``) that do not parse; returns them."""
    base = root(backend_url)
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
    removed: list[Path] = []
    for sidecar in filter(_unreadable, found):
        try:
            size = sidecar.stat().st_size
            sidecar.unlink()
        except FileNotFoundError:
            continue
        removed.append(sidecar)
        log.warning(
            "removed the unreadable state metadata file %s (%d bytes): a Pulumi CLI was "
            "stopped while writing it, and the CLI cannot read the stack while it is there",
            sidecar,
            size,
        )
    return removed
