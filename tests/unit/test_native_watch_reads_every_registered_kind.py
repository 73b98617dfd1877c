"""The native watch covers TemporalWorkers, the official WorkerDeployments where twc's CRD
serves them, and every kind the registry knows."""

from __future__ import annotations

import contextlib
import threading
from typing import Any, cast

import pytest

from tests.unit._native_objects import cluster_conn_obj, worker_obj
from twc.connections import Registry
from twc.kube.watch import NativeWatch

KINDS = Registry.with_builtins().watched_kinds()
OFFICIAL = {
    "apiVersion": "temporal.io/v1alpha1",
    "kind": "WorkerDeployment",
    "metadata": {"name": "payments", "namespace": "team", "uid": "u-1", "generation": 1},
    "spec": {"workerOptions": {"connectionRef": {"name": "prod"}, "temporalNamespace": "p"}},
}


class Api:
    """Lists per plural; a status code makes that list fail like the API server."""

    def __init__(self, items: dict[str, list[dict[str, Any]]], fail: dict[str, int]) -> None:
        self.items = items
        self.fail = fail
        self.listed: list[tuple[str, str]] = []

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **_: Any) -> Any:
        self.listed.append((group, plural))
        if plural in self.fail:
            exc = RuntimeError(f"{self.fail[plural]}")
            exc.status = self.fail[plural]  # type: ignore[attr-defined]
            raise exc
        return {"items": self.items.get(plural, []), "metadata": {"resourceVersion": "1"}}


def _list_all(watch: NativeWatch) -> None:
    for watcher in watch.watchers().values():
        watcher._wakeup = threading.Event()
        with contextlib.suppress(RuntimeError):
            watcher.list_now()


def test_every_kind_is_listed_and_cluster_scoped_objects_are_keyed_by_name() -> None:
    api = Api(
        {
            "temporalworkers": [worker_obj("orders")],
            "clusterconnections": [cluster_conn_obj("prod")],
            "workerdeployments": [OFFICIAL],
        },
        {},
    )
    watch = NativeWatch(api, KINDS, resync_interval=300, twc_crd=lambda name: True)
    assert watch.snapshot() is None

    _list_all(watch)

    snapshot = watch.snapshot()
    assert snapshot is not None
    assert [w["metadata"]["name"] for w in snapshot.workers] == ["orders", "payments"]
    by_plural = {k.plural: v for k, v in snapshot.connections.items()}
    assert [c["metadata"]["name"] for c in by_plural["clusterconnections"]] == ["prod"]
    assert by_plural["connections"] == ()
    assert sorted(api.listed) == [
        ("temporal.io", "clusterconnections"),
        ("temporal.io", "connections"),
        ("temporal.io", "workerdeployments"),
        ("temporal.io", "workerresourcetemplates"),
        ("temporal.kmsvc.io", "temporalworkers"),
    ]
    workers = watch.observed()["TemporalWorker.temporal.kmsvc.io"].objects or ()
    assert [(o["kind"], cast(dict[str, Any], o["metadata"])["name"]) for o in workers] == [
        ("TemporalWorker", "orders"),
        ("WorkerDeployment", "payments"),
    ]


@pytest.mark.parametrize("failure", [None, 403])
def test_official_worker_deployments_of_the_official_crd_are_left_to_it(
    failure: int | None,
) -> None:
    api = Api({"temporalworkers": [worker_obj("orders")], "workerdeployments": [OFFICIAL]}, {})
    if failure:
        api.fail["workerdeployments"] = failure
    watch = NativeWatch(api, KINDS, resync_interval=300, twc_crd=lambda name: False)

    _list_all(watch)

    assert ("temporal.io", "workerdeployments") not in api.listed
    workers = watch.observed()["TemporalWorker.temporal.kmsvc.io"]
    names = [cast(dict[str, Any], o["metadata"])["name"] for o in workers.objects or ()]
    assert names == ["orders"]


HPA = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "spec": {}}


def _template(name: str, worker: str, ref: str = "workerDeploymentRef") -> dict[str, Any]:
    return {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "WorkerResourceTemplate",
        "metadata": {"name": name, "namespace": "team", "uid": f"u-{name}", "generation": 1},
        "spec": {ref: {"name": worker}, "template": HPA},
    }


