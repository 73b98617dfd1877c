"""Wake the loop when the fleet file changes.

Every ``file_poll_interval`` the watch compares the file's ``stat`` (inode, size,
modification time; a mounted ConfigMap's symlink swap changes the inode) with the last
one and, when it differs, wakes the loop; the loop reads and parses the file itself.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Protocol

__all__ = ["FleetFileWatch"]

logger = logging.getLogger(__name__)


class Wakeup(Protocol):
    """What an edit sets: the loop's event, or a sharded daemon's
    :class:`~twc.loop.shardviews.FanoutWakeup`."""

    def set(self) -> None:
        """Wake."""


Signature = tuple[int, int, int] | None
"""``(inode, size, mtime in ns)`` of the file the path resolves to; ``None`` while the
path does not resolve."""


def signature(path: Path) -> Signature:
    """What tells one version of the file from the next, without reading it."""
    try:
        st = os.stat(path)  # follows symlinks: a ConfigMap's ..data swap shows
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


FILE_POLL_INTERVAL = 1.0
"""Seconds between two looks at the fleet file (a ``stat``)."""


class FleetFileWatch:
    """A thread that sets ``wakeup`` whenever the fleet file changes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        wakeup: Wakeup,
        *,
        interval: float = FILE_POLL_INTERVAL,
    ) -> None:
        """Watch ``path`` every ``interval`` seconds once :meth:`start`\\ ed."""
        self.path = Path(path)
        self.interval = interval
        self._wakeup = wakeup
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes = 0
        """How many changes woke the loop."""

    def start(self) -> None:
        """Take the file as it is now, then watch it."""
        if self._thread is not None:
            return
        seen = signature(self.path)
        self._thread = threading.Thread(
            target=self._run, args=(seen,), name="fleet-file-watch", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (waits for the thread: at most one interval)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5.0)

    def _run(self, seen: Signature) -> None:
        while not self._stop.wait(self.interval):
            now = signature(self.path)
            if now == seen:
                continue
            seen = now
            self.changes += 1
            logger.info("fleet file %s changed: reconciling now", self.path)
            self._wakeup.set()
