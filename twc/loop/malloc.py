"""The C allocator's share of the daemon's memory: fewer arenas, free pages handed back.

Python's own allocator serves small objects; everything larger (a parsed state export,
a watch list's response body, an engine run's output) comes from glibc's ``malloc``,
which gives each thread that contends for it an arena of its own (up to eight per
core) and keeps what is freed in them for reuse rather than returning it. A daemon of
20 shard loops, their engine threads and the watch threads thus keeps the high-water
mark of many arenas. Measured on the benchmark's N=5000 stack (20 shards, its Queue
stage with one-worker changes, ``twc run`` at 4abc671, one diagnostic run): a full
garbage collection every two minutes freed 0 to 19 objects and no memory, while
``malloc_trim(0)`` right after it returned 5 to 116 MiB each time (773 → 673, 783 → 667,
744 → 721, 727 → 722, 803 → 773 MiB).

So ``twc run`` caps the arenas (``M_ARENA_MAX``, like the ``MALLOC_ARENA_MAX`` variable,
which still wins when set) and trims every ``interval`` seconds on a thread of its own.
Both are glibc's; elsewhere (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
from typing import Any

__all__ = ["MallocTrimmer", "cap_arenas", "libc"]

logger = logging.getLogger(__name__)

M_ARENA_MAX = -8
"""``mallopt``'s parameter for the most arenas (glibc's ``malloc.h``)."""


def libc() -> Any | None:
    """glibc, when this process runs on it (``None`` otherwise)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    if not hasattr(lib, "malloc_trim") or not hasattr(lib, "mallopt"):
        return None
    return lib


def cap_arenas(arenas: int = 2) -> bool:
    """Let ``malloc`` use at most ``arenas`` arenas from now on; whether it was set.

    Call it before the threads start: arenas already made stay. ``MALLOC_ARENA_MAX`` in
    the environment is left to glibc (it read it at start).
    """
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    lib = libc()
    if lib is None:
        return False
    return bool(lib.mallopt(M_ARENA_MAX, arenas))


class MallocTrimmer:
    """Hands the C allocator's free pages back to the system every ``interval`` s."""

    def __init__(self, interval: float = 60.0) -> None:
        """Trim every ``interval`` seconds once started."""
        self.interval = interval
        self.trims = 0
        self._lib = libc()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        """Whether this process's C library can trim (glibc)."""
        return self._lib is not None

    def trim(self) -> bool:
        """Trim once now; whether any memory went back to the system."""
        if self._lib is None:
            return False
        self.trims += 1
        return bool(self._lib.malloc_trim(0))

    def start(self) -> None:
        """Trim on a thread of its own (nothing without glibc)."""
        if self._lib is None:
            logger.info("no glibc: the C allocator's free pages are not trimmed")
            return
        self._thread = threading.Thread(target=self._run, name="twc-malloc-trim", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop trimming."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.trim()
