"""A garbage collection that holds every thread for long is logged, a short one is not.

At 5000 workers the daemon's heap is millions of objects, and a collection of its oldest
generation stops every shard's loop for seconds (twc/loop/gcpause.py).
"""

from __future__ import annotations

import gc
import logging

import pytest

from twc.loop.gcpause import GcPauseLog


class _Clock:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_collection_longer_than_the_threshold_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    log = GcPauseLog(threshold=1.0, clock=_Clock(step=2.5))  # each collection "takes" 2.5 s
    log.install()
    try:
        with caplog.at_level(logging.WARNING, logger="twc.loop.gcpause"):
            gc.collect(2)
    finally:
        log.uninstall()

    assert (2, 2.5) in log.pauses
    assert "garbage collection of generation 2 held every thread for 2.5 s" in caplog.text
    assert log._callback not in gc.callbacks


def test_a_short_collection_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    log = GcPauseLog(threshold=1.0, clock=_Clock(step=0.001))
    log.install()
    try:
        with caplog.at_level(logging.WARNING, logger="twc.loop.gcpause"):
            gc.collect(2)
    finally:
        log.uninstall()

    assert log.pauses == []
    assert "garbage collection" not in caplog.text
