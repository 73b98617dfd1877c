"""``/healthz`` is the loop's progress only: a loop that stops completing iterations
fails it while an engine run is in progress, however long the engine's deadline; a loop
that goes on iterating during a long ``up`` stays live."""

from __future__ import annotations

import threading

import pytest

from tests.helpers import assert_eventually
from tests.unit._daemon_fakes import FakeEngine, make_daemon
from twc.reconcile.settings import DaemonSettings, EngineSettings

pytestmark = pytest.mark.unit

SETTINGS = DaemonSettings(
    reconcile_interval=1.0,
    liveness_timeout=10.0,
    engine=EngineSettings(deadline=1800.0, interrupt_grace=3.0),
)


def _long_up() -> tuple[FakeEngine, threading.Event, threading.Event]:
    started, release = threading.Event(), threading.Event()

    def up() -> None:
        started.set()
        assert release.wait(30), "the test never ended the up"

    return FakeEngine(during_up=up), started, release


def test_a_loop_that_stops_iterating_fails_healthz_while_an_up_runs() -> None:
    engine, started, release = _long_up()
    h = make_daemon(settings=SETTINGS, engine=engine, engine_thread=True)
    try:
        h.step()  # starts the up on the engine's thread
        assert started.wait(10)
        h.clock.now += 1.0 + 10.0 + 0.5  # no iteration for its sleep plus the allowance

        ok, text = h.daemon.live()
    finally:
        release.set()
        h.daemon.request_stop()

    assert not ok
    assert "no progress" in text


def test_a_loop_that_iterates_during_a_long_up_stays_live() -> None:
    engine, started, release = _long_up()
    h = make_daemon(settings=SETTINGS, engine=engine, engine_thread=True)
    seen: list[bool] = []
    try:
        h.step()
        assert started.wait(10)
        for _ in range(30):  # far past the allowance, every step within it
            h.clock.now += 5.0
            h.step()
            seen.append(h.daemon.live()[0])
    finally:
        release.set()
    assert_eventually(lambda: h.step().last_outcome is not None, message="the up never ended")

    assert all(seen)
    assert len(engine.ups) == 1
