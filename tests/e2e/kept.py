"""A TemporalWorker object the daemon accepted, then edited into a spec the CRD admits
and the fleet model refuses: the daemon keeps its Deployment on the last accepted spec,
which it writes to the stack's record."""

from __future__ import annotations

from typing import Any

from tests.e2e.daemon_process import eventually
from tests.e2e.native import conditions, object_ref, temporal_worker

GROUP, VERSION, PLURAL = "temporal.kmsvc.io", "v1", "temporalworkers"


def _accepted(kube: Any, namespace: str, name: str) -> str | None:
    found = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return (conditions(found).get("SpecAccepted") or {}).get("status")


def accepted_worker(kube: Any, namespace: str, name: str, task_queue: str) -> None:
    """Create the TemporalWorker (on the fleet's ClusterConnection ``local``) and wait
    until the daemon accepted it and runs its Deployment."""
    body = temporal_worker(namespace, name, task_queue, object_ref("ClusterConnection", "local"))
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    eventually(
        lambda: _accepted(kube, namespace, name) == "True" and kube.get_deployment(namespace, name),
        timeout=240,
        message=f"{namespace}/{name} was never accepted and applied",
    )


def edit_invalidly(kube: Any, namespace: str, name: str) -> None:
    """The edit the CRD admits (a quantity is int-or-string) and the model refuses; wait
    until the daemon reports it kept the last accepted spec."""
    kube.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"spec": {"resources": {"requests": {"cpu": "lots"}}}},
    )
    eventually(
        lambda: _accepted(kube, namespace, name) == "False",
        timeout=120,
        message=f"the invalid edit of {namespace}/{name} was never reported",
    )
