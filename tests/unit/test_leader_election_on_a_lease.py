"""Leader election on a Lease: one leader at a time, takeover on expiry or release, the
leader gone (and its engine stopped) before anyone else may take over, handover to a
manual run between steps, and the engine records that let a new holder break exactly
the locks of holders the Lease proves gone."""

from __future__ import annotations

import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit._daemon_fakes import make_daemon
from twc.engine.supervisor import (
    Control,
    GuardAction,
    GuardChannel,
    Stop,
    next_action,
    stop_reason,
)
from twc.kube.lease import (
    ENGINES_ANNOTATION,
    HANDOVER_ANNOTATION,
    HANDOVER_QUIET,
    EngineRecord,
    LeaseAction,
    LeaseElector,
    LeaseHooks,
    LeaseRecord,
    NotLeadingError,
    call_timeout,
    engine_records,
    lease_action,
)
from twc.reconcile.settings import (
    KILL_MARGIN,
    DaemonSettings,
    EngineSettings,
    LeaderElectionSettings,
)
from twc.timestamps import boottime

SETTINGS = LeaderElectionSettings(
    enabled=True, lease_duration=15, renew_deadline=10, retry_period=2
)


def _record(holder: str, renew: str = "t1", duration: float = 15) -> LeaseRecord:
    return LeaseRecord(
        holder=holder, duration=duration, renew_time=renew, acquire_time="t0", transitions=1
    )


@pytest.mark.parametrize(
    ("record", "observed_at", "now", "action"),
    [
        # No Lease: it may have been deleted under a live holder, so it is taken only
        # once absent for the lease duration, as an expired one.
        (None, None, 100.0, LeaseAction.WAIT),
        (None, 90.0, 104.9, LeaseAction.WAIT),
        (None, 90.0, 105.0, LeaseAction.ACQUIRE),
        (_record(""), 90.0, 100.0, LeaseAction.ACQUIRE),  # released
        (_record("me"), 90.0, 100.0, LeaseAction.RENEW),
        (_record("other"), None, 100.0, LeaseAction.WAIT),  # first sight: give it a term
        (_record("other"), 90.0, 104.9, LeaseAction.WAIT),
        (_record("other"), 90.0, 105.0, LeaseAction.ACQUIRE),  # unchanged for 15 s
        # The holder's own leaseDurationSeconds counts, not this candidate's setting:
        (_record("other", duration=60), 90.0, 105.0, LeaseAction.WAIT),
        (_record("other", duration=60), 90.0, 150.0, LeaseAction.ACQUIRE),
        (_record("other", duration=5), 90.0, 95.0, LeaseAction.ACQUIRE),
        (_record("other", duration=0), 90.0, 104.9, LeaseAction.WAIT),  # none: own setting
    ],
)
def test_lease_action(
    record: LeaseRecord | None, observed_at: float | None, now: float, action: LeaseAction
) -> None:
    assert (
        lease_action(record, identity="me", observed_at=observed_at, now=now, lease_duration=15)
        is action
    )


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


class FakeCoordination:
    """One Lease in memory, with resourceVersion conflicts like the API server; every
    call must carry its own timeout."""

    def __init__(self) -> None:
        # A Lease released by an earlier holder (an absent one is taken only after the
        # lease duration).
        self.lease: dict[str, Any] | None = {
            "metadata": {"name": "twc-s", "namespace": "ops", "resourceVersion": "0"},
            "spec": {"holderIdentity": ""},
        }
        self.version = 0
        self.api_client = self
        self.timeouts: list[Any] = []
        self.fail = False

    def sanitize_for_serialization(self, obj: Any) -> Any:
        return copy.deepcopy(obj)

    def _call(self, kwargs: dict[str, Any]) -> None:
        self.timeouts.append(kwargs.get("_request_timeout"))
        if self.fail:
            raise ApiError(503)

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        self._call(kwargs)
        if self.lease is None:
            raise ApiError(404)
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **kwargs: Any) -> None:
        self._call(kwargs)
        if self.lease is not None:
            raise ApiError(409)
        self._store(body)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any
    ) -> None:
        self._call(kwargs)
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409)
        self._store(body)

    def _store(self, body: dict[str, Any]) -> None:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.version)

    @property
    def holder(self) -> str:
        return str((self.lease or {}).get("spec", {}).get("holderIdentity", ""))

    @property
    def annotations(self) -> dict[str, str]:
        return dict((self.lease or {}).get("metadata", {}).get("annotations") or {})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Term:
    """What the engine guard's channel is told (``on_renewed``/``on_ended``)."""

    def __init__(self) -> None:
        self.until: float | None = None
        self.recorded: tuple[int, ...] = ()
        self.ended = 0

    def renewed(self, until: float, recorded: tuple[int, ...]) -> None:
        self.until, self.recorded = until, recorded

    def end(self) -> None:
        self.ended += 1


