"""A failing step becomes an outcome with backoff; the loop itself never dies."""

from __future__ import annotations

from pulumi.automation import CommandError, ConcurrentUpdateError
from pulumi.automation._cmd import CommandResult

from tests.unit._daemon_fakes import FakeEngine, fleet_data, make_daemon
from twc.reconcile.outcome import OutcomeKind, PermanentError
from twc.reconcile.settings import BackoffSettings, DaemonSettings

SETTINGS = DaemonSettings(
    reconcile_interval=30,
    backoff=BackoffSettings(base=2, max_delay=60, concurrent_update_delay=7),
)


def test_failed_ups_back_off_exponentially_then_the_interval_resumes() -> None:
    engine = FakeEngine(
        failures=[
            CommandError(CommandResult("", "boom", 1)),
            CommandError(CommandResult("", "boom again", 1)),
        ]
    )
    h = make_daemon(settings=SETTINGS, engine=engine)
    sleeps_before_stop = 3

    def stop_after_three() -> None:
        if len(h.clock.slept) >= sleeps_before_stop:
            h.daemon.request_stop()

    h.clock.on_sleep = stop_after_three

    code = h.daemon.run()

    assert code == 0
    assert len(engine.ups) == 3  # two failures, then the retry that succeeded
    assert h.clock.slept == [2, 4, 30]
    assert h.metrics.value("twc_reconcile_total", result="temporary") == 2
    assert h.metrics.value("twc_reconcile_errors_total", reason="Unexpected") == 2
    assert h.metrics.value("twc_reconcile_total", result="success") == 1


def test_a_locked_stack_waits_the_fixed_concurrent_update_delay() -> None:
    engine = FakeEngine(
        failures=[
            ConcurrentUpdateError(
                CommandResult("", "the stack is currently locked by 1 lock(s)", 255)
            )
        ]
    )
    h = make_daemon(settings=SETTINGS, engine=engine)

    state = h.step()

    assert state.last_outcome is not None
    assert state.last_outcome.kind is OutcomeKind.TEMPORARY
    assert state.next_delay(now=h.clock.now, settings=SETTINGS) == 7
    assert h.metrics.value("twc_reconcile_errors_total", reason="ConcurrentUpdate") == 1


def test_a_program_refusal_is_not_retried_until_the_desired_state_changes() -> None:
    fleet = fleet_data()
    engine = FakeEngine(failures=[PermanentError("invalid fleet; nothing was changed")])
    h = make_daemon(fleet, settings=SETTINGS, engine=engine)

    state = h.step()
    assert state.last_outcome is not None
    assert state.last_outcome.kind is OutcomeKind.PERMANENT
    for _ in range(3):
        h.clock.now += 30
        h.step()
    assert len(engine.ups) == 1

    fleet["workers"][0]["replicas"] = 2
    h.clock.now += 30
    state = h.step()

    assert len(engine.ups) == 2
    assert state.last_outcome is not None
    assert state.last_outcome.ok


def test_an_invalid_fleet_file_is_reported_without_an_engine_call_and_the_loop_goes_on() -> None:
    fleet = fleet_data()
    h = make_daemon(fleet, settings=SETTINGS)
    h.step()
    fleet["workers"][0]["name"] = "Not_A_DNS_Label"

    state = h.step()

    assert len(h.engine.ups) == 1
    assert state.last_outcome is not None
    assert state.last_outcome.kind is OutcomeKind.PERMANENT
    assert h.metrics.value("twc_reconcile_errors_total", reason="InvalidSpec") == 1

    fleet["workers"][0]["name"] = "fixed"
    state = h.step()
    assert state.last_outcome is not None
    assert state.last_outcome.ok
    assert len(h.engine.ups) == 2


def test_a_failed_backlog_sample_holds_that_workers_replicas_and_the_up_still_runs() -> None:
    from tests.unit._daemon_fakes import NS, autoscaled

    fleet = fleet_data(workers=[autoscaled("good", target=10), autoscaled("flaky", target=10)])
    h = make_daemon(fleet, backlogs={"good": 50, "flaky": ConnectionError("frontend down")})
    h.live.update({f"{NS}/good": 2, f"{NS}/flaky": 3})

    state = h.step()

    assert state.last_outcome is not None
    assert state.last_outcome.ok
    assert h.engine.last_inputs.replicas == {f"{NS}/good": 5, f"{NS}/flaky": 3}
    assert h.metrics.value("twc_backlog_sample_errors_total") == 1
