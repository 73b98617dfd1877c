"""TemporalWorker status: phases, conditions, transition times and minimal patches."""

from __future__ import annotations

from twc.native.status import (
    PollerFacts,
    accepted_status,
    merge_conditions,
    rejected_status,
    status_patch,
    template_status,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"
REF = {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": "prod"}


def _status(previous: dict[str, object], **kw: object) -> dict[str, object]:
    args: dict[str, object] = {
        "generation": 2,
        "applied": True,
        "desired_replicas": 2,
        "deployment": (2, 2),
        "pollers": PollerFacts(3),
        "connection_ref": REF,
        "now": T0,
        **kw,
    }
    return accepted_status(previous, **args)  # type: ignore[arg-type]


def _conds(status: dict[str, object]) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in status["conditions"]}  # type: ignore[attr-defined]


def test_ready_needs_the_replicas_ready_and_a_poller() -> None:
    ready = _status({})
    waiting = _status({}, pollers=PollerFacts(0))
    rolling = _status({}, deployment=(2, 1))

    assert ready["phase"] == "Ready"
    assert {c["status"] for c in _conds(ready).values()} == {"True"}
    assert ready["observedGeneration"] == 2
    assert ready["observedConnectionRef"] == REF
    assert waiting["phase"] == "Pending"
    assert _conds(waiting)["TemporalTaskQueueRegistered"]["reason"] == "WaitingForPollers"
    assert rolling["phase"] == "Pending"
    assert _conds(rolling)["WorkerDeploymentReady"]["message"] == "1/2 replicas ready"


def test_bad_credentials_fail_the_worker_and_a_missing_deployment_keeps_it_pending() -> None:
    failed = _status({}, pollers=PollerFacts(None, "AuthSecretInvalid", "bad key"))
    missing = _status({}, deployment=None, pollers=None)

    assert failed["phase"] == "Failed"
    assert missing["phase"] == "Pending"
    assert _conds(missing)["WorkerDeploymentReady"]["reason"] == "DeploymentNotFound"
    assert _conds(missing)["TemporalTaskQueueRegistered"]["status"] == "Unknown"


def test_observed_fields_move_only_once_the_stack_holds_the_generation() -> None:
    before = {"observedGeneration": 1, "observedConnectionRef": {"name": "old"}}

    pending = _status(before, applied=False)

    assert "observedGeneration" not in pending
    assert "observedConnectionRef" not in pending
    assert status_patch(before, pending) is not None
    patch = status_patch(before, pending)
    assert patch is not None
    assert "observedGeneration" not in patch["status"]


def test_transition_time_moves_only_when_the_status_changes() -> None:
    first = merge_conditions(None, [{"type": "A", "status": "False", "reason": "X"}], now=T0)
    same = merge_conditions(first, [{"type": "A", "status": "False", "reason": "Y"}], now=T1)
    flipped = merge_conditions(same, [{"type": "A", "status": "True", "reason": "Z"}], now=T1)

    assert first[0]["lastTransitionTime"] == T0
    assert same[0]["lastTransitionTime"] == T0
    assert same[0]["reason"] == "Y"
    assert flipped[0]["lastTransitionTime"] == T1


def test_conditions_of_other_writers_are_kept() -> None:
    theirs = {"type": "Audited", "status": "True", "lastTransitionTime": T0}

    out = merge_conditions([theirs], [{"type": "A", "status": "True"}], now=T1)

    assert out[1] == theirs


def test_no_patch_when_nothing_changed_and_only_changed_fields_otherwise() -> None:
    current = _status({})
    later = _status(current, now=T1)  # same facts, a later clock

    assert status_patch(current, later) is None
    scaled = _status(current, now=T1, deployment=(3, 2), desired_replicas=3)
    patch = status_patch(current, scaled)
    assert patch is not None
    assert set(patch["status"]) == {"phase", "replicas", "conditions"}
    ready = _conds(scaled)["WorkerDeploymentReady"]
    assert ready["status"] == "False"
    assert ready["lastTransitionTime"] == T1


def test_a_rejected_worker_says_why_on_both_conditions() -> None:
    status = rejected_status(
        {}, generation=4, reason="UnknownConnectionKind", message="no provider", now=T0
    )
    pending = rejected_status(
        {}, generation=4, reason="ConnectionNotFound", message="not yet", now=T0
    )

    assert status["phase"] == "Failed"
    assert status["replicas"] == 0
    assert {c["reason"] for c in _conds(status).values()} == {"UnknownConnectionKind"}
    assert {c["status"] for c in _conds(status).values()} == {"False"}
    assert status["observedGeneration"] == 4
    assert pending["phase"] == "Pending"


def test_the_status_names_the_task_queue_the_worker_polls() -> None:
    # The printer column: a worker with only a queueRef has no spec.taskQueueName.
    assert _status({}, task_queue="orders")["taskQueue"] == "orders"
    assert "taskQueue" not in _status({})


NOW, LATER = "2026-12-05T06:00:00Z", "2026-12-05T06:05:00Z"


def test_a_resource_templates_status_lists_each_versions_copy_once_applied() -> None:
    names = {"v1": "orders-hpa-1111aaaa", "v2": "orders-hpa-2222bbbb"}

    pending = template_status({}, names=names, generation=3, applied=False, now=NOW)
    assert [v["lastAppliedGeneration"] for v in pending["versions"]] == [None, None]
    assert pending["conditions"][0]["status"] == "False"

    done = template_status(pending, names=names, generation=3, applied=True, now=LATER)
    assert done["versions"] == [
        {"buildID": b, "resourceName": n, "lastAppliedGeneration": 3, "lastTransitionTime": LATER}
        for b, n in sorted(names.items())
    ]
    assert (done["conditions"][0]["status"], done["conditions"][0]["reason"]) == (
        "True",
        "AllVersionsApplied",
    )
    # A newer generation not applied yet keeps what was applied, and its time.
    again = template_status(done, names=names, generation=4, applied=False, now="later still")
    assert [v["lastAppliedGeneration"] for v in again["versions"]] == [3, 3]
    assert {v["lastTransitionTime"] for v in again["versions"]} == {LATER}


def test_a_resource_template_naming_no_worker_deployment_says_so() -> None:
    status = template_status({}, names=None, generation=1, applied=False, now=NOW)
    assert "versions" not in status
    assert status["conditions"][0]["reason"] == "WorkerDeploymentNotFound"
