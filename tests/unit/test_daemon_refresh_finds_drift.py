"""``refresh`` runs on schedule; drift it finds is reported and fixed by a full ``up``."""

from __future__ import annotations

from tests.unit._daemon_fakes import make_daemon
from twc.reconcile.settings import DaemonSettings

SETTINGS = DaemonSettings(reconcile_interval=30, refresh_interval=600)


def test_refresh_waits_for_its_interval() -> None:
    h = make_daemon(settings=SETTINGS)

    for _ in range(19):  # 19 * 30 s = 570 s < 600 s
        h.step()
        h.clock.now += 30

    assert h.engine.refreshes == 0
    h.clock.now += 30
    h.step()
    assert h.engine.refreshes == 1
    assert h.metrics.value("twc_engine_runs_total", operation="refresh") == 1


def test_drift_found_by_refresh_is_reported_and_the_next_iteration_runs_a_full_up() -> None:
    h = make_daemon(settings=SETTINGS)
    h.step()
    h.engine.drift = ["team/payments-deployment"]
    h.engine.urns = {"team/payments": ["urn:payments"]}

    h.clock.now += 600
    state = h.step()

    assert h.engine.refreshes == 1
    assert h.metrics.value("twc_drifted_resources") == 1
    assert h.metrics.value("twc_drift_detected_total") == 1
    assert state.applied is None
    assert h.daemon.wakeup.is_set()  # the fix does not wait for the interval

    h.step()
    assert len(h.engine.ups) == 2
    assert h.engine.ups[1][1] is None  # full, not targeted


def test_a_refresh_without_drift_changes_nothing() -> None:
    h = make_daemon(settings=SETTINGS)
    h.step()

    h.clock.now += 600
    state = h.step()
    h.step()

    assert h.engine.refreshes == 1
    assert state.applied is not None
    assert len(h.engine.ups) == 1
    assert h.metrics.value("twc_drifted_resources") == 0