def _elector(
    api: FakeCoordination,
    identity: str,
    clock: Clock,
    *,
    term: Term | None = None,
    announced: list[int] | None = None,
    host: str = "pod-a",
    yields: bool = True,
    lost: list[bool] | None = None,
) -> LeaseElector:
    term = term or Term()
    return LeaseElector(
        api,
        name="twc-s",
        namespace="ops",
        identity=identity,
        settings=SETTINGS,
        hooks=LeaseHooks(
            on_renewed=term.renewed,
            on_lost=lambda: (lost if lost is not None else []).append(True),
            on_ended=term.end,
            announced=lambda: tuple(announced or ()),
            host=host,
            clock=clock,
        ),
        yields=yields,
    )


def _round(elector: LeaseElector) -> bool:
    return elector.round()


def test_only_one_candidate_leads_and_the_other_waits_while_it_renews() -> None:
    api, clock = FakeCoordination(), Clock()
    first, second = _elector(api, "a", clock), _elector(api, "b", clock)

    assert _round(first)
    for _ in range(20):
        clock.now += 2
        assert _round(first)
        assert not _round(second)

    assert first.is_leader()
    assert not second.is_leader()
    assert api.holder == "a"


def test_every_lease_call_carries_a_timeout_that_fits_a_round_into_the_renew_deadline() -> None:
    api, clock = FakeCoordination(), Clock()
    first = _elector(api, "a", clock)
    assert _round(first)
    clock.now += 2
    assert _round(first)
    first.stop(release=True)

    connect, read = call_timeout(SETTINGS)
    assert api.timeouts
    assert all(t == (connect, read) for t in api.timeouts), api.timeouts
    # A round is a read and a write: both time out with a retry period to spare.
    assert 2 * (connect + read) <= 2 * (SETTINGS.renew_deadline - SETTINGS.retry_period)
    assert 2 * read + SETTINGS.retry_period <= SETTINGS.renew_deadline


def test_a_standby_takes_over_once_the_leader_stops_renewing_for_the_lease_duration() -> None:
    api, clock = FakeCoordination(), Clock()
    first, second = _elector(api, "a", clock), _elector(api, "b", clock)
    assert _round(first)
    assert not _round(second)  # first sight of a's record

    clock.now += 14.9
    assert not _round(second)
    clock.now += 0.1
    assert _round(second)

    assert api.holder == "b"
    assert api.lease is not None
    assert api.lease["spec"]["leaseTransitions"] == 2


def test_a_standby_honours_the_lease_duration_the_holder_wrote() -> None:
    api, clock = FakeCoordination(), Clock()
    slow = LeaderElectionSettings(enabled=True, lease_duration=40, renew_deadline=30)
    first = LeaseElector(
        api,
        name="twc-s",
        namespace="ops",
        identity="a",
        settings=slow,
        hooks=LeaseHooks(clock=clock),
    )
    second = _elector(api, "b", clock)  # its own setting: 15 s
    assert _round(first)
    assert not _round(second)

    clock.now += 20  # past b's own 15 s, within a's 40 s
    assert not _round(second)
    clock.now += 20
    assert _round(second)


def test_a_released_lease_is_taken_at_the_next_round() -> None:
    api, clock = FakeCoordination(), Clock()
    first, second = _elector(api, "a", clock), _elector(api, "b", clock)
    assert _round(first)
    assert not _round(second)

    first.stop(release=True)
    clock.now += 2

    assert api.holder == ""
    assert _round(second)
    assert second.is_leader()


def test_a_leader_that_cannot_renew_stops_leading_at_the_renew_deadline_by_time_alone() -> None:
    api, clock = FakeCoordination(), Clock()
    lost: list[bool] = []
    term = Term()
    leader = _elector(api, "a", clock, term=term, lost=lost)
    assert _round(leader)
    assert term.until == SETTINGS.renew_deadline  # renewed at 0: the term ends at 10

    api.fail = True
    clock.now += 9.9
    assert not _round(leader)
    assert leader.is_leader()
    assert not lost
    clock.now += 0.1
    # No call has to return for the leader to stop: the clock alone ends the term.
    assert not leader.is_leader()
    with pytest.raises(NotLeadingError), leader.hold():
        pass  # pragma: no cover - never entered
    assert not _round(leader)

    assert lost == [True]


