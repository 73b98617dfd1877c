"""On a real API server: a shard's workloads list the Deployments of its namespaces only.

A shard stack's worker Deployments carry its base stack's label, the same in every
shard. Listed by label alone, each of 20 shards read all 5000 whole Deployments when a
5000-worker daemon started (looking for what a killed early apply left): 730 MB of its
990 MB peak. A shard now asks for each of its namespaces, and sees its workers and no
other shard's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from twc.builders import COMPONENT_WORKER, LABEL_COMPONENT, LABEL_STACK, LABEL_WORKER, stack_labels
from twc.kube.client import kube_client
from twc.kube.workloads import ObjectRef, Workloads
from twc.local.environment import LocalEnvironment
from twc.reconcile.act import EARLY_FIELD_MANAGER
from twc.reconcile.shards import ShardNamespaces

pytestmark = pytest.mark.e2e

BASE = f"shards-{uuid.uuid4().hex[:6]}"


def _deployment(namespace: str, name: str) -> dict[str, Any]:
    # The base stack's labels, as every shard's worker Deployments carry them.
    labels = {**stack_labels(f"{BASE}.s00"), LABEL_COMPONENT: COMPONENT_WORKER, LABEL_WORKER: name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {LABEL_WORKER: name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "worker", "image": "busybox:1.36"}]},
            },
        },
    }


@pytest.fixture
def namespaces(kube: Any, local_env: LocalEnvironment) -> Iterator[list[str]]:
    names = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for name in names:
        kube.ensure_namespace(name)
    yield names
    with kube_client(local_env.kubeconfig) as client:
        for name in names:
            client.apps.delete_collection_namespaced_deployment(
                name, label_selector=f"{LABEL_STACK}={BASE}"
            )


def test_a_shard_finds_what_an_early_apply_left_in_its_namespaces_only(
    local_env: LocalEnvironment, namespaces: list[str]
) -> None:
    a, b, other = namespaces
    with kube_client(local_env.kubeconfig) as client:
        every = Workloads(client, stack=f"{BASE}.s00")
        for ns in namespaces:
            every.apply(_deployment(ns, "orders"), EARLY_FIELD_MANAGER)

        shard = Workloads(client, stack=f"{BASE}.s00", namespaces=ShardNamespaces((a, b)))

        left = shard.managed_by(EARLY_FIELD_MANAGER)
        assert {r for r in left if r.kind == "Deployment"} == {
            ObjectRef("Deployment", a, "orders"),
            ObjectRef("Deployment", b, "orders"),
        }
        assert shard.worker_replicas() == {f"{a}/orders": 2, f"{b}/orders": 2}
        # Unscoped (a stack of its own, or `twc up`): every namespace, as before.
        assert {r.namespace for r in every.managed_by(EARLY_FIELD_MANAGER)} == {a, b, other}
