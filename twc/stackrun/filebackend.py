"""The file backend's state files, made safe for an engine that may be killed.

The CLI's ``file://`` backend writes each state file by rename, but rewrites its
metadata sidecar (``<file>.attrs``) in place and reads it before every read: a CLI killed
in between leaves an empty sidecar, and every later command fails with "failed to load
checkpoint: EOF". So twc

* hands the engine its backend with ``metadata=skip`` (:func:`atomic_url`): no sidecars
  are written (the CLI reads a missing one as "no metadata");
* removes, before each selection of a stack, any of its sidecars (and ``meta.yaml``'s)
  that does not parse (:func:`repair_sidecars`), saying so.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

__all__ = ["atomic_url", "repair_sidecars", "root"]

log = logging.getLogger(__name__)

_SIDECAR = ".attrs"
_ORGANIZATION = "organization"
"""The one organization the file backend knows; its locks are kept under it."""


def root(backend_url: str) -> Path | None:
    """The directory of a ``file://`` backend; ``None`` for any other backend."""
    if not backend_url.startswith("file://"):
        return None
    return Path(urlparse(backend_url).path or backend_url.removeprefix("file://"))


def atomic_url(backend_url: str) -> str:
    """``backend_url`` with ``metadata=skip`` when it is a ``file://`` backend that does
    not say how to keep metadata; any other URL as it is."""
    if root(backend_url) is None:
        return backend_url
    parts = urlparse(backend_url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key == "metadata" for key, _ in query):
        return backend_url  # the owner chose
    return urlunparse(parts._replace(query=urlencode([*query, ("metadata", "skip")])))


def _readable(sidecar: Path) -> bool:
    try:
        return isinstance(json.loads(sidecar.read_bytes()), dict)
    except FileNotFoundError:
        return True  # gone meanwhile: nothing to repair
    except ValueError:
        return False


def _sidecars(base: Path, project: str, stack: str) -> list[Path]:
    found = [base / ".pulumi" / f"meta.yaml{_SIDECAR}"]
    # Project-scoped stacks, and the legacy layout without a project directory.
    for stacks in (base / ".pulumi" / "stacks" / project, base / ".pulumi" / "stacks"):
        with contextlib.suppress(OSError):
            found += [
                path
                for path in stacks.iterdir()
                if path.name.startswith(f"{stack}.json") and path.name.endswith(_SIDECAR)
            ]
    for locks in (
        base / ".pulumi" / "locks" / _ORGANIZATION / project / stack,
        base / ".pulumi" / "locks" / stack,
    ):
        with contextlib.suppress(OSError):
            found += [path for path in locks.iterdir() if path.name.endswith(_SIDECAR)]
    return found


def repair_sidecars(backend_url: str, *, project: str, stack: str) -> list[Path]:
    """Remove the sidecars of ``stack`` (and of the backend's ``meta.yaml``) that do not
    parse, so the CLI can read the files they describe again.

    Only a ``file://`` backend has sidecars; any other backend is left alone.

    Returns:
        The sidecars removed.
    """
    base = root(backend_url)
    if base is None:
        return []
    removed: list[Path] = []
    for sidecar in _sidecars(base, project, stack):
        if _readable(sidecar):
            continue
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
