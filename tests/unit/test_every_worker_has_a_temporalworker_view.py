"""Every Queue and fleet-file worker gets a generated TemporalWorker object (a view):
which views should exist, what they say, what to write to get there — and the desired
state never reads a view as a source. Pure: no cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit._daemon_fakes import NS, fleet_data, queue_object
from tests.unit._native_objects import cluster_conn_obj, cluster_ref, worker_obj
from twc.connections import Registry
from twc.desired import (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    DesiredFleet,
    DesiredInputs,
    ObjectList,
    desired_fleet,
)
from twc.native.views import (
    FROM_FLEET,
    FROM_QUEUE,
    STACK_LABEL,
    VIEW_ANNOTATION,
    VIEW_FIELD_MANAGER,
    VIEW_LABEL,
    View,
    desired_views,
    foreign_spec_managers,
    is_view,
    plan_views,
    spec_matches,
    view_spec,
)
from twc.spec import load_fleet

REGISTRY = Registry.with_builtins()
STACK = "prod"
RICH_WORKER: dict[str, Any] = {
    "name": "rich",
    "namespace": NS,
    "taskQueueName": "rich-tq",
    "temporalNamespace": "billing",
    "image": "registry.example/rich:2.0.0",
    "imagePullPolicy": "Always",
    "autoscaling": {"minReplicas": 2, "maxReplicas": 9, "targetBacklogPerReplica": 50},
    "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}},
    "nodeSelector": {"pool": "workers"},
    "tolerations": [{"key": "dedicated", "value": "temporal", "effect": "NoSchedule"}],
    "lifecycle": {"preStopCommand": ["sleep", "5"]},
    "dlq": {"enabled": True, "replicas": 2},
    "serviceAccount": {"annotations": {"iam.example/role": "rich"}},
    "env": {"LOG_LEVEL": "debug"},
    "terminationGracePeriodSeconds": 120,
    "connectionRef": {"name": "billing"},
}


def _queue(name: str, uid: str | None = None) -> dict[str, Any]:
    obj = queue_object(name, partitions=3)
    obj["metadata"]["uid"] = f"uid-queue-{name}" if uid is None else uid
    return obj


def _desired(
    *,
    workers: list[dict[str, Any]] | None = None,
    queues: list[dict[str, Any]] | None = None,
    objects: list[dict[str, Any]] | None = None,
) -> DesiredFleet:
    doc = fleet_data(workers=workers)
    doc["connections"] = [{"name": "billing", "namespace": NS, "hostPort": "billing.example:7233"}]
    cluster = {
        QUEUE_KIND_KEY: ObjectList.known(queues or []),
        WORKER_KIND_KEY: ObjectList.known(objects or []),
        "ClusterConnection.temporal.io": ObjectList.known([cluster_conn_obj("prod")]),
        "Connection.temporal.io": ObjectList.known([]),
    }
    return desired_fleet(
        load_fleet(doc, "fleet.yaml"),
        DesiredInputs(cluster=cluster),
        registry=REGISTRY,
        file="fleet.yaml",
    )


def _views(desired: DesiredFleet) -> tuple[dict[str, View], dict[str, str]]:
    return desired_views(
        desired.workers,
        desired.origins,
        desired.accepted_objects(QUEUE_KIND_KEY),
        stack=STACK,
    )


def _stored(view: View, *, version: str = "7", **meta: Any) -> dict[str, Any]:
    """The view as the API server stores it: uid, resourceVersion, twc's managed fields
    and the CRD's defaults filled in."""
    obj = copy.deepcopy(dict(view.body))
    obj["metadata"].update(
        uid=f"uid-view-{view.key}",
        resourceVersion=version,
        generation=1,
        managedFields=[
            {"manager": VIEW_FIELD_MANAGER, "operation": "Apply", "fieldsV1": {"f:spec": {}}}
        ],
        **meta,
    )
    spec = obj["spec"]
    spec.setdefault("serviceAccount", {}).setdefault("automountToken", False)
    if "autoscaling" in spec:
        spec["autoscaling"].setdefault("scaleDownStabilizationSeconds", 300)
    for toleration in spec.get("tolerations", []):
        toleration.setdefault("operator", "Equal")
    return obj


