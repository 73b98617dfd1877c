"""Percentiles and summaries of timing samples (pure)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linearly interpolated between closest ranks.

    The same definition as ``numpy.percentile``'s default: rank ``(n - 1) * q / 100``.

    Args:
        samples: At least one value, in any order.
        q: The percentile, from 0 to 100.

    Returns:
        The interpolated value.

    Raises:
        ValueError: On no samples, or ``q`` outside [0, 100].
    """
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within [0, 100], got {q}")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    if lo == hi:
        return float(ordered[lo])
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo))


def summarize(samples: Sequence[float]) -> dict[str, Any]:
    """``{n, min, p50, p95, max, mean, samples}`` of timing samples in seconds."""
    if not samples:
        return {
            "n": 0,
            "min": None,
            "p50": None,
            "p95": None,
            "max": None,
            "mean": None,
            "samples": [],
        }
    return {
        "n": len(samples),
        "min": min(samples),
        "p50": percentile(samples, 50),
        "p95": percentile(samples, 95),
        "max": max(samples),
        "mean": statistics.fmean(samples),
        "samples": [round(s, 6) for s in samples],
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the divisor is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def growth(values: dict[int, float | None]) -> float | None:
    """Log-log slope between the smallest and largest N: 1.0 is linear, 0 is flat.

    Args:
        values: Figure per N (N > 0); missing figures are ignored.

    Returns:
        ``log(v_max / v_min) / log(N_max / N_min)``, or None with fewer than two points.
    """
    points = sorted((n, v) for n, v in values.items() if v is not None and v > 0 and n > 0)
    if len(points) < 2:
        return None
    (n0, v0), (n1, v1) = points[0], points[-1]
    return math.log(v1 / v0) / math.log(n1 / n0)
