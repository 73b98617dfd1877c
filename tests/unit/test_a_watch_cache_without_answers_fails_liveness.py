"""A watch cache the API server stopped answering fails ``/healthz``: an iteration that
reads caches makes no API call, so the loop's own progress cannot show a hung server.

Answers are a list, a watch event or bookmark, a watch ending on the server's timeout,
or a client error; a timeout is none."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from twc.kube.caches import DeploymentCache
from twc.loop.freshness import CacheFreshness

pytestmark = pytest.mark.unit


@dataclass
class FakeCache:
    kind: str
    quiet_window: float
    answered: float
    failed: str | None = None

    def last_answer(self) -> float:
        return self.answered

    def failure(self) -> str | None:
        return self.failed


def _value(registry: CollectorRegistry, name: str, kind: str) -> float:
    found = registry.get_sample_value(name, {"stack": "s", "kind": kind})
    assert found is not None, f"{name}{{kind={kind}}} missing"
    return found


def test_caches_answered_within_their_window_and_the_allowance_are_live() -> None:
    now = [1000.0]
    caches = [FakeCache("deployments", 10, 986.0), FakeCache("secrets", 10, 999.0)]
    freshness = CacheFreshness("s", caches, allowance=5, clock=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(freshness)

    assert freshness.check() == (True, "ok")
    assert _value(registry, "twc_watch_cache_stale", "deployments") == 0
    assert _value(registry, "twc_watch_cache_age_seconds", "deployments") == 14


def test_a_cache_silent_past_its_window_and_the_allowance_fails_healthz_naming_it() -> None:
    now = [1000.0]
    silent = FakeCache("deployments", 10, 984.0, failed="ReadTimeoutError")
    freshness = CacheFreshness(
        "s", [silent, FakeCache("secrets", 10, 999.0)], allowance=5, clock=lambda: now[0]
    )
    registry = CollectorRegistry()
    registry.register(freshness)

    ok, why = freshness.check()
    assert not ok
    assert "deployments watch cache" in why
    assert "16 s" in why
    assert "ReadTimeoutError" in why
    assert "secrets" not in why
    assert _value(registry, "twc_watch_cache_stale", "deployments") == 1
    assert _value(registry, "twc_watch_cache_stale", "secrets") == 0

    silent.answered = 999.5  # the server answers again
    assert freshness.check() == (True, "ok")
    assert _value(registry, "twc_watch_cache_stale", "deployments") == 0


def test_a_hanging_request_is_named_as_one() -> None:
    freshness = CacheFreshness(
        "s", [FakeCache("secrets", 60, 0.0)], allowance=60, clock=lambda: 500.0
    )
    ok, why = freshness.check()
    assert not ok
    assert "its request hangs" in why


def test_the_loops_own_liveness_comes_first() -> None:
    freshness = CacheFreshness(
        "s", [FakeCache("deployments", 10, 0.0)], allowance=5, clock=lambda: 100.0
    )
    assert freshness.probe(lambda: (False, "the loop is stuck"))() == (False, "the loop is stuck")
    ok, why = freshness.probe(lambda: (True, "ok"))()
    assert not ok
    assert "deployments" in why


class _Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"({status})")
        self.status = status
        self.reason = "Forbidden"


@dataclass
class _Response:
    data: bytes


class _Script:
    """The API server over a fake clock: one good list, a watch that hears a bookmark and
    ends on its timeout, a watch that times out, a list that times out, a denied list."""

    def __init__(self) -> None:
        self.now = 100.0
        self.lists = 0
        self.streams = 0
        self.seen: dict[str, float] = {}
        self.cache: DeploymentCache | None = None
        self.done = threading.Event()

    def clock(self) -> float:
        return self.now

    def answered(self) -> float:
        assert self.cache is not None
        return self.cache.last_answer()

    def list_deployments(self, **kwargs: Any) -> _Response:
        self.lists += 1
        if self.lists == 1:
            body = {"metadata": {"resourceVersion": "1"}, "items": []}
            return _Response(json.dumps(body).encode())
        if self.lists == 2:
            self.seen["before the timed-out list"] = self.answered()
            self.now = 180.0
            raise TimeoutError("read timed out")
        self.seen["before the denied list"] = self.answered()
        self.now = 190.0
        self.done.set()
        raise _Status(403)

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.streams += 1
        if self.streams == 1:
            self.now = 150.0
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "2"}}}
            self.seen["after the bookmark"] = self.answered()
            self.now = 160.0
            return
        self.now = 170.0
        raise TimeoutError("read timed out")


def test_lists_events_a_watch_ending_and_a_denial_are_answers_a_timeout_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = _Script()

    class FakeWatch:
        def stream(self, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
            return script.stream(*args, **kwargs)

        def stop(self) -> None:
            pass

    monkeypatch.setattr("kubernetes.watch.Watch", FakeWatch)
    kube: Any = type(
        "Kube",
        (),
        {
            "apps": type(
                "Apps", (), {"list_deployment_for_all_namespaces": script.list_deployments}
            )()
        },
    )()
    cache = DeploymentCache(kube, resync_interval=300, watch_timeout=10)
    cache.watcher._clock = script.clock  # the watcher's clock, faked
    cache.watcher._retry_delay = 0.01
    script.cache = cache
    assert cache.quiet_window == 10

    cache.start()
    try:
        assert script.done.wait(10), "the watcher never reached the denied list"
        deadline = time.monotonic() + 10
        while cache.last_answer() != 190.0 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        cache.stop()

    assert script.seen["after the bookmark"] == 150.0
    # The watch ended on its own timeout at 160; the watch timing out at 170 is no answer.
    assert script.seen["before the timed-out list"] == 160.0
    # Nor is the list timing out at 180.
    assert script.seen["before the denied list"] == 160.0
    # The denial (190) is the server answering.
    assert cache.last_answer() == 190.0
    assert cache.failure() is not None