# ------------------------------------------------------------------- the views
def test_a_fleet_file_worker_and_a_queue_worker_get_views_and_a_temporalworker_none() -> None:
    desired = _desired(
        queues=[_queue("orders")],
        objects=[worker_obj("native", ref=cluster_ref("prod"))],
    )
    views, held = _views(desired)

    assert held == {}
    assert sorted(views) == [f"{NS}/payments", f"{NS}/worker-orders"]
    file_view = views[f"{NS}/payments"].body
    assert file_view["apiVersion"] == "temporal.kmsvc.io/v1"
    assert file_view["kind"] == "TemporalWorker"
    assert file_view["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "twc",
        VIEW_LABEL: FROM_FLEET,
        STACK_LABEL: STACK,
    }
    assert "ownerReferences" not in file_view["metadata"]
    assert file_view["metadata"]["annotations"] == {VIEW_ANNOTATION: "fleet of stack prod"}

    queue_view = views[f"{NS}/worker-orders"].body
    assert queue_view["metadata"]["labels"][VIEW_LABEL] == FROM_QUEUE
    assert queue_view["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "kmsvc.io/v1",
            "kind": "Queue",
            "name": "orders",
            "uid": "uid-queue-orders",
            "controller": True,
        }
    ]
    assert queue_view["metadata"]["annotations"][VIEW_ANNOTATION] == f"Queue {NS}/orders"
    assert queue_view["spec"] == {
        "image": "registry.example/worker:1.0.0",
        "imagePullPolicy": "IfNotPresent",
        "temporalNamespace": "default",
        "replicas": 3,  # one per partition
        "connectionRef": cluster_ref("main"),
        "serviceAccount": {"automountToken": False},
        "terminationGracePeriodSeconds": 60,
        "queueRef": {"name": "orders", "namespace": NS},
        "taskQueueName": "orders",
    }


def test_a_views_spec_is_the_worker_twc_runs_with_every_setting() -> None:
    desired = _desired(workers=[RICH_WORKER])
    worker = desired.workers[f"{NS}/rich"]
    spec = view_spec(worker)

    assert "replicas" not in spec  # autoscaled: the count is the autoscaler's, not spec
    assert spec["dlq"]["taskQueueName"] == "rich-tq-dlq"
    assert spec["connectionRef"] == {"name": "billing"}
    # Read back as a TemporalWorker object, the view resolves to the same worker.
    again = _desired(workers=[], objects=[{**worker_obj("rich"), "spec": spec}]).workers[
        f"{NS}/rich"
    ]
    ignore = {"source", "connection_source", "derived", "queue"}
    assert again.model_dump(exclude=ignore) == worker.model_dump(exclude=ignore)


def test_a_queue_whose_uid_is_not_known_holds_its_view() -> None:
    # A Queue known only from its last accepted spec, recorded without a uid.
    desired = _desired(queues=[_queue("orders", uid="")])
    assert desired.accepted_objects(QUEUE_KIND_KEY)[f"{NS}/orders"].uid == ""
    views, held = _views(desired)

    assert f"{NS}/worker-orders" not in views
    assert "uid of Queue" in held[f"{NS}/worker-orders"]


def test_the_desired_state_never_reads_a_view_as_a_source() -> None:
    first = _desired(queues=[_queue("orders")])
    views, _ = _views(first)
    in_cluster = [_stored(v) for v in views.values()]

    again = _desired(queues=[_queue("orders")], objects=in_cluster)

    assert all(is_view(o) for o in in_cluster)
    assert again.workers.keys() == first.workers.keys()
    assert again.origins == first.origins
    assert again.rejected == ()
    assert again.accepted_objects(WORKER_KIND_KEY) == {}
    # A TemporalWorker that merely has an owner (someone else's controller) is a source.
    owned = worker_obj("native", ref=cluster_ref("prod"))
    owned["metadata"]["ownerReferences"] = [{"kind": "Queue", "name": "orders", "uid": "u"}]
    assert not is_view(owned)
    assert f"{NS}/native" in _desired(objects=[owned]).workers


# -------------------------------------------------------------------- the plan
def _one(view_key: str = f"{NS}/payments") -> View:
    views, _ = _views(_desired(queues=[_queue("orders")]))
    return views[view_key]


def test_missing_views_are_created_and_views_that_say_what_they_should_cost_nothing() -> None:
    views, held = _views(_desired(queues=[_queue("orders")]))

    created = plan_views(views, held, [], stack=STACK)
    assert [(w.view.key, w.create) for w in created.writes] == [
        (f"{NS}/payments", True),
        (f"{NS}/worker-orders", True),
    ]
    assert created.shown == {}

    stored = [_stored(v) for v in views.values()]
    settled = plan_views(views, held, stored, stack=STACK)
    assert settled.writes == ()
    assert settled.deletes == ()
    assert sorted(settled.shown) == sorted(views)


def test_an_edited_spec_is_put_back_naming_who_edited_it() -> None:
    view = _one()
    edited = _stored(view)
    edited["spec"]["image"] = "registry.example/hacked:6.6.6"
    edited["metadata"]["managedFields"].append(
        {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {"f:image": {}}}}
    )

    plan = plan_views({view.key: view}, {}, [edited], stack=STACK)

    assert [w.view.key for w in plan.writes] == [view.key]
    write = plan.writes[0]
    assert not write.create
    assert write.resource_version == "7"
    assert write.edited_by == ("kubectl-edit",)
    assert foreign_spec_managers(edited) == ("kubectl-edit",)
    assert not spec_matches(edited, view.spec)


