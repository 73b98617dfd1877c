"""Liveness of the watch caches: a cache the API server stopped answering fails it.

With worker Deployments and Secrets read from watch caches, an iteration with nothing
to do makes no Kubernetes call at all, so a hung API server (connections accepted,
nothing answered) no longer stalls the loop, and the loop's own progress
(:class:`~twc.loop.health.Liveness`) stays fine while the daemon reads an ever older
picture of the cluster. So each cache's last answer from the API server counts too:
a healthy cache hears from the server at least once per quiet window (its watch
request ends on the server's timeout and the next starts at once, or a re-list answers),
and one that heard nothing for longer than that window plus the liveness allowance
(its watch or re-list hangs or keeps failing without an answer) fails ``/healthz``
with the cache and its last failure named, so the kubelet restarts the daemon, as for
a loop stuck in a call.

A client error (a denied list) is an answer: a restart would not change it, and
the caches' readers fall back to direct reads where they may not list.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from twc.loop.health import Probe

__all__ = ["CacheFreshness", "WatchedCache"]


class WatchedCache(Protocol):
    """What the freshness check reads of a cache (:class:`twc.kube.caches.DeploymentCache`)."""

    @property
    def kind(self) -> str:
        """What the cache holds."""
        ...

    @property
    def quiet_window(self) -> float:
        """The longest a healthy cache goes without an answer, in seconds."""
        ...

    def last_answer(self) -> float:
        """When (the monotonic clock) the API server last answered."""
        ...

    def failure(self) -> str | None:
        """Why the last list or watch failed, until one succeeds again."""
        ...


class CacheFreshness(Collector):
    """The caches' part of ``/healthz``, and their metrics.

    Metrics: ``twc_watch_cache_age_seconds{stack,kind}`` (seconds since the API server
    last answered the cache) and ``twc_watch_cache_stale{stack,kind}`` (1 while that age
    is beyond the cache's quiet window plus the allowance, i.e. while ``/healthz`` fails
    for it).
    """

    def __init__(
        self,
        stack: str,
        caches: Sequence[WatchedCache],
        *,
        allowance: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Check ``caches`` of ``stack``, allowing ``allowance`` seconds past each one's
        quiet window (the daemon's liveness timeout)."""
        self.stack = stack
        self.caches = tuple(caches)
        self.allowance = allowance
        self._clock = clock

    def _ages(self) -> list[tuple[WatchedCache, float, float]]:
        now = self._clock()
        return [
            (cache, max(0.0, now - cache.last_answer()), cache.quiet_window + self.allowance)
            for cache in self.caches
        ]

    def check(self) -> tuple[bool, str]:
        """``(ok, one line)``: fails while any cache has not heard from the API server
        within its quiet window plus the allowance."""
        stale = []
        for cache, age, limit in self._ages():
            if age > limit:
                failure = cache.failure()
                stale.append(
                    f"the {cache.kind} watch cache had no answer from the API server for "
                    f"{age:.0f} s (limit {limit:g} s: its watch window "
                    f"{cache.quiet_window:g} s + liveness timeout {self.allowance:g} s)"
                    + (f"; last failure: {failure}" if failure else "; its request hangs")
                )
        if stale:
            return False, "; ".join(stale)
        return True, "ok"

    def probe(self, live: Probe) -> Probe:
        """``live`` (the loop's liveness) and then this check."""

        def check() -> tuple[bool, str]:
            ok, why = live()
            if not ok:
                return ok, why
            return self.check()

        return check

    def collect(self) -> Iterator[Metric]:
        """The caches' ages and staleness, at scrape time."""
        age = GaugeMetricFamily(
            "twc_watch_cache_age_seconds",
            "Seconds since the API server last answered the watch cache.",
            labels=["stack", "kind"],
        )
        stale = GaugeMetricFamily(
            "twc_watch_cache_stale",
            "1 while the watch cache had no answer within its watch window plus the "
            "liveness timeout (/healthz fails).",
            labels=["stack", "kind"],
        )
        for cache, seconds, limit in self._ages():
            age.add_metric([self.stack, cache.kind], seconds)
            stale.add_metric([self.stack, cache.kind], 1.0 if seconds > limit else 0.0)
        yield age
        yield stale