def test_worker_resource_templates_are_read_as_their_worker_deployments_resource_templates() -> (
    None
):
    templates = [
        _template("hpa", "payments"),
        _template("old", "payments", "temporalWorkerDeploymentRef"),
        _template("other", "billing"),
    ]
    api = Api({"workerdeployments": [OFFICIAL], "workerresourcetemplates": templates}, {})
    watch = NativeWatch(api, KINDS, resync_interval=300, twc_crd=lambda name: True)

    _list_all(watch)

    observed = watch.observed()
    (payments,) = observed["TemporalWorker.temporal.kmsvc.io"].objects or ()
    spec = cast(dict[str, Any], payments["spec"])
    assert spec["resourceTemplates"] == [
        {"name": "hpa", "template": HPA},
        {"name": "old", "template": HPA},
    ]
    # Their own kind too, for the status twc writes on them.
    names = observed["WorkerResourceTemplate.temporal.io"].objects or ()
    assert [cast(dict[str, Any], o["metadata"])["name"] for o in names] == ["hpa", "old", "other"]


def test_the_watch_is_ready_only_once_the_worker_resource_templates_were_listed() -> None:
    api = Api({"workerdeployments": [OFFICIAL]}, {"workerresourcetemplates": 500})
    watch = NativeWatch(api, KINDS, resync_interval=300, twc_crd=lambda name: True)

    _list_all(watch)
    assert watch.snapshot() is None

    del api.fail["workerresourcetemplates"]
    _list_all(watch)
    assert watch.snapshot() is not None


def test_an_unknown_worker_resource_template_list_makes_every_worker_unknown() -> None:
    api = Api({"workerdeployments": [OFFICIAL]}, {"workerresourcetemplates": 500})
    watch = NativeWatch(api, KINDS, resync_interval=300, twc_crd=lambda name: True)

    _list_all(watch)

    workers = watch.observed()["TemporalWorker.temporal.kmsvc.io"]
    assert workers.objects is None
    assert "workerresourcetemplates.temporal.io" in str(workers.failure)


def test_an_unknown_worker_deployment_list_makes_every_worker_unknown() -> None:
    api = Api({"temporalworkers": [worker_obj("orders")]}, {"workerdeployments": 500})
    watch = NativeWatch(api, KINDS, resync_interval=300, twc_crd=lambda name: True)

    _list_all(watch)

    workers = watch.observed()["TemporalWorker.temporal.kmsvc.io"]
    assert workers.objects is None
    assert "workerdeployments.temporal.io" in str(workers.failure)


@pytest.mark.parametrize(
    ("status", "crd_installed", "known"),
    [(404, False, True), (404, True, False), (403, True, False), (500, True, False)],
)
def test_a_missing_crd_is_no_objects_but_any_other_failed_list_is_not_knowing(
    status: int, crd_installed: bool, known: bool
) -> None:
    api = Api({}, {"temporalworkers": status})
    watch = NativeWatch(
        api,
        Registry.with_builtins().watched_kinds(),
        resync_interval=300,
        crd_exists=lambda name: crd_installed,
        twc_crd=lambda name: True,
    )

    _list_all(watch)

    # Without knowing the TemporalWorkers the loop must not apply (it would delete them).
    observed = watch.observed()["TemporalWorker.temporal.kmsvc.io"]
    assert observed.is_known is known
    if known:
        assert observed.objects == ()
    else:
        assert observed.failure


def test_the_observed_objects_stay_equal_until_the_watch_sees_a_change() -> None:
    api = Api({"temporalworkers": [worker_obj("orders")]}, {})
    watch = NativeWatch(api, KINDS, resync_interval=300, twc_crd=lambda name: True)
    _list_all(watch)

    first = watch.observed()
    again = watch.observed()
    assert again == first

    watch._workers._apply("ADDED", worker_obj("billing"))
    changed = watch.observed()
    workers = next(k for k in first if k.startswith("TemporalWorker"))
    assert changed[workers] != first[workers]
    names = [cast(dict[str, Any], o["metadata"])["name"] for o in changed[workers].objects or ()]
    assert names == ["billing", "orders"]
    assert all(changed[k] == first[k] for k in first if k != workers)
    # The unchanged object is the watch's own mapping: it compares by identity, not by value.
    assert (changed[workers].objects or ())[1] is (first[workers].objects or ())[0]