@pytest.mark.parametrize(
    ("change", "writes"),
    [
        (lambda o: o["metadata"]["labels"].update({"team": "sales"}), False),
        (lambda o: o["metadata"].setdefault("annotations", {}).update({"note": "x"}), False),
        (lambda o: o["metadata"]["labels"].update({VIEW_LABEL: "Fleet"}), True),
        (lambda o: o["metadata"]["annotations"].pop(VIEW_ANNOTATION), True),
        (lambda o: o["metadata"].pop("ownerReferences"), True),
        (lambda o: o["metadata"]["ownerReferences"][0].update({"uid": "old-queue"}), True),
    ],
)
def test_only_what_twc_sets_decides_a_write(change: Any, writes: bool) -> None:
    view = _one(f"{NS}/worker-orders")
    obj = _stored(view)
    change(obj)

    plan = plan_views({view.key: view}, {}, [obj], stack=STACK)

    assert bool(plan.writes) is writes
    assert plan.deletes == ()


def test_a_view_whose_worker_is_gone_is_deleted_and_only_this_stacks_views() -> None:
    view = _one()
    mine = _stored(view)
    other_stack = _stored(view)
    other_stack["metadata"].update(name="elsewhere", uid="uid-other")
    other_stack["metadata"]["labels"][STACK_LABEL] = "staging"
    people = worker_obj("handmade", ref=cluster_ref("prod"))

    plan = plan_views({}, {}, [mine, other_stack, people], stack=STACK)

    assert [(d.obj.key, d.obj.uid) for d in plan.deletes] == [(view.key, mine["metadata"]["uid"])]
    assert plan.deletes[0].source == "fleet of stack prod"
    assert plan.writes == ()


def test_a_held_view_is_neither_changed_nor_deleted() -> None:
    view = _one()
    stale = _stored(view)
    stale["spec"]["image"] = "registry.example/old:1"

    plan = plan_views({}, {view.key: "the uid of Queue x is not known"}, [stale], stack=STACK)

    assert plan.writes == ()
    assert plan.deletes == ()
    assert plan.skipped == {view.key: "the uid of Queue x is not known"}


def test_an_object_of_the_same_name_that_twc_did_not_generate_is_left_alone() -> None:
    view = _one()
    theirs = worker_obj("payments", ref=cluster_ref("prod"))

    plan = plan_views({view.key: view}, {}, [theirs], stack=STACK)

    assert plan.writes == ()
    assert plan.deletes == ()
    assert plan.shown == {}
    assert "twc did not generate" in plan.skipped[view.key]


def test_a_view_that_lost_its_stack_label_gets_it_back_but_is_not_deleted_for_it() -> None:
    view = _one()
    unlabelled = _stored(view)
    del unlabelled["metadata"]["labels"][STACK_LABEL]

    put_back = plan_views({view.key: view}, {}, [unlabelled], stack=STACK)
    assert [w.view.key for w in put_back.writes] == [view.key]
    assert put_back.writes[0].edited_by == ()  # the spec is as it should be
    assert plan_views({}, {}, [unlabelled], stack=STACK).deletes == ()


def test_a_view_whose_derived_from_label_was_removed_is_a_source_left_alone() -> None:
    view = _one()
    claimed = _stored(view)
    del claimed["metadata"]["labels"][VIEW_LABEL]

    assert not is_view(claimed)
    for views in ({view.key: view}, {}):
        plan = plan_views(views, {}, [claimed], stack=STACK)
        assert plan.writes == ()
        assert plan.deletes == ()


def test_nothing_is_written_while_the_temporalworker_objects_are_unknown() -> None:
    views, held = _views(_desired(queues=[_queue("orders")]))

    plan = plan_views(views, held, None, stack=STACK)

    assert plan.writes == ()
    assert plan.deletes == ()
    assert plan.shown == {}


def test_a_view_being_deleted_is_made_again_only_once_gone() -> None:
    view = _one()
    going = _stored(view, deletionTimestamp="2026-01-01T00:00:00Z")

    plan = plan_views({view.key: view}, {}, [going], stack=STACK)
    assert plan.writes == ()
    assert plan.deletes == ()
    assert "being deleted" in plan.skipped[view.key]


def test_a_derived_spec_follows_its_worker_and_a_caller_cannot_change_it_for_others() -> None:
    worker = _desired().workers[f"{NS}/payments"]
    first = view_spec(worker)
    first["image"] = "changed-by-a-caller"

    assert view_spec(worker)["image"] == "registry.example/worker:1.0.0"
    moved = worker.model_copy(update={"image": "registry.example/worker:2.0.0"})
    assert view_spec(moved)["image"] == "registry.example/worker:2.0.0"


def test_twc_up_and_preview_say_views_are_not_counted_as_temporalworkers() -> None:
    from twc.cli.common import summary

    views, _ = _views(_desired(queues=[_queue("orders")]))
    objects = [_stored(v) for v in views.values()] + [worker_obj("native")]
    line = summary(DesiredInputs(cluster={WORKER_KIND_KEY: ObjectList.known(objects)}))

    assert line is not None
    assert line.endswith("1 TemporalWorker (+2 generated views of other workers)"), line
