"""Faults outside the daemon are named, reported while they last and cleared."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

import pytest

from tests.unit._daemon_fakes import (
    NS,
    FakeEngine,
    FakeQueues,
    autoscaled,
    fleet_data,
    make_daemon,
    queue_object,
)
from twc.engine.errors import engine_failure
from twc.reconcile.outcome import (
    FailureReason,
    Fault,
    FaultBook,
    OutcomeKind,
    classify,
    engine_fault,
    sample_fault,
)

KEY = f"{NS}/orders"


class _Status(IntEnum):
    UNAVAILABLE = 14
    NOT_FOUND = 5


class _RPCError(Exception):
    """Shaped like temporalio's RPCError: a message and a status enum."""

    def __init__(self, message: str, status: _Status) -> None:
        super().__init__(message)
        self.status = status


class _BrokenWatch(FakeQueues):
    """A Queue source whose list/watch fails, keeping its last objects."""

    def __init__(self) -> None:
        super().__init__(())
        self.error: str | None = None

    def failure(self) -> str | None:
        return self.error


def test_a_fault_is_raised_once_merges_sources_and_clears_with_the_last_one() -> None:
    now = [10.0]
    book = FaultBook(lambda: now[0], lambda: 1_700_000_000.0 + now[0])

    raised = book.report(Fault.KUBERNETES_UNAVAILABLE, "queue-watch", "refused")
    again = book.report(Fault.KUBERNETES_UNAVAILABLE, "replicas", "refused again")
    now[0] = 25.0
    first_clear = book.clear(Fault.KUBERNETES_UNAVAILABLE, "queue-watch")
    active = book.active()[Fault.KUBERNETES_UNAVAILABLE]
    last_clear = book.clear(Fault.KUBERNETES_UNAVAILABLE, "replicas")

    assert raised is not None
    assert raised.raised
    assert raised.message == "refused"
    assert again is None
    assert first_clear is None
    assert active.sources == frozenset({"replicas"})
    assert active.message == "refused again"
    assert last_clear is not None
    assert not last_clear.raised
    assert last_clear.duration == 15.0
    assert not book.active()
    assert book.clear(Fault.KUBERNETES_UNAVAILABLE, "replicas") is None


@pytest.mark.parametrize(
    ("reason", "message", "fault"),
    [
        (
            FailureReason.STATE_BACKEND,
            "error: failed to lock stack: open /state/.pulumi/locks/x.json: permission denied",
            Fault.STATE_BACKEND_UNWRITABLE,
        ),
        (
            FailureReason.UNEXPECTED,
            "mkdir /state/.pulumi/history: read-only file system",
            Fault.STATE_BACKEND_UNWRITABLE,
        ),
        (
            FailureReason.UNEXPECTED,
            "write /state/.pulumi/stacks/twc/prod.json: no space left on device",
            Fault.STATE_BACKEND_UNWRITABLE,
        ),
        (
            FailureReason.CONNECTION,
            "configured Kubernetes cluster is unreachable: dial tcp: connection refused",
            Fault.KUBERNETES_UNAVAILABLE,
        ),
        (FailureReason.CONNECTION, "Temporal frontend: connection refused", None),
        (FailureReason.UNEXPECTED, "the program crashed", None),
    ],
)
def test_engine_failures_name_the_backend_or_the_cluster(
    reason: FailureReason, message: str, fault: Fault | None
) -> None:
    assert engine_fault(reason, message) is fault


def test_the_engine_reason_is_its_stderr_not_its_progress_output() -> None:
    text = (
        "\n code: 1\n stdout: Updating (s):\n + created\n\n"
        " stderr: error: remove l.json: permission denied\n"
    )
    assert engine_failure(text).reason == "error: remove l.json: permission denied"
    assert engine_failure("  plain failure \n").reason == "plain failure"
    diagnostics = (
        "\n code: 1\n stdout: Updating (s):\n\nDiagnostics:\n  kubernetes:apps/v1:Deployment"
        " (d):\n    error: configured Kubernetes cluster is unreachable: connection refused\n"
        "\n stderr: \n"
    )
    assert engine_failure(diagnostics).reason == (
        "error: configured Kubernetes cluster is unreachable: connection refused"
    )


@pytest.mark.parametrize(
    "text",
    [
        "open /s/.pulumi/stacks/twc/x.json: permission denied",
        "write /s/.pulumi/stacks/twc/x.json: no space left on device",
        "write /s/.pulumi/history/x.json: disk quota exceeded",
    ],
)
def test_an_unwritable_backend_is_a_temporary_failure_with_its_own_reason(text: str) -> None:
    found = classify(RuntimeError(text))
    assert (found.kind, found.reason) == (OutcomeKind.TEMPORARY, FailureReason.STATE_BACKEND)


@pytest.mark.parametrize(
    ("error", "fault"),
    [
        (_RPCError("tcp connect error", _Status.UNAVAILABLE), Fault.TEMPORAL_UNAVAILABLE),
        (ConnectionRefusedError("refused"), Fault.TEMPORAL_UNAVAILABLE),
        (TimeoutError("deadline"), Fault.TEMPORAL_UNAVAILABLE),
        (_RPCError("namespace not found", _Status.NOT_FOUND), Fault.BACKLOG_SAMPLING_FAILED),
        (LookupError("secret missing"), Fault.BACKLOG_SAMPLING_FAILED),
    ],
)
def test_a_failed_sample_says_whether_temporal_is_unreachable(
    error: Exception, fault: Fault
) -> None:
    assert sample_fault(error) is fault


