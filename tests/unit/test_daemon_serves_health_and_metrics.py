"""``/healthz``, ``/readyz`` and ``/metrics`` over HTTP, from the loop's own state: a
loop that makes no progress when it should fails ``/healthz``; metric readers reject
unknown names."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.unit._daemon_fakes import Harness, make_daemon, queue_object
from twc.reconcile.health import DaemonMetrics, HealthServer
from twc.reconcile.settings import DaemonSettings


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def served() -> Iterator[tuple[Harness, int]]:
    h = make_daemon()
    server = HealthServer(
        h.metrics,
        port=0,
        live=h.daemon.live,
        ready=h.daemon.ready,
        status=h.daemon.status,
        host="127.0.0.1",
    ).start()
    yield h, server.port
    server.stop()


def test_readyz_turns_ready_after_the_first_successful_reconcile(
    served: tuple[Harness, int],
) -> None:
    h, port = served
    assert _get(port, "/healthz")[0] == 200
    code, text = _get(port, "/readyz")
    assert (code, text.strip()) == (503, "no successful reconcile yet")

    h.step()
    h.daemon.state = h.state

    assert _get(port, "/readyz")[0] == 200


def test_metrics_expose_reconciles_engine_runs_and_replicas(served: tuple[Harness, int]) -> None:
    h, port = served
    h.step()
    h.step()

    code, text = _get(port, "/metrics")

    assert code == 200
    assert 'twc_reconcile_total{result="success",stack="unit"} 2.0' in text
    assert 'twc_engine_runs_total{mode="full",operation="up",stack="unit"} 1.0' in text
    assert 'twc_worker_desired_replicas{stack="unit",worker="team/payments"} 1.0' in text
    assert "twc_last_success_timestamp_seconds" in text
    assert _get(port, "/nope")[0] == 404


def test_a_crashed_probe_reports_unhealthy_instead_of_hanging() -> None:
    def broken() -> tuple[bool, str]:
        raise RuntimeError("boom")

    server = HealthServer(
        DaemonMetrics("s"), port=0, live=broken, ready=broken, host="127.0.0.1"
    ).start()
    try:
        code, text = _get(server.port, "/healthz")
    finally:
        server.stop()

    assert code == 503
    assert "boom" in text


def test_gauges_of_removed_workers_and_queues_disappear() -> None:
    metrics = DaemonMetrics("s")
    queues = {("default", "qa"): 5, ("default", "qb"): 7}
    metrics.publish(worker_desired_replicas={"ns/a": 2, "ns/b": 1}, task_queue_backlog=queues)
    metrics.publish(task_queue_backlog_sampled_at_seconds=dict.fromkeys(queues, 100.0))

    metrics.publish(worker_desired_replicas={"ns/a": 3}, task_queue_backlog={("default", "qa"): 1})
    metrics.publish(task_queue_backlog_sampled_at_seconds={("default", "qa"): 130.5})

    assert metrics.value("twc_worker_desired_replicas", worker="ns/b") is None
    assert metrics.value("twc_worker_desired_replicas", worker="ns/a") == 3
    assert metrics.value("twc_task_queue_backlog", task_queue="qb") is None
    assert metrics.value("twc_task_queue_backlog", task_queue="qa") == 1
    assert metrics.value("twc_task_queue_backlog_sampled_at_seconds", task_queue="qb") is None
    assert metrics.value("twc_task_queue_backlog_sampled_at_seconds", task_queue="qa") == 130.5


def test_status_names_invalid_queue_objects_and_each_workers_replicas(
    served: tuple[Harness, int],
) -> None:
    h, port = served
    h.queues.replace([queue_object("bad.name"), queue_object("orders", partitions=2)])
    h.step()
    h.daemon.state = h.state

    code, text = _get(port, "/status")

    assert code == 200
    status = json.loads(text)
    assert list(status["invalidQueueObjects"]) == ["team/bad.name"]
    assert "DNS-1123" in status["invalidQueueObjects"]["team/bad.name"]
    assert status["workers"]["team/worker-orders"] == {"desired": 2, "current": None}
    assert status["lastOutcome"]["kind"] == "success"
    assert h.state is not None
    assert h.state.applied is not None
    assert status["appliedHash"] == h.state.applied.fleet


def test_reading_a_metric_by_an_unknown_name_fails_instead_of_reading_as_no_sample() -> None:
    metrics = DaemonMetrics("s")

    with pytest.raises(KeyError, match="twc_engine_run_total"):
        metrics.value("twc_engine_run_total")  # a typo of twc_engine_runs_total
    with pytest.raises(KeyError):
        metrics.count("twc_leader")  # a gauge is no counter
    # Known names: no sample yet is None for value(), zero for a counter's count().
    assert metrics.value("twc_engine_runs_total", operation="up") is None
    assert metrics.count("twc_engine_runs_total", operation="up") == 0
    metrics.engine_runs.labels("s", "up", "full").inc()
    assert metrics.count("twc_engine_runs_total", operation="up") == 1
    assert metrics.value("twc_reconcile_duration_seconds_count") is None
    assert metrics.value("twc_engine_in_progress") == 0  # set from the start


def test_healthz_fails_once_the_loop_made_no_progress_past_its_allowance() -> None:
    settings = DaemonSettings(reconcile_interval=1.0, liveness_timeout=10.0)
    h = make_daemon(settings=settings)
    h.step()
    assert h.daemon.live() == (True, "ok")

    h.clock.now += 11.0  # asleep for its interval plus the allowance: still due
    assert h.daemon.live()[0]
    h.clock.now += 0.5  # an iteration stuck (a hung API server): overdue
    ok, text = h.daemon.live()

    assert not ok
    assert "no progress for 12 s" in text


def test_a_standby_is_live_while_its_election_rounds_go_on() -> None:
    class Standby:
        def __init__(self) -> None:
            self.rounds = 0.0

        def is_leader(self) -> bool:
            return False

        def last_round(self) -> float | None:
            return self.rounds

    gate = Standby()
    h = make_daemon(settings=DaemonSettings(liveness_timeout=10.0), leader=gate)
    live: list[bool] = []

    def on_sleep() -> None:  # one election round's wait (retry period 2 s) each
        if len(h.clock.slept) <= 20:
            gate.rounds = h.clock.now  # rounds go on; then the elector stops completing them
        live.append(h.daemon.live()[0])
        if len(h.clock.slept) == 30:
            h.daemon.request_stop()

    h.clock.on_sleep = on_sleep
    assert h.daemon.run() == 0

    assert all(live[:21])
    assert not live[-1]


def test_a_probe_whose_caller_gave_up_is_logged_not_a_traceback(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A busy daemon answered a probe after its caller's timeout: the write met a closed
    # connection, and the server printed a BrokenPipeError traceback into the log.
    asked, answer = threading.Event(), threading.Event()

    def slow() -> tuple[bool, str]:
        asked.set()
        assert answer.wait(5), "the test never let the probe answer"
        return True, "ok"

    server = HealthServer(
        DaemonMetrics("s"), port=0, live=slow, ready=slow, host="127.0.0.1"
    ).start()
    try:
        with caplog.at_level(logging.INFO, logger="twc.reconcile.health"):
            client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            client.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert asked.wait(5), "the probe was never asked"
            # The caller gives up: its connection is reset, not closed gracefully.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            answer.set()
            deadline = time.monotonic() + 5
            while not any("went away" in r.getMessage() for r in caplog.records):
                assert time.monotonic() < deadline, "the late answer was never logged"
                time.sleep(0.01)
        assert "Traceback" not in capfd.readouterr().err
        answer.set()
        assert _get(server.port, "/healthz") == (200, "ok\n"), "the server stopped serving"
    finally:
        answer.set()
        server.stop()


def test_status_says_how_long_the_last_iteration_took_and_when_it_ended(
    served: tuple[Harness, int],
) -> None:
    h, port = served
    assert json.loads(_get(port, "/status")[1])["lastIteration"] is None
    h.step()
    h.clock.now += 7.0
    h.step()

    status = json.loads(_get(port, "/status")[1])
    last = status["lastIteration"]

    assert [it["number"] for it in status["recentIterations"]] == [1, 2]
    assert status["recentIterations"][-1] == last
    assert last["number"] == 2
    assert last["ok"] is True
    assert last["seconds"] == 0.0  # the fake clock did not move during the iteration
    assert last["cpuSeconds"] >= 0.0
    assert last["endedAt"] == 1_700_000_000.0 + h.clock.now


def test_publishing_a_gauge_that_does_not_exist_fails() -> None:
    with pytest.raises(ValueError, match="worker_desired_replica"):
        DaemonMetrics("s").publish(worker_desired_replica={"ns/a": 1})
