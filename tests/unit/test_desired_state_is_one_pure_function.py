"""The desired state: one pure function over the fleet, the cluster's objects, the
replicas and the last accepted specs — what every entry point computes alike."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit._daemon_fakes import NS, fleet_data, queue_object
from tests.unit._native_objects import cluster_conn_obj, cluster_ref, worker_obj
from twc.connections import Registry
from twc.desired import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredInputs,
    ObjectList,
    ObjectsUnknown,
    desired_fleet,
    trimmed,
)
from twc.spec import Fleet, load_fleet

REGISTRY = Registry.with_builtins()
CC_KEY = "ClusterConnection.temporal.io"
CONN_KEY = "Connection.temporal.io"


def _fleet(**kw: Any) -> Fleet:
    return load_fleet(fleet_data(**kw), "fleet.yaml")


def _cluster(
    queues: list[dict[str, Any]] | None = None,
    workers: list[dict[str, Any]] | None = None,
    conns: list[dict[str, Any]] | None = None,
) -> dict[str, ObjectList]:
    return {
        QUEUE_KIND_KEY: ObjectList.known(queues or []),
        WORKER_KIND_KEY: ObjectList.known(workers or []),
        CC_KEY: ObjectList.known(conns or []),
        CONN_KEY: ObjectList.known([]),
    }


def _desired(fleet: Fleet, **inputs: Any) -> Any:
    return desired_fleet(fleet, DesiredInputs(**inputs), registry=REGISTRY, file="fleet.yaml")


def test_the_file_alone_is_the_fleet_files_workers() -> None:
    desired = _desired(_fleet())
    assert sorted(desired.workers) == [f"{NS}/payments"]
    assert desired.origins == {f"{NS}/payments": "file"}
    assert not desired.cluster_managed
    assert desired.rejected == ()


def test_cluster_objects_add_workers_and_say_where_each_comes_from() -> None:
    cluster = _cluster(
        queues=[queue_object("orders")],
        workers=[worker_obj("native", ref=cluster_ref("prod"))],
        conns=[cluster_conn_obj("prod")],
    )
    desired = _desired(_fleet(), cluster=cluster)
    assert desired.origins == {
        f"{NS}/payments": "file",
        f"{NS}/worker-orders": f"Queue {NS}/orders",
        f"{NS}/native": f"TemporalWorker {NS}/native",
    }
    assert desired.references[f"{NS}/native"] == ("temporal.io", "ClusterConnection", "prod", None)
    assert set(desired.accepted[WORKER_KIND_KEY]) == {f"{NS}/native"}


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ({"replicas": -1}, "InvalidSpec"),
        ({"env": {"TEMPORAL_TLS": "x"}}, "InvalidSpec"),
        (
            {
                "connectionRef": {
                    "objectRef": {"apiGroup": "temporal.io", "kind": "Nope", "name": "x"}
                }
            },
            "UnknownConnectionKind",
        ),
        ({"connectionRef": {"name": "missing"}}, "ConnectionNotFound"),
    ],
    ids=["bad replicas", "reserved env", "unknown kind", "missing connection"],
)
def test_an_object_that_turns_invalid_keeps_its_last_accepted_spec(
    edit: dict[str, Any], reason: str
) -> None:
    good = worker_obj("native", task_queue="orders")
    first = _desired(_fleet(), cluster=_cluster(workers=[good]))
    bad = {**good, "spec": {**good["spec"], **edit}}

    second = _desired(_fleet(), cluster=_cluster(workers=[bad]), accepted=first.accepted)

    assert second.workers[f"{NS}/native"] == first.workers[f"{NS}/native"]
    [rejected] = second.rejected
    assert (rejected.key, rejected.reason, rejected.kept) == (f"{NS}/native", reason, True)
    # The store keeps the spec that runs, not the invalid one.
    assert second.accepted[WORKER_KIND_KEY] == first.accepted[WORKER_KIND_KEY]


def test_an_invalid_new_object_is_left_out_with_its_reason() -> None:
    bad = worker_obj("native", replicas=-1)
    desired = _desired(_fleet(), cluster=_cluster(workers=[bad]))
    assert f"{NS}/native" not in desired.workers
    [rejected] = desired.rejected
    assert (rejected.reason, rejected.kept) == ("InvalidSpec", False)
    assert desired.accepted[WORKER_KIND_KEY] == {}


def test_a_kind_whose_list_failed_keeps_every_accepted_object() -> None:
    first = _desired(
        _fleet(),
        cluster=_cluster(queues=[queue_object("orders")], workers=[worker_obj("native")]),
    )
    failing = {
        **_cluster(workers=[worker_obj("native")]),
        QUEUE_KIND_KEY: ObjectList.unknown("403 Forbidden"),
    }

    second = _desired(_fleet(), cluster=failing, accepted=first.accepted)

    assert sorted(second.workers) == sorted(first.workers)
    assert second.unknown == (QUEUE_KIND_KEY,)
    assert second.accepted[QUEUE_KIND_KEY] == first.accepted[QUEUE_KIND_KEY]


def test_an_unknown_kind_without_accepted_objects_refuses_to_compute() -> None:
    failing = {**_cluster(), WORKER_KIND_KEY: ObjectList.unknown("503 Service Unavailable")}
    with pytest.raises(ObjectsUnknown, match=r"TemporalWorker\.temporal\.kmsvc\.io: 503") as raised:
        _desired(_fleet(), cluster=failing)
    assert raised.value.kinds == {WORKER_KIND_KEY: "503 Service Unavailable"}


def test_only_a_successful_observation_removes_an_object() -> None:
    first = _desired(_fleet(), cluster=_cluster(workers=[worker_obj("native")]))
    gone = _desired(_fleet(), cluster=_cluster(workers=[]), accepted=first.accepted)
    assert f"{NS}/native" not in gone.workers
    assert gone.accepted[WORKER_KIND_KEY] == {}


def test_replicas_apply_only_to_existing_autoscaled_workers() -> None:
    fleet = _fleet(
        workers=[
            {"name": "fixed", "namespace": NS, "taskQueueName": "fixed", "replicas": 2},
            {
                "name": "scaled",
                "namespace": NS,
                "taskQueueName": "scaled",
                "autoscaling": {"maxReplicas": 9, "targetBacklogPerReplica": 5},
            },
        ]
    )
    desired = _desired(fleet, replicas={f"{NS}/fixed": 7, f"{NS}/scaled": 4, f"{NS}/gone": 1})
    assert desired.replicas == {f"{NS}/scaled": 4}


def test_the_inputs_cross_the_process_boundary_unchanged(tmp_path: Any) -> None:
    inputs = DesiredInputs(
        fleet=fleet_data(),
        cluster=_cluster(queues=[queue_object("orders")]),
        replicas={f"{NS}/payments": 3},
    )
    path = inputs.to_file(tmp_path / "inputs.json")

    again = DesiredInputs.from_file(path)

    assert again == inputs.for_program()
    a = _desired(_fleet(), cluster=inputs.cluster, replicas=inputs.replicas)
    b = desired_fleet(
        load_fleet(again.fleet, "fleet.yaml"), again, registry=REGISTRY, file="fleet.yaml"
    )
    assert a.workers == b.workers


def test_what_crosses_is_trimmed_to_what_the_desired_state_reads() -> None:
    obj = {
        **worker_obj("native"),
        "status": {"phase": "Ready"},
    }
    obj["metadata"] = {
        **obj["metadata"],
        "managedFields": [{"manager": "kubectl"}],
        "resourceVersion": "42",
        "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            "twc.temporal.io/note": "kept",
        },
    }
    small = trimmed(obj)
    assert "status" not in small
    assert set(small["metadata"]) >= {"name", "namespace"}
    assert "managedFields" not in small["metadata"]
    assert "resourceVersion" not in small["metadata"]
    assert small["metadata"]["annotations"] == {"twc.temporal.io/note": "kept"}
    assert small["spec"] == obj["spec"]
