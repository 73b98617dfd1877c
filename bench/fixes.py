"""Item 5: before/after of the fixes this run's numbers called for, measured in one run.

Both fixes changed how a list of Deployments is read; the old and the new way are
timed here side by side, interleaved, read-only, on the same API server (the old way is
re-enacted, not the old code run).

1. The simulated deployment controller of the local environment (``twc.local.controllers``)
listed the ReplicaSets of a Deployment's namespace once per Deployment per pass, so a
pass cost O(Deployments x ReplicaSets) and a new Deployment waited seconds (at N=100) to
minutes (N=1000) before it turned Available, which every ``up`` waits for. It now lists
ReplicaSets once per pass, and reads both lists as JSON rather than the client's models.
2. The daemon reads every worker Deployment's ``spec.replicas`` in each iteration
(``Cluster.worker_replicas``). Building the Kubernetes client's models of whole
Deployments for that was half of a no-op iteration at 100 workers; it now reads the
list's JSON.
"""

from __future__ import annotations

import json
from typing import Any

from bench.stats import ratio, summarize
from bench.timing import timed


def _per_deployment_listing(kube: Any) -> int:
    # The old pass: models of every Deployment, serialised back to dicts, and the
    # namespace's ReplicaSets (as models) listed again for each Deployment.
    serialize = kube.api_client.sanitize_for_serialization
    deployments = kube.apps.list_deployment_for_all_namespaces().items
    for dep in deployments:
        serialize(dep)
        kube.apps.list_namespaced_replica_set(dep.metadata.namespace)
    return len(deployments)


def _one_listing(kube: Any) -> int:
    # The pass now: both lists once, read as JSON (the controller's own helper).
    from twc.local.controllers import _items

    deployments = _items(kube.apps.list_deployment_for_all_namespaces)
    _items(kube.apps.list_replica_set_for_all_namespaces)
    return len(deployments)


def measure_controller_listing(kube: Any, trials: int) -> dict[str, Any]:
    """Time one pass's listing, per-Deployment (before) and once per pass (after)."""
    before: list[float] = []
    after: list[float] = []
    count = 0
    for _ in range(trials):
        # Interleaved, so a busy moment of the shared machine hits both alike.
        seconds, count = timed(lambda: _per_deployment_listing(kube))
        before.append(seconds)
        after.append(timed(lambda: _one_listing(kube))[0])
    b, a = summarize(before), summarize(after)
    return {
        "title": "Simulated deployment controller: one ReplicaSet list per pass, as JSON",
        "where": "twc/local/controllers.py (test bed)",
        "what": "the listing of one controller pass",
        "detail": (
            "Before, a new Deployment waited for a pass that grew with the fleet, and every "
            "`up` waits for its Deployments to turn Available, so the engine figures "
            "measured the fake controller as much as twc."
        ),
        "deployments": count,
        "before_s": b,
        "after_s": a,
        "speedup": ratio(b["p50"], a["p50"]),
    }


def _replicas_from_models(kube: Any, selector: str) -> int:
    found = kube.apps.list_deployment_for_all_namespaces(label_selector=selector)
    return sum(int(d.spec.replicas or 1) for d in found.items)


def _replicas_from_json(kube: Any, selector: str) -> int:
    response = kube.apps.list_deployment_for_all_namespaces(
        label_selector=selector, _preload_content=False
    )
    items = json.loads(response.data).get("items") or []
    return sum(int((d.get("spec") or {}).get("replicas") or 1) for d in items)


def measure_replica_listing(kube: Any, trials: int) -> dict[str, Any]:
    """Time reading the worker Deployments' replicas, through models (before) and JSON."""
    selector = "app.kubernetes.io/managed-by=twc"
    before: list[float] = []
    after: list[float] = []
    for _ in range(trials):
        before.append(timed(lambda: _replicas_from_models(kube, selector))[0])
        after.append(timed(lambda: _replicas_from_json(kube, selector))[0])
    count = len(kube.apps.list_deployment_for_all_namespaces(label_selector=selector).items)
    b, a = summarize(before), summarize(after)
    return {
        "title": "Daemon: worker replicas read from the list's JSON",
        "where": "twc/controller/cluster.py (Cluster.worker_replicas)",
        "what": "reading every worker Deployment's replicas (each daemon iteration)",
        "detail": (
            "The Kubernetes client's models of whole Deployments (managed fields "
            "included) were built for one integer each; the no-op iteration above already "
            "runs with the fix."
        ),
        "deployments": count,
        "before_s": b,
        "after_s": a,
        "speedup": ratio(b["p50"], a["p50"]),
    }
