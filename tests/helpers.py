"""Shared test helpers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def assert_eventually(
    probe: Callable[[], T],
    *,
    timeout: float = 60.0,
    interval: float = 0.25,
    message: str = "condition never held",
) -> T:
    """Call ``probe`` until it returns a truthy value or stops raising AssertionError.

    Returns:
        The first truthy value ``probe`` returned.

    Raises:
        AssertionError: with the last failure, after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{message} within {timeout:.0f} s (last: {last!r})")
        time.sleep(interval)
