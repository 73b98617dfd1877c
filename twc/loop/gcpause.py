"""Long garbage collections, logged: they hold every thread of the daemon.

CPython's collector of the oldest generation walks every tracked object while it holds
the GIL. A daemon keeping 5000 workers' objects in memory holds millions of them (the
watch caches, each shard's slices and desired state), and such a collection then stops
every shard's loop for seconds at once: a collection of a comparable heap (2.5 million
JSON objects, 888 MiB) took 3.1 s on an idle two-core machine. The bench's N=5000 daemon
log shows every shard silent for about 20 s and then logging within the same second,
which is what such a pause looks like. This makes each pause visible in the log, with
its length and generation, so it can be told apart from a slow API server or Temporal.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["GcFreezer", "GcPauseLog"]

logger = logging.getLogger(__name__)


class GcPauseLog:
    """Logs every garbage collection that took at least ``threshold`` seconds."""

    def __init__(
        self, threshold: float = 1.0, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        """Log collections of ``threshold`` seconds or more (not installed yet)."""
        self.threshold = threshold
        self._clock = clock
        self._started: float | None = None
        self.pauses: list[tuple[int, float]] = []
        """``(generation, seconds)`` of every collection that was logged."""

    def install(self) -> None:
        """Start watching the collector."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        """Stop watching the collector."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        if self._started is None:
            return
        took, self._started = self._clock() - self._started, None
        if took < self.threshold:
            return
        generation = int(info.get("generation", -1))
        self.pauses.append((generation, took))
        logger.warning(
            "garbage collection of generation %d held every thread for %.1f s "
            "(%d objects collected)",
            generation,
            took,
            int(info.get("collected", 0)),
        )


class GcFreezer:
    """Keeps the daemon's long-lived objects out of the collector's walks.

    Every ``freeze_interval`` seconds the objects that exist are frozen
    (:func:`gc.freeze`): the collector never walks them again, and a collection walks
    only what came after. Frozen objects are still freed as soon as nothing refers to
    them; only garbage that refers to itself in a cycle stays. The daemon's objects are
    JSON values and models without cycles (the logged collections at 5000 workers
    collected 0 objects), so every ``collect_interval`` seconds everything is unfrozen
    and collected once, which frees such cycles at the price of one logged pause.
    """

    def __init__(self, *, freeze_interval: float = 5.0, collect_interval: float = 900.0) -> None:
        """Freeze every ``freeze_interval`` s, collect it all every ``collect_interval`` s."""
        self.freeze_interval = freeze_interval
        self.collect_interval = collect_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.freezes = 0
        self.collections = 0

    def start(self) -> None:
        """Freeze now, then on a thread of its own."""
        gc.freeze()
        self.freezes += 1
        self._thread = threading.Thread(target=self._run, name="twc-gc-freeze", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop freezing and hand every frozen object back to the collector."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        gc.unfreeze()

    def _run(self) -> None:
        last_collect = time.monotonic()
        while not self._stop.wait(self.freeze_interval):
            if time.monotonic() - last_collect >= self.collect_interval:
                gc.unfreeze()
                gc.collect()
                self.collections += 1
                last_collect = time.monotonic()
            gc.freeze()
            self.freezes += 1