def test_temporal_down_holds_replicas_reports_the_fault_and_clears_when_it_answers() -> None:
    h = make_daemon(fleet_data(workers=[autoscaled("orders", target=10)]), backlogs={"orders": 50})
    h.step()
    h.clock.now += 30
    h.step()
    assert h.live[KEY] == 5
    ups = len(h.engine.ups)

    h.backlogs.counts["orders"] = _RPCError("tcp connect error", _Status.UNAVAILABLE)
    for _ in range(3):
        h.clock.now += 10
        h.step()
    status = h.daemon.status()

    assert h.live[KEY] == 5
    assert len(h.engine.ups) == ups
    fault = status["faults"]["TemporalUnavailable"]
    assert fault["sources"] == ["backlog"]
    assert KEY in fault["message"]
    assert fault["seconds"] == 20.0
    assert h.metrics.value("twc_fault_active", fault="TemporalUnavailable") == 1
    assert h.metrics.value("twc_faults_total", fault="TemporalUnavailable") == 1
    assert h.daemon.ready() == (True, "ok: 5 iterations")  # it can still apply

    h.backlogs.counts["orders"] = 50
    h.clock.now += 10
    h.step()

    assert h.daemon.status()["faults"] == {}
    assert h.metrics.value("twc_fault_active", fault="TemporalUnavailable") == 0
    assert h.live[KEY] == 5


def test_an_unwritable_backend_fails_the_up_blocks_readiness_and_clears_on_success() -> None:
    engine = FakeEngine(failures=[RuntimeError("open /s/.pulumi/locks/l.json: permission denied")])
    h = make_daemon(engine=engine)
    h.step()
    status = h.daemon.status()

    assert status["lastOutcome"]["reason"] == "StateBackendUnwritable"
    assert status["faults"]["StateBackendUnwritable"]["sources"] == ["engine"]
    assert h.metrics.value("twc_reconcile_errors_total", reason="StateBackendUnwritable") == 1
    ok, why = h.daemon.ready()
    assert not ok
    assert "StateBackendUnwritable" in why

    h.clock.now += 5
    h.step()  # the up is retried and succeeds

    assert len(engine.ups) == 2
    assert h.daemon.status()["faults"] == {}
    assert h.daemon.ready()[0]


def test_an_unreachable_api_server_is_reported_from_the_watch_and_the_replica_read() -> None:
    watch = _BrokenWatch()
    down = {"yes": False}

    def read(live: dict[str, int]) -> Mapping[str, int]:
        if down["yes"]:
            raise ConnectionRefusedError("connect to 127.0.0.1:6443: connection refused")
        return dict(live)

    h = make_daemon(source=watch, read_replicas=read)
    h.step()
    watch.error = "HTTPSConnectionPool: Max retries exceeded (connection refused)"
    down["yes"] = True
    h.clock.now += 1
    h.step()
    fault: dict[str, Any] = h.daemon.status()["faults"]["KubernetesUnavailable"]

    assert fault["sources"] == ["queue-watch", "replicas"]
    assert not h.daemon.ready()[0]
    assert h.metrics.value("twc_fault_active", fault="KubernetesUnavailable") == 1

    down["yes"] = False
    h.clock.now += 1
    h.step()
    assert "KubernetesUnavailable" in h.daemon.status()["faults"]  # the watch still fails
    watch.error = None
    h.clock.now += 1
    h.step()
    assert h.daemon.status()["faults"] == {}
    assert h.daemon.ready()[0]


def test_a_restarted_daemon_that_cannot_read_replicas_does_not_scale_blind() -> None:
    down = {"yes": True}

    def read(live: dict[str, int]) -> Mapping[str, int]:
        if down["yes"]:
            raise ConnectionRefusedError("connection refused")
        return dict(live)

    h = make_daemon(
        fleet_data(workers=[autoscaled("orders", target=10)]),
        backlogs={"orders": _RPCError("tcp connect error", _Status.UNAVAILABLE)},
        read_replicas=read,
    )
    h.live[KEY] = 7  # what a previous daemon left running
    h.step()

    assert h.engine.ups == []  # not an up to minReplicas
    outcome = h.daemon.status()["lastOutcome"]
    assert outcome["kind"] == "temporary"
    assert "unknown" in outcome["message"]
    # Nothing runs is known and no plan is remembered: it stops before asking Temporal.
    assert set(h.daemon.status()["faults"]) == {"KubernetesUnavailable"}

    down["yes"] = False
    h.clock.now += 5
    h.step()

    assert h.engine.last_inputs.replicas == {KEY: 7}  # held at the live count
    assert h.live[KEY] == 7


class _Applier:
    """Early apply that always works (the cluster is fine, the state backend is not)."""

    def exists(self, ref: Any) -> bool:
        return False

    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        return None

    def release(self, ref: Any, field_manager: str) -> bool:
        return True

    def delete(self, ref: Any) -> None:
        return None

    def managed_by(self, field_manager: str) -> list[Any]:
        return []


def test_objects_applied_ahead_of_an_up_that_cannot_write_its_state_are_reported() -> None:
    engine = FakeEngine()
    h = make_daemon(engine=engine, early=_Applier())
    h.step()
    engine.failures.append(RuntimeError("open /s/.pulumi/locks/l.json: permission denied"))
    h.queues.replace([queue_object("orders")])
    h.step()
    status = h.daemon.status()

    assert status["earlyApplied"] == [
        f"Deployment {NS}/worker-orders",
        f"ServiceAccount {NS}/worker-orders",
    ]
    assert "StateBackendUnwritable" in status["faults"]

    h.clock.now += 5
    h.step()  # the up succeeds and adopts them

    assert h.daemon.status()["earlyApplied"] == []
    assert h.daemon.status()["faults"] == {}
