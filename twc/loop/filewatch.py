"""Wake the loop when the fleet file changes.

The cluster's objects wake the loop through their watches; the fleet file had nothing
of the kind, so an edit waited for the next iteration (``reconcile_interval``, 30 s by
default): a one-worker image change spent most of its time waiting to be read. The
watch compares the file's ``stat`` (inode, size, modification time) every
``file_poll_interval``: a ``stat`` costs microseconds whatever the fleet's size, and it
sees a mounted ConfigMap's update too (the kubelet swaps a symlink, which changes the
inode the path resolves to). What changed is parsed here, on the watch's own thread
(``prepare``: :class:`twc.loop.observe.CachedFleetFile`), before the loops are woken:
a 5000-worker file's parse takes seconds on a busy machine, and a loop that meets a
parse in progress goes on with the fleet before it rather than wait, so no shard's
loop pays for an edit. A touch without new bytes costs one cheap iteration and no
engine run.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = ["FleetFileWatch"]

logger = logging.getLogger(__name__)


class Wakeup(Protocol):
    """What an edit sets: the loop's event, or a sharded daemon's
    :class:`~twc.loop.shardviews.FleetEditWakeup`."""

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


class FleetFileWatch:
    """A thread that sets ``wakeup`` whenever the fleet file changes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        wakeup: Wakeup,
        *,
        interval: float,
        prepare: Callable[[], object] | None = None,
    ) -> None:
        """Watch ``path`` every ``interval`` seconds once :meth:`start`\\ ed; on a
        change, call ``prepare`` (the loops' fleet reader: it parses the new bytes
        now), then wake the loops."""
        self.path = Path(path)
        self.interval = interval
        self._wakeup = wakeup
        self._prepare = prepare
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes = 0
        """How many changes woke the loop (for tests and benchmarks)."""

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
            if self._prepare is not None:
                try:
                    self._prepare()
                except Exception as exc:  # noqa: BLE001 - the loops read it again and report why
                    logger.debug("fleet file %s not read ahead: %s", self.path, exc)
            self._wakeup.set()
