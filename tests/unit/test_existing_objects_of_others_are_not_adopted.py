"""A new worker one of whose objects (Deployment, ServiceAccount, DLQ Service and
StatefulSet, PodDisruptionBudget, version Deployments) someone else created is left out
(``ObjectExists``) instead of being taken over; the rest of the stack is applied."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit._daemon_fakes import NS, fleet_data, make_daemon
from twc.builders import foreign_owner
from twc.kube.workloads import ObjectRef


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({}, "not created by twc"),
        ({"app.kubernetes.io/managed-by": "Helm"}, "not created by twc (managed-by: Helm)"),
        (
            {"app.kubernetes.io/managed-by": "twc", "twc.temporal.io/stack": "other"},
            "created by another twc stack",
        ),
        ({"app.kubernetes.io/managed-by": "twc", "twc.temporal.io/stack": "prod"}, None),
        # Made by twc before it labelled stacks: adopted.
        ({"app.kubernetes.io/managed-by": "twc"}, None),
    ],
)
def test_whose_object_it_is(labels: dict[str, str], why: str | None) -> None:
    assert foreign_owner({"metadata": {"name": "w", "labels": labels}}, "prod") == why


def test_a_new_worker_whose_name_is_taken_is_left_out_and_the_rest_applied() -> None:
    cluster: dict[ObjectRef, dict[str, Any]] = {
        ObjectRef("Deployment", NS, "taken"): {
            "metadata": {"name": "taken", "labels": {"app.kubernetes.io/managed-by": "Helm"}}
        }
    }
    workers = [
        {"name": "free", "namespace": NS, "taskQueueName": "a"},
        {"name": "taken", "namespace": NS, "taskQueueName": "b"},
    ]
    h = make_daemon(fleet_data(workers=workers), objects=cluster.get)

    h.step()

    assert set(h.engine.last_program().workers) == {f"{NS}/free"}
    conflicts = h.daemon.status()["objectConflicts"]
    assert list(conflicts) == [f"{NS}/taken"]
    assert (
        "Deployment team/taken exists and was not created by twc (managed-by: Helm)"
        in (conflicts[f"{NS}/taken"])
    )
    assert h.metrics.value("twc_object_conflicts", stack="unit") == 1

    # The user's object goes: the worker is created on the next iteration.
    del cluster[ObjectRef("Deployment", NS, "taken")]
    h.step()
    assert set(h.engine.last_program().workers) == {f"{NS}/free", f"{NS}/taken"}
    assert h.daemon.status()["objectConflicts"] == {}
    assert h.metrics.value("twc_object_conflicts", stack="unit") == 0


def test_a_worker_the_stack_holds_is_never_second_guessed() -> None:
    cluster: dict[ObjectRef, dict[str, Any]] = {}
    h = make_daemon(fleet_data(), objects=cluster.get)
    h.step()
    h.live[f"{NS}/payments"] = 1
    # Someone strips its labels: it is still the stack's worker, not a conflict.
    cluster[ObjectRef("Deployment", NS, "payments")] = {"metadata": {"labels": {}}}
    h.fleet["workers"][0]["image"] = "registry.example/worker:2.0.0"

    h.step()

    assert f"{NS}/payments" in h.engine.last_program().workers
    assert h.daemon.status()["objectConflicts"] == {}


def test_a_new_worker_whose_dlq_service_name_is_taken_is_left_out() -> None:
    user = {"metadata": {"name": "queued-dlq", "labels": {"app": "mine"}}}
    cluster = {ObjectRef("Service", NS, "queued-dlq"): user}
    workers = [{"name": "queued", "namespace": NS, "taskQueueName": "q", "dlq": {"enabled": True}}]
    h = make_daemon(fleet_data(workers=workers), objects=cluster.get)

    h.step()

    assert f"{NS}/queued" not in h.engine.last_program().workers
    conflicts = h.daemon.status()["objectConflicts"]
    assert f"Service {NS}/queued-dlq exists and was not created by twc" in conflicts[f"{NS}/queued"]
