"""Errors become frozen outcomes with retry meaning; backoff grows, caps and jitters."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twc.errors import Reason, SpecError, SpecIssue, TwcConnectionError
from twc.reconcile.outcome import (
    Classification,
    FailureReason,
    Outcome,
    OutcomeKind,
    PermanentError,
    TemporaryError,
    backoff_delay,
    classify,
    outcome_of,
)
from twc.reconcile.settings import BackoffSettings

EXACT = BackoffSettings(base=1.0, max_delay=60.0)
TEMP, PERM = OutcomeKind.TEMPORARY, OutcomeKind.PERMANENT


class CommandError(Exception):
    """Stands in for Pulumi's automation CommandError (stderr in the message)."""


class ConcurrentUpdateError(CommandError):
    """Named like Pulumi's; matched by name, so no pulumi import is needed."""


class SpecErrorLookalike(Exception):
    def __init__(self) -> None:
        super().__init__("bad")
        self.issues = ("workers[0].image: required",)


class SpecError2(Exception):
    pass


SpecError2.__name__ = "SpecError"  # another package's SpecError, unrelated by type


def chained(outer: Exception, cause: Exception) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("error", "kind", "reason"),
    [
        (TemporaryError("later"), TEMP, FailureReason.TEMPORARY),
        (PermanentError("never"), PERM, FailureReason.PERMANENT),
        (ConcurrentUpdateError("locked"), TEMP, FailureReason.CONCURRENT_UPDATE),
        (SpecError([SpecIssue("f.yaml", "workers", "empty")]), PERM, FailureReason.INVALID_SPEC),
        (SpecErrorLookalike(), PERM, FailureReason.INVALID_SPEC),
        (SpecError2("x"), PERM, FailureReason.INVALID_SPEC),
        (TwcConnectionError(Reason.CONNECTION_NOT_FOUND, "x"), PERM, FailureReason.NOT_RETRYABLE),
        (
            TwcConnectionError(Reason.TEMPORAL_CLIENT_CREATION_FAILED, "x"),
            TEMP,
            FailureReason.CONNECTION,
        ),
        (ConnectionRefusedError(111, "refused"), TEMP, FailureReason.CONNECTION),
        (ConnectionResetError(), TEMP, FailureReason.CONNECTION),
        (TimeoutError(), TEMP, FailureReason.TIMEOUT),
        (RuntimeError("etcdserver: request timed out"), TEMP, FailureReason.TIMEOUT),
        (
            CommandError("dial tcp 127.0.0.1:6443: connect: connection refused"),
            TEMP,
            FailureReason.CONNECTION,
        ),
        (CommandError("context deadline exceeded"), TEMP, FailureReason.TIMEOUT),
        (
            CommandError("error: DeletionsHeld: 4 of 4 PodDisruptionBudget objects would be ..."),
            TEMP,
            FailureReason.DELETIONS_HELD,
        ),
        (
            chained(RuntimeError("wrapped"), ConnectionRefusedError()),
            TEMP,
            FailureReason.CONNECTION,
        ),
        (chained(RuntimeError("wrapped"), PermanentError()), PERM, FailureReason.PERMANENT),
        (RuntimeError("boom"), TEMP, FailureReason.UNEXPECTED),
        (KeyError("x"), TEMP, FailureReason.UNEXPECTED),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_classification(error: Exception, kind: OutcomeKind, reason: FailureReason) -> None:
    assert classify(error) == Classification(kind, reason, None)


def test_real_pulumi_concurrent_update_error_waits_the_lock_delay() -> None:
    from pulumi.automation._cmd import CommandResult
    from pulumi.automation.errors import ConcurrentUpdateError as PulumiConcurrentUpdate

    error = PulumiConcurrentUpdate(CommandResult("", "the stack is currently locked by", 255))
    settings = EXACT.model_copy(update={"concurrent_update_delay": 7.5})

    outcome = outcome_of(error, attempt=6, settings=settings)

    assert (outcome.kind, outcome.delay, outcome.reason) == (
        TEMP,
        7.5,
        FailureReason.CONCURRENT_UPDATE,
    )


def test_temporary_error_delay_is_taken_as_given() -> None:
    outcome = outcome_of(TemporaryError("later", delay=42.0), attempt=1, settings=EXACT)

    assert outcome == Outcome(TEMP, 42.0, 1, FailureReason.TEMPORARY, "later")


def test_temporary_error_without_delay_backs_off() -> None:
    outcome = outcome_of(TemporaryError("later"), attempt=4, settings=EXACT)

    assert outcome.delay == 8.0


def test_permanent_outcome_has_no_delay_and_keeps_the_exception() -> None:
    error = PermanentError("bad fleet")

    outcome = outcome_of(error, attempt=2, settings=EXACT)

    assert (outcome.kind, outcome.delay, outcome.message) == (PERM, None, "bad fleet")
    assert outcome.exception is error
    assert not outcome.ok


def test_success_outcome() -> None:
    outcome = outcome_of(None, attempt=3, settings=EXACT)

    assert outcome == Outcome.success()
    assert outcome.ok
    assert (outcome.delay, outcome.attempt, outcome.reason) == (None, 0, None)


def test_outcomes_are_frozen() -> None:
    outcome = outcome_of(RuntimeError("x"), attempt=1, settings=EXACT)

    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.delay = 0.0  # type: ignore[misc]


def test_an_injected_classifier_decides() -> None:
    def everything_permanent(exc: BaseException) -> Classification:
        return Classification(PERM, FailureReason.PERMANENT)

    outcome = outcome_of(
        ConnectionRefusedError(), attempt=1, settings=EXACT, classifier=everything_permanent
    )

    assert outcome.kind is PERM


def test_message_falls_back_to_the_class_name() -> None:
    assert outcome_of(KeyError(), attempt=1, settings=EXACT).message == "KeyError"


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [(1, 1.0), (2, 2.0), (3, 4.0), (6, 32.0), (7, 60.0), (50, 60.0), (10_000, 60.0)],
)
def test_exponential_backoff_is_capped(attempt: int, delay: float) -> None:
    assert backoff_delay(attempt, EXACT) == delay


