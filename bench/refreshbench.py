"""A change that meets a refresh, measured: one-worker changes of a 250-worker stack (a
full shard) made while the daemon is idle and while its refresh runs (the refresh gives
way to the change). The daemon refreshes every ``refresh_interval`` seconds after the
last refresh ended, so a refresh is never far off; each trial waits for the state it
needs (a refresh under way for two seconds, or one that just ended) and then edits the
file. The trial kinds are in random order."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from bench import fleets
from bench.daemon import DaemonProcess
from bench.figures import change_until_available
from bench.stacks import BenchStack
from bench.stats import summarize

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 20.0
"""Seconds from one refresh's end to the next one's start: a 250-worker refresh takes
tens of seconds, so the engine refreshes most of the time."""

KINDS = {
    "idle": "no engine run when the change is made (a refresh just ended)",
    "refreshing": "the change is made 2 s into a refresh, which stops for it",
}
"""The trial kinds (names as in the results) and what each measures."""


def _refreshing(daemon: DaemonProcess) -> bool:
    return daemon.value("twc_engine_in_progress", operation="refresh") == 1


def _busy(daemon: DaemonProcess) -> bool:
    return any(
        daemon.value("twc_engine_in_progress", operation=op) == 1
        for op in ("up", "refresh", "recover")
    )


class RefreshClock:
    """Follows the daemon's refreshes while a trial waits: how long each one that was
    seen from its start to its end took."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._since: float | None = None
        self._seen_start = False

    def look(self, daemon: DaemonProcess) -> bool:
        """Read the gauge once; returns whether a refresh runs now."""
        now = time.monotonic()
        running = _refreshing(daemon)
        if running and self._since is None:
            self._since = now
        elif not running and self._since is not None:
            if self._seen_start:
                self.durations.append(now - self._since)
            self._since = None
        self._seen_start = True
        return running

    def running_for(self) -> float:
        return 0.0 if self._since is None else time.monotonic() - self._since


def _await_refresh(daemon: DaemonProcess, clock: RefreshClock, *, under_way: float) -> None:
    """Until a refresh has been running for ``under_way`` seconds."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if clock.look(daemon) and clock.running_for() >= under_way:
            return
        time.sleep(0.1)
    raise TimeoutError("no refresh ran for ten minutes")


def _await_idle_after_refresh(daemon: DaemonProcess, clock: RefreshClock) -> None:
    """Until a refresh ends (the next is ``REFRESH_INTERVAL`` away) and nothing runs."""
    deadline = time.monotonic() + 600
    seen = False
    while time.monotonic() < deadline:
        running = clock.look(daemon)
        seen = seen or running
        if seen and not running and not _busy(daemon):
            return
        time.sleep(0.1)
    raise TimeoutError("no refresh ended in ten minutes")


def measure_refresh_yields(
    stack: BenchStack,
    daemon: DaemonProcess,
    kube: Any,
    *,
    trials: int,
    rng: random.Random,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """``trials`` changes of each kind; returns ``latency_s`` per kind and the
    refreshes' own durations as seen meanwhile. Stops ``daemon`` at the end."""
    latencies: dict[str, list[float]] = {k: [] for k in KINDS}
    clock = RefreshClock()
    candidates = [i for i in range(stack.n) if not fleets.autoscaled(i, stack.namespaces, stack.n)]
    picks = iter(rng.sample(candidates, k=min(2 * trials, len(candidates))))
    kinds = list(KINDS) * trials
    rng.shuffle(kinds)
    try:
        for step, kind in enumerate(kinds):
            if kind == "idle":
                _await_idle_after_refresh(daemon, clock)
            else:
                _await_refresh(daemon, clock, under_way=2.0)
            seconds = change_until_available(stack, kube, next(picks))
            latencies[kind].append(seconds)
            progress(f"refresh yields {step + 1}/{len(kinds)}: {kind}: {seconds:.1f} s")
        yielded = _count_yields(daemon)
    finally:
        daemon.stop()
    return {
        "workers": stack.n,
        "refresh_interval_s": REFRESH_INTERVAL,
        "refresh_s": summarize(clock.durations),
        "kinds": KINDS,
        "latency_s": {kind: summarize(values) for kind, values in latencies.items()},
        "refreshes_given_way": yielded,
    }


def _count_yields(daemon: DaemonProcess) -> int:
    """Refreshes that stopped for a change, from the daemon's log."""
    return daemon.log_file.read_text().count("refresh stopped for a change")