def test_a_leader_that_sees_someone_else_holding_the_lease_stops_at_once() -> None:
    api, clock = FakeCoordination(), Clock()
    lost: list[bool] = []
    leader = _elector(api, "a", clock, lost=lost)
    assert _round(leader)
    assert api.lease is not None
    api.lease["spec"]["holderIdentity"] = "thief"

    assert not _round(leader)

    assert not leader.is_leader()
    assert lost == [True]


@pytest.mark.parametrize("renew_failures_from", [0.0, 3.0, 9.5])
def test_the_leaders_engine_is_dead_before_another_candidate_may_take_the_lease(
    renew_failures_from: float,
) -> None:
    """The timing argument, on one virtual clock: the leader's last successful renewal
    was sent at ``t``; it stops leading at ``t + renew_deadline``; its engine guard
    interrupts then and kills ``grace`` later; no other candidate acquires before
    ``t + lease_duration``, which the settings put after all of that."""
    engine = EngineSettings()
    settings = DaemonSettings(leader_election=SETTINGS, engine=engine)
    api, clock = FakeCoordination(), Clock()
    term = Term()
    leader = _elector(api, "a", clock, term=term)
    standby = _elector(api, "b", clock)
    assert _round(leader)
    clock.now = renew_failures_from
    assert _round(leader)
    last_renewal = clock.now
    assert not _round(standby)  # the standby sees the renewed record now
    api_down_for_a = FakeCoordination()  # the leader's calls fail from now on
    api_down_for_a.fail = True
    leader._api = api_down_for_a

    acquired_at = leader_stopped_at = interrupted_at = killed_at = None
    control = Control(lease_until=term.until, grace=engine.interrupt_grace)
    while acquired_at is None:
        clock.now = round(clock.now + 0.05, 2)
        leader.round()
        if leader_stopped_at is None and not leader.is_leader():
            leader_stopped_at = clock.now
        action, _ = next_action(
            control, now=clock.now, exited=False, requested=None, interrupted_at=interrupted_at
        )
        if action is GuardAction.INTERRUPT:
            interrupted_at = clock.now
        elif action is GuardAction.KILL and killed_at is None:
            killed_at = clock.now
        if standby.round():
            acquired_at = clock.now

    assert leader_stopped_at is not None
    assert interrupted_at is not None
    assert killed_at is not None
    assert leader_stopped_at == pytest.approx(last_renewal + SETTINGS.renew_deadline, abs=0.06)
    assert interrupted_at == pytest.approx(last_renewal + SETTINGS.renew_deadline, abs=0.06)
    assert killed_at == pytest.approx(interrupted_at + engine.interrupt_grace, abs=0.06)
    # The guard needs at most KILL_MARGIN to see the deadline, kill and reap.
    assert killed_at + KILL_MARGIN < acquired_at
    assert acquired_at >= last_renewal + SETTINGS.lease_duration
    assert settings.leader_election.lease_duration > (
        SETTINGS.renew_deadline + engine.interrupt_grace + KILL_MARGIN
    )


def test_settings_refuse_timings_that_would_let_two_engines_overlap() -> None:
    election = {"enabled": True, "lease_duration": 12, "renew_deadline": 10, "retry_period": 2}

    with pytest.raises(ValueError, match="must be dead before another daemon"):
        DaemonSettings.model_validate({"leader_election": election})
    # Without election there is no second leader to overlap with.
    DaemonSettings.model_validate({"leader_election": {**election, "enabled": False}})
    DaemonSettings.model_validate({"leader_election": election, "engine": {"interrupt_grace": 0.5}})


def test_engine_pids_are_recorded_in_the_lease_and_a_new_holder_inherits_them() -> None:
    api, clock = FakeCoordination(), Clock()
    announced: list[int] = []
    term = Term()
    first = _elector(api, "a", clock, term=term, announced=announced, host="pod-a")
    second = _elector(api, "b", clock, host="pod-b")
    assert _round(first)
    assert engine_records(api.lease) == (EngineRecord("a", "pod-a", ()),)

    announced.append(4242)  # a CLI waits for its pid to be recorded
    clock.now += 0.1
    assert _round(first)
    assert engine_records(api.lease) == (EngineRecord("a", "pod-a", (4242,)),)
    assert term.recorded == (4242,)  # the guard may start that CLI now
    announced.clear()  # the command ended; its pid stays recorded
    clock.now += 2
    assert _round(first)
    assert engine_records(api.lease) == (EngineRecord("a", "pod-a", (4242,)),)

    # a dies; b takes over after the lease duration and inherits a's records.
    assert not _round(second)
    clock.now += 15
    assert _round(second)
    assert second.inherited_engines() == (EngineRecord("a", "pod-a", (4242,)),)
    records = json.loads(api.annotations[ENGINES_ANNOTATION])
    assert [r["holder"] for r in records] == ["a", "b"]
    assert not first.inherited_engines()  # only a holder has any


