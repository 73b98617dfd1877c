"""Timestamps as the Kubernetes API writes them, and ages as ``kubectl`` prints them.

One place for the formats: condition ``lastTransitionTime`` and Event times are RFC 3339
in whole seconds (``Time``); a Lease's ``renewTime`` and ``acquireTime`` are RFC 3339
with microseconds (``MicroTime``). Pure: the time is always an argument, except for
:func:`boottime`, the one clock every term and deadline is measured on.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["age", "boottime", "parse_rfc3339", "rfc3339", "rfc3339_micro"]

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boottime() -> float:
    """Seconds on the host's ``CLOCK_BOOTTIME`` (``CLOCK_MONOTONIC`` where there is none).

    Monotonic and one clock for every process of the host, like ``CLOCK_MONOTONIC``, but
    it also counts the time the host was suspended: a Lease term or an engine deadline
    measured on it is over when a laptop wakes past it, not that long after the wake.
    """
    return time.clock_gettime(_BOOTTIME)


def rfc3339(wall: float) -> str:
    """Unix time as a Kubernetes ``Time`` (``2026-12-01T08:35:21Z``)."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(wall: float) -> str:
    """Unix time as a Kubernetes ``MicroTime`` (``2026-12-01T08:35:21.123456Z``)."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Unix time of an RFC 3339 timestamp (``Z`` or an offset; fractions allowed).

    Raises:
        ValueError: The text is not a timestamp.
    """
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def age(timestamp: str | None, now: float) -> str:
    """``45s``, ``5m``, ``2h`` or ``3d`` since ``timestamp``, as ``kubectl get`` shows
    ages; ``?`` when there is no (readable) timestamp."""
    if not timestamp:
        return "?"
    try:
        then = parse_rfc3339(timestamp)
    except ValueError:
        return "?"
    secs = max(0, int(now - then))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"