@pytest.mark.parametrize(
    ("u", "delay"),
    [(0.0, 3.6), (0.5, 4.0), (1.0, 4.4)],
)
def test_jitter_spreads_the_delay_by_a_tenth_either_way(u: float, delay: float) -> None:
    assert backoff_delay(3, EXACT, lambda: u) == pytest.approx(delay)


def test_jitter_never_exceeds_the_cap() -> None:
    assert backoff_delay(100, EXACT, lambda: 1.0) == 60.0


def test_without_a_jitter_source_the_schedule_is_exact() -> None:
    assert backoff_delay(2, EXACT) == 2.0


@pytest.mark.parametrize(
    ("attempt", "jitter"), [(0, None), (1, lambda: 1.5)], ids=["attempt 0", "jitter out of range"]
)
def test_bad_backoff_inputs_are_rejected(attempt: int, jitter: object) -> None:
    settings = EXACT
    with pytest.raises(ValueError, match=r"attempt counts from 1|jitter source"):
        backoff_delay(attempt, settings, jitter)  # type: ignore[arg-type]


def test_negative_temporary_delay_is_rejected() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        TemporaryError("x", delay=-1)


@given(
    base=st.floats(0.01, 10),
    cap=st.floats(10, 1000),
    u=st.floats(0, 1),
    attempts=st.integers(1, 3000),
)
def test_backoff_is_bounded_and_monotone_without_jitter(
    base: float, cap: float, u: float, attempts: int
) -> None:
    settings = BackoffSettings(base=base, max_delay=cap)

    assert 0 <= backoff_delay(attempts, settings, lambda: u) <= cap
    assert backoff_delay(attempts, settings) <= backoff_delay(attempts + 1, settings)
