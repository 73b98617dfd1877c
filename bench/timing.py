"""Wall-clock helpers for the harness (the only place that reads the clock)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Run ``fn`` and return ``(seconds, result)``."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def repeat(fn: Callable[[], object], trials: int) -> list[float]:
    """Run ``fn`` ``trials`` times; the wall time of each run in seconds."""
    return [timed(fn)[0] for _ in range(trials)]
