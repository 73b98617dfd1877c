"""Leader election on a Lease: one leader at a time, takeover on expiry or release."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit._daemon_fakes import make_daemon
from twc.kube.lease import LeaseAction, LeaseElector, LeaseRecord, lease_action
from twc.loop import LeaderElectionSettings

SETTINGS = LeaderElectionSettings(
    enabled=True, lease_duration=15, renew_deadline=10, retry_period=2
)


def _record(holder: str, renew: str = "t1") -> LeaseRecord:
    return LeaseRecord(
        holder=holder, duration=15, renew_time=renew, acquire_time="t0", transitions=1
    )


@pytest.mark.parametrize(
    ("record", "observed_at", "now", "action"),
    [
        (None, None, 100.0, LeaseAction.ACQUIRE),  # no Lease yet
        (_record(""), 90.0, 100.0, LeaseAction.ACQUIRE),  # released
        (_record("me"), 90.0, 100.0, LeaseAction.RENEW),
        (_record("other"), None, 100.0, LeaseAction.WAIT),  # first sight: give it a term
        (_record("other"), 90.0, 104.9, LeaseAction.WAIT),
        (_record("other"), 90.0, 105.0, LeaseAction.ACQUIRE),  # unchanged for 15 s
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
    """One Lease in memory, with resourceVersion conflicts like the API server."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.api_client = self

    def sanitize_for_serialization(self, obj: Any) -> Any:
        return copy.deepcopy(obj)

    def read_namespaced_lease(self, name: str, namespace: str) -> dict[str, Any]:
        if self.lease is None:
            raise ApiError(404)
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any]) -> None:
        if self.lease is not None:
            raise ApiError(409)
        self._store(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any]) -> None:
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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _elector(api: FakeCoordination, identity: str, clock: Clock) -> LeaseElector:
    return LeaseElector(
        api, name="twc-s", namespace="ops", identity=identity, settings=SETTINGS, clock=clock
    )


def _round(elector: LeaseElector) -> bool:
    try:
        won = elector.try_once()
    except ApiError:
        won = False
    elector._update(won)
    return won


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


def test_a_leader_that_cannot_renew_past_the_deadline_stops_leading() -> None:
    api, clock = FakeCoordination(), Clock()
    lost: list[bool] = []
    leader = LeaseElector(
        api,
        name="twc-s",
        namespace="ops",
        identity="a",
        settings=SETTINGS,
        clock=clock,
        on_lost=lambda: lost.append(True),
    )
    assert _round(leader)

    clock.now += 9
    leader._update(False)
    assert leader.is_leader()
    assert not lost
    clock.now += 1
    leader._update(False)

    assert not leader.is_leader()
    assert lost == [True]


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