def test_a_leader_hands_the_lease_to_a_manual_run_only_between_engine_runs() -> None:
    api, clock = FakeCoordination(), Clock()
    term = Term()
    daemon = _elector(api, "daemon-a", clock, term=term)
    manual = _elector(api, "manual:dev@laptop:7", clock, yields=False, host="laptop")
    assert _round(daemon)

    with daemon.hold():
        assert manual.request_handover()
        assert api.annotations[HANDOVER_ANNOTATION] == "manual:dev@laptop:7"
        clock.now += 2
        assert _round(daemon)  # busy: renews, keeps the term of the running engine
        assert api.holder == "daemon-a"
        assert term.until == clock.now + SETTINGS.renew_deadline
        assert not daemon.is_leader()  # but starts nothing new
        with pytest.raises(NotLeadingError), daemon.hold():
            pass  # pragma: no cover - never entered

    clock.now += 2
    assert not _round(daemon)  # idle now: hands over
    assert api.holder == "manual:dev@laptop:7"
    assert HANDOVER_ANNOTATION not in api.annotations
    assert term.ended == 1
    assert not daemon.is_leader()

    assert _round(manual)
    assert manual.is_leader()
    clock.now += 2
    assert not _round(daemon)  # a standby now, waiting for the manual run
    manual.stop(release=True)
    clock.now += 2
    assert _round(daemon)
    assert api.holder == "daemon-a"


def test_a_withdrawn_handover_request_leaves_the_leader_leading() -> None:
    api, clock = FakeCoordination(), Clock()
    daemon = _elector(api, "daemon-a", clock)
    manual = _elector(api, "manual:dev@laptop:7", clock, yields=False)
    assert _round(daemon)
    assert manual.request_handover()
    manual.request_handover(withdraw=True)

    clock.now += 2
    assert _round(daemon)

    assert daemon.is_leader()
    assert api.holder == "daemon-a"


class Gate:
    def __init__(self, leading: bool) -> None:
        self.leading = leading

    def is_leader(self) -> bool:
        return self.leading


def test_a_standby_daemon_never_starts_the_engine_and_says_it_is_a_standby() -> None:
    gate = Gate(False)
    h = make_daemon(leader=gate)
    sleeps = 0

    def stop_later() -> None:
        nonlocal sleeps
        sleeps += 1
        if sleeps == 5:
            h.daemon.request_stop()

    h.clock.on_sleep = stop_later

    assert h.daemon.run() == 0
    assert h.engine.ups == []
    assert h.engine.recoveries == 0
    assert h.metrics.value("twc_leader") == 0
    assert h.daemon.ready() == (True, "standby: another daemon holds the lease")


def test_a_daemon_that_becomes_leader_recovers_the_stack_before_its_first_up() -> None:
    gate = Gate(False)
    h = make_daemon(leader=gate)
    h.engine.recover_actions = ["cancel"]
    sleeps = 0

    def promote_then_stop() -> None:
        nonlocal sleeps
        sleeps += 1
        if sleeps == 2:
            gate.leading = True
        if sleeps == 4:
            h.daemon.request_stop()

    h.clock.on_sleep = promote_then_stop

    assert h.daemon.run() == 0
    assert h.engine.recoveries == 1
    assert len(h.engine.ups) == 1
    assert h.metrics.value("twc_leader") == 1
    assert h.metrics.value("twc_stack_recoveries_total", action="cancel") == 1


def test_a_killed_runs_lock_that_only_the_up_finds_is_counted_as_a_recovery() -> None:
    # The killed run was stopped before it recorded a pending operation: the recovery
    # before the first up saw nothing, and the up broke the lock itself.
    h = make_daemon()
    h.engine.up_recoveries = ["cancel"]
    h.clock.on_sleep = h.daemon.request_stop

    assert h.daemon.run() == 0
    assert h.engine.recoveries == 1
    assert len(h.engine.ups) == 1
    assert h.metrics.value("twc_stack_recoveries_total", action="cancel") == 1


# ----------------------------------------------------- the Lease is input, not trust
def _forge(api: FakeCoordination, **annotations: str) -> None:
    """Whoever may edit Leases writes annotations (the spec untouched)."""
    assert api.lease is not None
    api.lease["metadata"].setdefault("annotations", {}).update(annotations)
    api.version += 1
    api.lease["metadata"]["resourceVersion"] = str(api.version)


