"""Item 5: before/after of the fixes this run's numbers called for, measured in one run.

The fix changed how a list of Deployments is read; the old and the new way are timed
here side by side, interleaved, read-only, on the same API server (the old way is
re-enacted, not the old code run).

The daemon reads every worker Deployment's ``spec.replicas`` in each iteration
(``Cluster.worker_replicas``). Building the Kubernetes client's models of whole
Deployments for that was half of a no-op iteration at 100 workers; it now reads the
list's JSON. (An earlier run also measured the listing of the test bed's home-made
deployment controller; the real kube-controller-manager has replaced it.)
"""

from __future__ import annotations

import json
from typing import Any

from bench.stats import ratio, summarize
from bench.timing import timed


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
