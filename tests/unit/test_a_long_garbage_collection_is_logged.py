"""A garbage collection that holds every thread for long is logged, a short one is not.

At 5000 workers the daemon's heap is millions of objects, and a collection of its oldest
generation stops every shard's loop for seconds (twc/loop/gcpause.py).
"""

from __future__ import annotations

import gc
import logging
import time

import pytest

from twc.loop.gcpause import GcFreezer, GcPauseLog


class _Clock:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _collect_with(log: GcPauseLog, caplog: pytest.LogCaptureFixture) -> None:
    log.install()
    try:
        with caplog.at_level(logging.WARNING, logger="twc.loop.gcpause"):
            gc.collect(2)
    finally:
        log.uninstall()


def test_a_collection_longer_than_the_threshold_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    log = GcPauseLog(threshold=1.0, clock=_Clock(step=2.5))  # each collection "takes" 2.5 s
    _collect_with(log, caplog)

    assert (2, 2.5) in log.pauses
    assert "garbage collection of generation 2 held every thread for 2.5 s" in caplog.text
    assert log._callback not in gc.callbacks


def test_a_short_collection_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    log = GcPauseLog(threshold=1.0, clock=_Clock(step=0.001))
    _collect_with(log, caplog)

    assert log.pauses == []
    assert "garbage collection" not in caplog.text


def test_the_freezer_keeps_live_objects_out_of_collections_and_collects_them_all_at_times() -> None:
    # At 5000 workers the collector walked every object the daemon holds, a second or
    # more each time (18 such pauses, 26.5 s, in a daemon's first minutes); frozen, they
    # are not walked, and everything is collected at once every collect_interval.
    freezer = GcFreezer(freeze_interval=0.01, collect_interval=0.05)
    kept = [{"worker": i} for i in range(1000)]
    freezer.start()
    try:
        assert gc.get_freeze_count() >= len(kept)
        deadline = time.monotonic() + 10
        while freezer.collections < 1 or freezer.freezes < 3:
            assert time.monotonic() < deadline, "the freezer never froze and collected again"
            time.sleep(0.01)
    finally:
        freezer.stop()
    assert gc.get_freeze_count() == 0, "stopping hands every object back to the collector"
