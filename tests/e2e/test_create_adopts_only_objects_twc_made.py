"""On the real engine and the real Kubernetes provider: a worker's create is a
server-side apply that *adopts* an existing object of its name (the daemon's early apply
and a killed run's leftovers rely on it), but only an object twc made — a user's
Deployment of the same name is refused with ``ObjectExists`` and left untouched.

The engine runs as the daemon runs it: with the provider's forced server-side apply
(``PULUMI_K8S_ENABLE_PATCH_FORCE``), which takes over the fields the early apply set
(the API server defaults some of them, e.g. a ``fieldRef``'s ``apiVersion``, so an
unforced apply conflicts). If a provider upgrade stops creates from upserting (or starts
failing them on an existing object), the first test fails."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pulumi.automation import CommandError

from tests.e2e.conftest import FleetStack, fleet_doc
from twc.engine.automation import PATCH_FORCE_ENV
from twc.kube.client import kube_client
from twc.kube.workloads import Workloads
from twc.local import LocalEnvironment
from twc.reconcile.act import EARLY_FIELD_MANAGER, early_objects
from twc.spec import load_fleet

pytestmark = pytest.mark.e2e


def _fleet(namespace: str, address: str, task_queue: str) -> dict[str, Any]:
    doc = fleet_doc(
        namespace,
        host_port=address,
        workers=[{"name": "adopted", "namespace": namespace, "taskQueueName": task_queue}],
    )
    doc["clusterObjects"] = False
    return doc


def _managers(deployment: dict[str, Any]) -> set[str]:
    return {m["manager"] for m in deployment["metadata"].get("managedFields") or []}


def test_a_create_adopts_the_object_twc_applied_ahead_of_it(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    doc = _fleet(namespace, local_env.temporal_address(), task_queue)
    fs = fleet_stack(doc)
    fs.env[PATCH_FORCE_ENV] = "true"  # as the daemon runs the engine
    fleet = load_fleet(doc, "fleet.yaml")
    [worker] = fleet.resolved_workers()
    with kube_client(local_env.kubeconfig) as client:
        workloads = Workloads(client, stack=fs.name)
        for obj in early_objects(worker, fleet, read_secret=None, stack=fs.name):
            workloads.apply(obj, EARLY_FIELD_MANAGER)
    before = kube.get_deployment(namespace, "adopted")
    assert before is not None
    assert before["metadata"]["labels"]["twc.temporal.io/stack"] == fs.name

    fs.up()

    after = kube.get_deployment(namespace, "adopted")
    assert after is not None
    # The same object, now owned by the engine too (its field manager was added).
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert EARLY_FIELD_MANAGER in _managers(after)
    assert any(m.startswith("pulumi-kubernetes") for m in _managers(after)), _managers(after)
    recorded = fs.resource_outputs(f"{namespace}/adopted-deployment")
    assert recorded["metadata"]["uid"] == before["metadata"]["uid"]


def test_a_users_object_of_a_workers_name_is_refused_and_left_as_it_was(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    doc = _fleet(namespace, local_env.temporal_address(), task_queue)
    fs = fleet_stack(doc)
    fs.env[PATCH_FORCE_ENV] = "true"  # even forced, the engine must not take it over
    kube.apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "adopted", "labels": {"app": "mine"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "mine"}},
                "template": {
                    "metadata": {"labels": {"app": "mine"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.example/mine:1"}]},
                },
            },
        },
    )
    before = kube.get_deployment(namespace, "adopted")
    assert before is not None

    with pytest.raises(CommandError) as failed:
        fs.up()

    text = str(failed.value)
    assert "ObjectExists" in text
    assert f"Deployment {namespace}/adopted exists and was not created by twc" in text
    after = kube.get_deployment(namespace, "adopted")
    assert after is not None
    # Untouched by the engine (the simulated deployment controller still writes its
    # status and revision, so the resourceVersion moves on its own).
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"] == before["spec"]
    assert after["metadata"]["labels"] == {"app": "mine"}
    assert not any(m.startswith("pulumi") for m in _managers(after)), _managers(after)
    # The preview (a dry run) refuses it the same way.
    with pytest.raises(CommandError, match="ObjectExists"):
        fs.preview()
    kube.apps.delete_namespaced_deployment("adopted", namespace)
