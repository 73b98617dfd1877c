"""A hash that failed permanently stays blocked across the iterations that skip it."""

from __future__ import annotations

from twc.reconcile.outcome import Outcome, PermanentError, outcome_of
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import LoopState, ReconcileAction, decide_reconcile, desired_state

SETTINGS = DaemonSettings(resync_interval=300)
BROKEN = desired_state({"a": {"image": "w:broken"}})


def test_a_blocked_hash_is_skipped_even_when_nothing_was_ever_applied() -> None:
    decision = decide_reconcile(None, BROKEN, target_threshold=3, blocked=BROKEN.fleet)

    assert decision.action is ReconcileAction.SKIP


def test_a_skipped_iteration_keeps_the_block_and_a_real_up_lifts_it() -> None:
    failed = outcome_of(PermanentError("bad"), attempt=1, settings=SETTINGS.backoff)
    state = LoopState(started_at=0).finished(failed, now=10, attempted=BROKEN)

    skipped = state.finished(Outcome.success(), now=40)

    assert skipped.blocked_hash(now=40, settings=SETTINGS) == BROKEN.fleet
    assert skipped.consecutive_failures == 0
    assert skipped.last_success_at == 40
    fixed = desired_state({"a": {"image": "w:fixed"}})
    applied = skipped.finished(Outcome.success(), now=70, attempted=fixed)
    assert applied.blocked is None
    assert applied.applied == fixed
