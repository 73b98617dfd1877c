"""Timestamps as the Kubernetes API writes them, and ages as ``kubectl`` prints them.

``Time`` (conditions, Events) is RFC 3339 in whole seconds, ``MicroTime`` (Leases) with
microseconds. Pure: the time is an argument, except for :func:`boottime`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boottime() -> float:
    """Seconds on ``CLOCK_BOOTTIME`` (else ``CLOCK_MONOTONIC``): host-wide, counting suspend."""
    return time.clock_gettime(_BOOTTIME)


def rfc3339(wall: float) -> str:
    """Unix time as a Kubernetes ``Time`` (``2026-12-01T08:35:21Z``)."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(wall: float) -> str:
    """Unix time as a Kubernetes ``MicroTime`` (``2026-12-01T08:35:21.123456Z``)."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Unix time of an RFC 3339 timestamp; ValueError if it is not one."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def age(timestamp: str | None, now: float) -> str:
    """``45s``, ``5m``, ``2h`` or ``3d`` since ``timestamp`` as ``kubectl`` shows it, or ``?``."""
    try:
        secs = max(0, int(now - parse_rfc3339(timestamp or "")))
    except ValueError:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"
