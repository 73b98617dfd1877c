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

import time
from collections.abc import Callable
from typing import Any

import pytest
from pulumi.automation import CommandError

from tests.e2e.conftest import FleetStack, create_tls_secret, fleet_doc
from twc.engine.automation import PATCH_FORCE_ENV
from twc.kube.client import kube_client
from twc.kube.workloads import Workloads
from twc.local.environment import LocalEnvironment
from twc.reconcile.act import EARLY_FIELD_MANAGER, early_objects
from twc.rollout import build_id_of, version_deployment_name
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


def _every_kind_fleet(namespace: str, address: str, task_queue: str) -> dict[str, Any]:
    """A DLQ worker, a versioned worker, a Queue object twc creates and a copied credential."""
    doc = fleet_doc(
        namespace,
        host_port=address,
        connection={
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": f"{namespace}-src"},
            "allowedNamespaces": [namespace],
        },
        workers=[
            {
                "name": "dlq",
                "namespace": namespace,
                "taskQueueName": task_queue,
                "dlq": {"enabled": True},
            },
            {
                "name": "versioned",
                "namespace": namespace,
                "taskQueueName": f"{task_queue}-v",
                "rollout": {"strategy": "AllAtOnce"},
            },
        ],
        queues=[{"name": "jobs", "namespace": namespace, "createObject": True}],
    )
    doc["clusterObjects"] = False
    return doc


def _users_objects(kube: Any, namespace: str, versioned: str) -> dict[str, dict[str, Any]]:
    """A user's objects with the names twc's would have (none of twc's labels)."""
    mine = {"labels": {"app": "mine"}}
    kube.core.create_namespaced_service(
        namespace, {"metadata": {"name": "dlq-dlq", **mine}, "spec": {"ports": [{"port": 80}]}}
    )
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "temporal-mtls", **mine}, "stringData": {"k": "v"}}
    )
    queue = {"apiVersion": "kmsvc.io/v1", "kind": "Queue", "metadata": {"name": "jobs", **mine}}
    kube.custom.create_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", queue)
    kube.apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": versioned, **mine},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "mine"}},
                "template": {
                    "metadata": {"labels": {"app": "mine"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.example/mine:1"}]},
                },
            },
        },
    )
    return _read_users(kube, namespace, versioned)


def _read_users(kube: Any, namespace: str, versioned: str) -> dict[str, dict[str, Any]]:
    custom = kube.custom.get_namespaced_custom_object
    found = {
        f"Service {namespace}/dlq-dlq": kube.core.read_namespaced_service("dlq-dlq", namespace),
        f"Secret {namespace}/temporal-mtls": kube.core.read_namespaced_secret(
            "temporal-mtls", namespace
        ),
        f"Queue {namespace}/jobs": custom("kmsvc.io", "v1", namespace, "queues", "jobs"),
        f"Deployment {namespace}/{versioned}": kube.get_deployment(namespace, versioned),
    }
    return {key: kube.api_client.sanitize_for_serialization(obj) for key, obj in found.items()}


def test_a_users_objects_of_every_kind_twc_creates_are_refused_and_left_as_they_were(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    doc = _every_kind_fleet(namespace, local_env.temporal_address(), task_queue)
    kube.ensure_namespace(f"{namespace}-src")
    create_tls_secret(kube, f"{namespace}-src")
    fs = fleet_stack(doc)
    fs.env[PATCH_FORCE_ENV] = "true"  # even forced, the engine must not take them over
    [_, versioned] = load_fleet(doc, "fleet.yaml").resolved_workers()
    versioned_name = version_deployment_name("versioned", build_id_of(versioned))
    before = _users_objects(kube, namespace, versioned_name)

    started = time.monotonic()
    with pytest.raises(CommandError) as failed:
        fs.up()
    took = time.monotonic() - started

    text = str(failed.value)
    assert "ObjectExists" in text
    for key in before:
        assert f"{key} exists and was not created by twc" in text, key
    after = _read_users(kube, namespace, versioned_name)
    for key, obj in before.items():
        assert after[key]["metadata"]["uid"] == obj["metadata"]["uid"], key
        assert after[key]["metadata"]["labels"] == {"app": "mine"}, key
        assert not any(m.startswith("pulumi") for m in _managers(after[key])), key
        if not key.startswith("Deployment"):  # a Deployment's controller writes its status
            assert after[key]["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    # Nothing of the stack's was created: the check runs before every object of it.
    assert kube.get_deployment(namespace, "dlq") is None
    with pytest.raises(CommandError, match="ObjectExists"):
        fs.preview()
    print(f"{len(before)} users' objects of twc's names: the up refused them in {took:.1f} s")
