"""A wake that changed nothing the loop reads is slept through.

A sharded daemon's fleet-file edit wakes every shard's loop; at 20 shards the 19 whose
part of the file stayed the same each planned and reported twice for it (the wake's
answer and the iteration after it), and the shard a new Queue was in waited for them.
A wake that did change something, or an engine run that ended, is answered as before.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from tests.unit._daemon_fakes import FakeEngine, Harness, make_daemon, queue_object
from twc.spec import load_fleet


def _steady(h: Harness) -> None:
    # The daemon's fleet source hands out the same parse until the file changes.
    parsed = load_fleet(h.fleet, "fleet.yaml")
    sources = h.daemon.observer.sources
    h.daemon.observer.sources = dataclasses.replace(sources, fleet=lambda: parsed)


def test_wakes_that_changed_nothing_run_no_iteration_and_a_change_does() -> None:
    h = make_daemon()
    _steady(h)
    interval = h.daemon.settings.reconcile_interval
    quiet: list[int] = []
    changed: list[int] = []

    def on_sleep() -> None:
        if h.clock.slept[-1] != interval:
            return  # the settle after a real wake: its quiet moments pass
        if len(quiet) < 3:
            quiet.append(h.daemon.state.iteration if h.daemon.state else -1)
            h.daemon.wakeup.set()  # e.g. another shard's fleet-file edit
        elif not changed:
            changed.append(1)
            h.queues.replace([queue_object("orders")])  # a new Queue: sets the wake too
        else:
            h.daemon.request_stop()

    h.clock.on_sleep = on_sleep
    assert h.daemon.run() == 0

    assert quiet == [1, 1, 1], "a wake that changed nothing ran an iteration"
    assert h.daemon.state is not None
    assert h.daemon.state.iteration == 2  # the first, then the one for the Queue
    assert len(h.engine.ups) == 2
    assert h.engine.last_program().workers.keys() >= {"team/worker-orders"}


def test_an_engine_run_that_ended_is_folded_in_at_its_wake() -> None:
    entered, release = threading.Event(), threading.Event()

    def held() -> None:
        entered.set()
        assert release.wait(10), "the test never let the up finish"

    h = make_daemon(engine=FakeEngine(during_up=held), background=True)
    _steady(h)
    interval = h.daemon.settings.reconcile_interval
    applied_at_wake: list[bool] = []

    def on_sleep() -> None:
        if h.clock.slept[-1] != interval:
            return
        if not applied_at_wake:
            assert entered.wait(10)
            applied_at_wake.append(False)
            release.set()
            deadline = time.monotonic() + 10
            while not h.daemon.wakeup.is_set():  # the engine's thread wakes the loop
                assert time.monotonic() < deadline, "the ended up never woke the loop"
                time.sleep(0.01)
        else:
            state = h.daemon.state
            applied_at_wake.append(state is not None and state.applied is not None)
            h.daemon.request_stop()

    h.clock.on_sleep = on_sleep
    assert h.daemon.run() == 0

    assert applied_at_wake == [False, True], "the ended up was not folded in at its wake"
    assert len(h.engine.ups) == 1