def test_a_deleted_lease_ends_the_holders_term_at_once_and_no_one_leads_before_it_expires() -> None:
    api, clock = FakeCoordination(), Clock()
    lost: list[bool] = []
    term = Term()
    leader = _elector(api, "a", clock, term=term, lost=lost)
    standby = _elector(api, "b", clock)
    assert _round(leader)
    assert not _round(standby)

    api.lease = None  # kubectl delete lease
    clock.now += 0.5
    assert not _round(leader)

    assert not leader.is_leader()
    assert term.ended == 1  # its engine guard stops the engine now
    assert not lost  # the term ended; the daemon competes again
    deleted_seen = clock.now
    while clock.now < deleted_seen + SETTINGS.lease_duration - 0.5:
        assert not _round(standby), "took a deleted Lease while the old term may still run"
        assert not _round(leader)
        clock.now += 0.5
    clock.now = deleted_seen + SETTINGS.lease_duration
    assert _round(standby) or _round(leader)
    assert api.holder in ("a", "b")


def test_engine_records_edited_into_the_lease_are_never_inherited() -> None:
    api, clock = FakeCoordination(), Clock()
    announced = [4242]
    first = _elector(api, "a", clock, announced=announced, host="pod-a")
    second = _elector(api, "b", clock, host="pod-b")
    assert _round(first)
    assert not _round(second)  # b witnesses a's record: pod-a, pid 4242

    forged = [
        {"holder": "a", "host": "laptop", "pids": [4242, 77]},  # a's, on another host
        {"holder": "ghost", "host": "laptop", "pids": [78]},  # a holder no one saw
    ]
    _forge(api, **{ENGINES_ANNOTATION: json.dumps(forged)})
    clock.now += 1
    assert not _round(second)
    clock.now += SETTINGS.lease_duration  # a is gone
    assert _round(second)

    assert second.inherited_engines() == (EngineRecord("a", "pod-a", (4242,)),)


def test_only_a_manual_run_may_ask_for_the_lease() -> None:
    api, clock = FakeCoordination(), Clock()
    leader = _elector(api, "a", clock)
    assert _round(leader)

    _forge(api, **{HANDOVER_ANNOTATION: "b"})
    clock.now += 2
    assert _round(leader)

    assert leader.is_leader()
    assert api.holder == "a"


def test_a_hand_over_nobody_takes_makes_the_leader_ignore_requests_for_a_while() -> None:
    api, clock = FakeCoordination(), Clock()
    leader = _elector(api, "a", clock)
    assert _round(leader)
    _forge(api, **{HANDOVER_ANNOTATION: "manual:nobody@nowhere:1"})
    clock.now += 2
    assert not _round(leader)
    assert api.holder == "manual:nobody@nowhere:1"  # handed over once ...
    clock.now += 2
    assert not _round(leader)
    clock.now += SETTINGS.lease_duration
    assert _round(leader)  # ... nobody renewed it: taken back on expiry

    for _ in range(50):  # a stream of forged requests
        _forge(api, **{HANDOVER_ANNOTATION: "manual:nobody@nowhere:1"})
        clock.now += 2
        assert _round(leader)
        assert leader.is_leader()
    assert api.holder == "a"
    assert clock.now < 2 * SETTINGS.lease_duration + HANDOVER_QUIET


def test_terms_count_the_time_a_host_was_suspended(monkeypatch: pytest.MonkeyPatch) -> None:
    channel = GuardChannel(Path(tempfile.mkdtemp()), leased=True)
    elector = LeaseElector(
        FakeCoordination(),
        name="twc-s",
        namespace="ops",
        identity="a",
        settings=SETTINGS,
        hooks=LeaseHooks(on_renewed=channel.lease_renewed, on_ended=channel.lease_ended),
    )
    assert elector.round()
    assert 0 < channel.term_left() <= SETTINGS.renew_deadline

    real = time.clock_gettime
    suspended = 3600.0  # the laptop slept an hour: CLOCK_MONOTONIC did not move

    def after_sleep(clock: int) -> float:
        return real(clock) + (suspended if clock == time.CLOCK_BOOTTIME else 0.0)

    monkeypatch.setattr(time, "clock_gettime", after_sleep)

    assert not elector.is_leader()
    assert channel.term_left() < 0  # every fenced write is refused
    assert stop_reason(channel.control, now=boottime(), requested=None) == Stop(
        "lease", "the Lease term of the process that started the engine ended"
    )
