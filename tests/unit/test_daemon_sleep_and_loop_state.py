"""The loop's sleep ends the moment it is woken; its state moves by pure transitions."""

from __future__ import annotations

import threading
import time

import pytest

from twc.reconcile.autoscale import ScalingState
from twc.reconcile.outcome import Outcome, PermanentError, outcome_of
from twc.reconcile.settings import BackoffSettings, DaemonSettings
from twc.reconcile.state import LoopState, desired_state, sleep

SETTINGS = DaemonSettings(reconcile_interval=30, refresh_interval=600, resync_interval=300)
APPLIED = desired_state({"a": {"image": "w:1"}})
NEXT = desired_state({"a": {"image": "w:2"}})


class RecordingEvent(threading.Event):
    """An event whose wait returns at once, recording the timeout it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.waited: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(timeout)
        return self.is_set()


def test_sleep_returns_true_at_once_when_already_woken() -> None:
    wakeup = threading.Event()
    wakeup.set()
    started = time.monotonic()

    assert sleep(3600, wakeup) is True
    assert time.monotonic() - started < 5


def test_sleep_is_interrupted_by_another_thread() -> None:
    wakeup = threading.Event()
    waker = threading.Thread(target=wakeup.set)
    started = time.monotonic()

    waker.start()
    woken = sleep(3600, wakeup)
    waker.join()

    assert woken is True
    assert time.monotonic() - started < 5


def test_sleep_times_out_with_false_and_waits_the_delay() -> None:
    wakeup = RecordingEvent()

    assert sleep(12.5, wakeup) is False
    assert wakeup.waited == [12.5]


@pytest.mark.parametrize("delay", [0, -1])
def test_sleep_without_delay_only_checks_the_event(delay: float) -> None:
    wakeup = RecordingEvent()

    assert sleep(delay, wakeup) is False
    assert wakeup.waited == []


def test_sleep_does_not_clear_the_event() -> None:
    wakeup = threading.Event()
    wakeup.set()

    sleep(1, wakeup)

    assert wakeup.is_set()


def test_success_records_what_was_applied_and_resets_failures() -> None:
    state = LoopState(started_at=0, consecutive_failures=3)

    after = state.finished(Outcome.success(), now=10, attempted=APPLIED)

    assert (after.iteration, after.consecutive_failures) == (1, 0)
    assert after.applied == APPLIED
    assert after.last_success_at == 10
    assert state.applied is None  # the old state is untouched


def test_a_skip_keeps_the_applied_hashes() -> None:
    state = LoopState(started_at=0, applied=APPLIED)

    after = state.finished(Outcome.success(), now=10)

    assert after.applied == APPLIED


def test_temporary_failure_counts_up_and_sleeps_its_backoff() -> None:
    state = LoopState(started_at=0, applied=APPLIED, consecutive_failures=2)
    outcome = outcome_of(
        RuntimeError("x"),
        attempt=state.next_attempt,
        settings=BackoffSettings(base=1, max_delay=300),
    )

    after = state.finished(outcome, now=10, attempted=NEXT)

    assert after.consecutive_failures == 3
    assert after.blocked is None
    assert after.next_delay(now=10, settings=SETTINGS) == 4.0
    assert after.next_attempt == 4


def test_a_failed_up_forgets_what_was_applied_so_the_next_up_is_full() -> None:
    # The failed up may have applied part of NEXT: returning to APPLIED is a change too.
    state = LoopState(started_at=0, applied=APPLIED)
    outcome = outcome_of(RuntimeError("x"), attempt=1, settings=BackoffSettings())

    after = state.finished(outcome, now=10, attempted=NEXT)

    assert after.applied is None


def test_a_failure_before_any_up_keeps_what_was_applied() -> None:
    state = LoopState(started_at=0, applied=APPLIED)
    outcome = outcome_of(RuntimeError("x"), attempt=1, settings=BackoffSettings())

    after = state.finished(outcome, now=10)

    assert after.applied == APPLIED


def test_permanent_failure_blocks_the_hash_until_resync() -> None:
    state = LoopState(started_at=0, applied=APPLIED)
    outcome = outcome_of(PermanentError("bad"), attempt=1, settings=SETTINGS.backoff)

    after = state.finished(outcome, now=100, attempted=NEXT)

    assert after.blocked_hash(now=399, settings=SETTINGS) == NEXT.fleet
    assert after.blocked_hash(now=400, settings=SETTINGS) is None
    assert after.next_delay(now=100, settings=SETTINGS) == 30
    assert after.finished(Outcome.success(), now=500, attempted=NEXT).blocked is None


def test_next_delay_is_shortened_for_a_due_refresh() -> None:
    state = LoopState(started_at=0).finished(Outcome.success(), now=590)

    assert state.next_delay(now=590, settings=SETTINGS) == 10
    assert 599 < state.refresh_due_at(SETTINGS) <= 600
    refreshed = state.refreshed(now=600)
    assert refreshed.refresh_due_at(SETTINGS) > 1199
    assert refreshed.next_delay(now=600, settings=SETTINGS) == 30


def test_a_refresh_already_due_never_makes_the_loop_spin() -> None:
    # Due and not started means something holds it (the engine runs, the last step
    # failed); a 0 s sleep spun the loop for as long as the engine ran.
    assert LoopState(started_at=0).next_delay(now=5000, settings=SETTINGS) == 30
    failed = LoopState(started_at=0).finished(
        outcome_of(PermanentError("bad"), attempt=1, settings=SETTINGS.backoff), now=5000
    )
    assert failed.next_delay(now=5000, settings=SETTINGS) == 30


def test_next_delay_is_never_negative() -> None:
    assert LoopState(started_at=0).next_delay(now=5000, settings=SETTINGS, sample_due_in=-3) == 0


def test_scaling_states_are_replaced_not_shared() -> None:
    states = {"a": ScalingState(started_at=1)}
    state = LoopState(started_at=0).with_scaling(states)
    states["b"] = ScalingState()

    assert set(state.scaling) == {"a"}
    with pytest.raises(TypeError):
        state.scaling["c"] = ScalingState()  # type: ignore[index]
