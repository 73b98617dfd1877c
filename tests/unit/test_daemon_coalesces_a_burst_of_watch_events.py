"""A `kubectl apply` of several objects is a burst of watch events: one iteration, one up."""

from __future__ import annotations

from tests.unit._daemon_fakes import make_daemon, program_queues, queue_object
from twc.reconcile.settings import DaemonSettings


def test_a_burst_of_watch_events_is_applied_by_one_up() -> None:
    h = make_daemon(settings=DaemonSettings(reconcile_interval=30))
    burst = [queue_object("a"), queue_object("b"), queue_object("c")]
    arrived: list[str] = []

    def watch() -> None:
        # The first interval sleep is woken by the first object; the others follow
        # within the quiet period, one per sleep, as watch events would.
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
    assert h.clock.slept[1:4] == [0.3, 0.3, 0.3]
