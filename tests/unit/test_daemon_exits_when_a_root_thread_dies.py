"""Supervision, as kopf does it: any root thread of the daemon (a watch, the elector, the
HTTP server) that ends while the daemon is not stopping ends the daemon, non-zero, with
its engine interrupted; a requested stop is not a death."""

from __future__ import annotations

import threading

import pytest

from twc.cli.run import Supervisor


class Loop:
    """A reconcile loop stand-in: runs until stopped, then returns its exit code."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.code = 0
        self.fatal: list[str] = []

    def run(self) -> int:
        self.stop.wait(60)
        return self.code

    def on_fatal(self, reason: str) -> None:
        self.fatal.append(reason)
        self.code = 1
        self.stop.set()


def _supervisor(loop: Loop) -> Supervisor:
    return Supervisor(
        stack="unit", stopping=loop.stop.is_set, on_fatal=loop.on_fatal, grace=10, poll=0.02
    )


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_watch_thread_that_dies_ends_the_daemon_non_zero() -> None:
    loop = Loop()
    seen = threading.Event()

    def broken_watch() -> None:
        seen.wait(60)
        raise RuntimeError("a bug outside the watch's retry loop")

    threading.Thread(target=broken_watch, name="twc-watch-queues", daemon=True).start()
    supervisor = _supervisor(loop)

    def run() -> int:
        assert supervisor.ended() is None  # running: seen alive
        seen.set()
        return loop.run()

    assert supervisor.run(run) == 1
    assert loop.fatal == ["the daemon's thread twc-watch-queues ended"]


def test_a_thread_that_ends_during_a_requested_stop_is_no_failure() -> None:
    loop = Loop()
    release = threading.Event()

    def watch() -> None:
        release.wait(60)

    thread = threading.Thread(target=watch, name="twc-watch-queues", daemon=True)
    thread.start()

    def run() -> int:
        loop.stop.set()  # SIGTERM: the loop stops its sources, then returns
        release.set()
        thread.join()
        return 0

    assert _supervisor(loop).run(run) == 0
    assert loop.fatal == []


def test_a_crashing_loop_ends_the_daemon_non_zero() -> None:
    loop = Loop()

    def crash() -> int:
        raise RuntimeError("the loop itself died")

    assert _supervisor(loop).run(crash) == 1


def test_other_threads_are_not_roots() -> None:
    loop = Loop()
    threading.Thread(target=lambda: None, name="Thread-worker").start()  # ends at once

    def run() -> int:
        supervisor_saw = supervisor.ended()
        loop.stop.set()
        return 0 if supervisor_saw is None else 2

    supervisor = _supervisor(loop)
    assert supervisor.run(run) == 0


def test_another_stacks_engine_thread_that_ends_is_no_failure() -> None:
    loop = Loop()
    release = threading.Event()
    leftover = threading.Thread(target=release.wait, name="twc-engine-other_0", daemon=True)
    leftover.start()
    supervisor = _supervisor(loop)

    def run() -> int:
        assert supervisor.ended() is None
        release.set()
        leftover.join(10)
        assert supervisor.ended() is None  # another daemon's thread: not watched
        loop.stop.set()
        return loop.run()

    assert supervisor.run(run) == 0
    assert loop.fatal == []
