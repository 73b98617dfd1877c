"""Autoscaled workers' replicas: a forced server-side apply of a ``Scale`` under
:data:`AUTOSCALER_FIELD_MANAGER`, whose ownership in ``managedFields`` keeps the engine's
apply off the field and tells the daemon which counts it claimed (:func:`scale_owner_of`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twc.kube.client import KubeClient

AUTOSCALER_FIELD_MANAGER = "twc-autoscaler"


def scale_owner_of(deployment: Mapping[str, Any]) -> list[str]:
    """The field managers that own a Deployment's ``spec.replicas`` (usually one)."""
    entries = (deployment.get("metadata") or {}).get("managedFields") or ()
    return sorted(
        {
            str(entry.get("manager"))
            for entry in entries
            if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
        }
    )


class ReplicaScaler:
    """Writes worker replicas through the scale subresource."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Apply ``replicas`` to the Deployment (raises when gone or refused)."""
        body = {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": int(replicas)},
        }
        self.kube.apps.patch_namespaced_deployment_scale(
            name,
            namespace,
            body,
            field_manager=AUTOSCALER_FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
