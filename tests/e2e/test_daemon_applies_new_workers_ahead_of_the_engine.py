"""A new worker's Deployment is in the API server before the engine runs, and the engine
adopts it unchanged."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import create_queue, create_tls_secret, credentialed_fleet
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from twc.local.environment import LocalEnvironment
from twc.reconcile.act import EARLY_FIELD_MANAGER

pytestmark = pytest.mark.e2e

TLS_CRT = "-----BEGIN CERTIFICATE-----\nMIIBearly\n-----END CERTIFICATE-----\n"
TLS_KEY = "-----BEGIN PRIVATE KEY-----\nMIIEearly\n-----END PRIVATE KEY-----\n"


def _managers(obj: dict[str, Any]) -> set[str]:
    return {m["manager"] for m in obj["metadata"].get("managedFields") or []}


def test_new_workers_are_applied_ahead_and_the_engine_adopts_them_without_a_rollout(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    daemons: Daemons,
) -> None:
    source = f"{namespace}-src"
    kube.ensure_namespace(source)
    create_tls_secret(kube, source, crt=TLS_CRT, key=TLS_KEY)
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "temporal-api-key"}, "stringData": {"api-key": "k1"}}
    )
    fleet = credentialed_fleet(namespace, local_env.temporal_address(), source)
    fs = daemons.stack(fleet)
    daemon = daemons.start(fs)
    wait_for_success(daemon)

    # Two new workers, one after the other (a file change read by a running up would be
    # created by that up): one from a Queue object (the mTLS ClusterConnection, its secret
    # copied from another namespace), one added to the file (the API-key Connection).
    grown = copy.deepcopy(fleet)
    grown["workers"].append(
        {
            "name": "keyed-2",
            "namespace": namespace,
            "taskQueueName": f"tq-{namespace}-k2",
            "connectionRef": {"name": "cloud"},
            "replicas": 2,
        }
    )
    first_seen: dict[str, dict[str, Any]] = {}
    waits: list[float] = []

    def add_and_wait(name: str, add: Callable[[], None], released: int) -> None:
        started = time.monotonic()
        add()
        first_seen[name] = eventually(
            lambda: kube.get_deployment(namespace, name),
            timeout=60,
            message=f"{name} never appeared",
        )
        waits.append(time.monotonic() - started)
        eventually(
            lambda: daemon.count("twc_early_applies_total", result="released") >= released,
            timeout=120,
            message=f"{name}'s early objects were never handed to the engine",
        )

    add_and_wait(
        "worker-orders",
        lambda: create_queue(kube, namespace, "orders", partitions=2),
        released=2,
    )

    def grow() -> None:
        fs.write(grown)

    add_and_wait("keyed-2", grow, released=4)

    log = daemon.text()
    assert "applied early" in log
    assert daemon.count("twc_early_applies_total", result="applied") == 2
    for name in ("worker-orders", "keyed-2"):
        deployment = kube.get_deployment(namespace, name)
        assert deployment is not None
        # The engine's apply changed nothing in the pod template: no second rollout.
        assert deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
        assert deployment["spec"]["template"] == first_seen[name]["spec"]["template"], name
        managers = _managers(deployment)
        assert EARLY_FIELD_MANAGER not in managers, managers
        assert any(m.startswith("pulumi-kubernetes") for m in managers), managers
        sa = kube.api_client.sanitize_for_serialization(
            kube.core.read_namespaced_service_account(name, namespace)
        )
        assert EARLY_FIELD_MANAGER not in _managers(sa)
        # The engine owns it: it is in the stack.
        assert fs.resource_outputs(f"{namespace}/{name}-deployment")["metadata"]["name"] == name
    assert kube.get_deployment(namespace, "keyed-2")["spec"]["replicas"] == 2
    template = kube.get_deployment(namespace, "worker-orders")["spec"]["template"]
    volumes = {v["name"]: v for v in template["spec"].get("volumes") or []}
    assert any(v.get("secret", {}).get("secretName") == "temporal-mtls" for v in volumes.values())

    # Deleting the Queue deletes its worker through the engine, like any other.
    kube.custom.delete_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues", "orders")
    eventually(
        lambda: kube.get_deployment(namespace, "worker-orders") is None,
        timeout=90,
        message="the adopted worker was never removed",
    )
    assert daemon.alive()
    print("new Deployments present after " + ", ".join(f"{w:.2f} s" for w in waits))
