"""A `kubectl apply` of several objects is a burst of watch events: one up once the burst
is quiet, while each new Queue's worker is applied early as it arrives."""

from __future__ import annotations

import pytest

from tests.unit._daemon_fakes import FakeApplier, make_daemon, program_queues, queue_object
from twc.reconcile.daemon import BURST_LIMIT, QUIET
from twc.reconcile.settings import DaemonSettings


def test_a_burst_of_watch_events_is_applied_by_one_up() -> None:
    h = make_daemon(settings=DaemonSettings(reconcile_interval=30))
    burst = [queue_object("a"), queue_object("b"), queue_object("c")]
    arrived: list[str] = []

    def watch() -> None:
        # The first interval sleep is woken by the first object; the others follow one
        # per sleep, each within the quiet period, as watch events would.
        if len(arrived) < len(burst) and len(h.engine.ups) == 1:
            arrived.append(burst[len(arrived)]["metadata"]["name"])
            h.queues.replace(burst[: len(arrived)])
        elif len(h.engine.ups) >= 2:
            h.daemon.request_stop()

    h.clock.on_sleep = watch

    assert h.daemon.run() == 0

    assert len(h.engine.ups) == 2  # the initial one, then one for the whole burst
    assert program_queues(h.engine.last_inputs) == ["a", "b", "c"]
    assert h.clock.slept[:1] == [30]


def test_a_queue_arriving_during_a_long_burst_is_applied_early_within_the_quiet_period() -> None:
    applier = FakeApplier()
    h = make_daemon(settings=DaemonSettings(reconcile_interval=30), early=applier)
    start = h.clock.now
    moments: dict[str, float] = {}
    version = 0

    def watch() -> None:
        nonlocal version
        now, names = h.clock.now, {o["metadata"]["name"] for o in applier.applied}
        if "worker-b" in names:
            moments.setdefault("b applied early", now)
        if len(h.engine.ups) >= 2 or now - start > 10 * BURST_LIMIT:
            h.daemon.request_stop()
            return
        # Object "a" keeps changing, so the burst of events never goes quiet by itself.
        version += 1
        a = queue_object("a")
        a["metadata"]["resourceVersion"] = str(version)
        late = [queue_object("b")] if now - start >= BURST_LIMIT / 2 else []
        if late:
            moments.setdefault("b arrived", now)
        h.queues.replace([a, *late])
        h.clock.now += 0.05  # the events come 50 ms apart

    h.clock.on_sleep = watch

    assert h.daemon.run() == 0

    assert moments["b applied early"] - moments["b arrived"] <= QUIET + 1e-9
    assert len(h.engine.ups) == 2  # the initial one, then one once the burst's limit passed
    assert program_queues(h.engine.last_inputs) == ["a", "b"]


@pytest.mark.parametrize(
    ("took", "worked", "rest"),
    [(0.0, 0.0, 0.0), (0.05, 0.05, 0.05), (1.0, 1.0, QUIET), (0.1, 0.01, 0.01)],
)
def test_a_woken_iteration_rests_as_long_as_the_last_one_worked_at_most_the_quiet_period(
    took: float, worked: float, rest: float
) -> None:
    def slow_read(live: dict[str, int]) -> dict[str, int]:
        h.clock.now += took  # the iteration's read of the live replicas takes this long
        h.clock.cpu += worked  # of which the loop's thread works this long (it waits the remainder)
        return dict(live)

    h = make_daemon(settings=DaemonSettings(reconcile_interval=30), read_replicas=slow_read)
    iterations: list[float] = []  # each woken iteration's duration, as /status reports it

    def wake() -> None:
        seconds = h.daemon.iterations[-1]["seconds"] if h.daemon.iterations else None
        if len(iterations) >= 3:
            h.daemon.request_stop()
        elif seconds is not None and not h.daemon.wakeup.is_set():
            iterations.append(seconds)
            h.daemon.wakeup.set()  # a watch event during the interval's sleep

    h.clock.on_sleep = wake

    assert h.daemon.run() == 0

    rests = [h.clock.slept[i + 1] for i, s in enumerate(h.clock.slept[:-1]) if s == 30]
    assert iterations == [pytest.approx(took)] * 3
    assert rests == [pytest.approx(rest)] * 3
