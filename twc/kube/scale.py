"""Autoscaled workers' replicas, written through each Deployment's ``scale`` subresource.

The daemon owns the replicas of an autoscaled worker; the program never sets them (its
Deployment leaves ``spec.replicas`` out and ignores changes to it). The daemon writes
them by a server-side apply of an ``autoscaling/v1`` ``Scale`` under its own field
manager, :data:`AUTOSCALER_FIELD_MANAGER`, with ``force``: the count is the
autoscaler's to decide, so a manager that set it before (an older program's engine, a
``kubectl scale``) gives it up. The API server records the ownership on the Deployment
(``managedFields`` entry with ``subresource: scale``), which is how the engine's next
server-side apply knows to leave the field alone, and how the daemon knows which
counts it already claimed (:func:`scale_owner_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twc.kube.client import KubeClient

__all__ = ["AUTOSCALER_FIELD_MANAGER", "ReplicaScaler", "owns_replicas", "scale_owner_of"]

AUTOSCALER_FIELD_MANAGER = "twc-autoscaler"
"""The field manager of the replicas the daemon's autoscaler writes."""
_APPLY = "application/apply-patch+yaml"


def owns_replicas(entry: Mapping[str, Any]) -> bool:
    """Whether one ``managedFields`` entry owns ``spec.replicas``."""
    fields = entry.get("fieldsV1")
    spec = fields.get("f:spec") if isinstance(fields, Mapping) else None
    return isinstance(spec, Mapping) and "f:replicas" in spec


def scale_owner_of(deployment: Mapping[str, Any]) -> list[str]:
    """The field managers that own a Deployment's ``spec.replicas`` (usually one)."""
    meta = deployment.get("metadata")
    entries = meta.get("managedFields") if isinstance(meta, Mapping) else None
    return sorted(
        {
            str(entry.get("manager"))
            for entry in entries or ()
            if isinstance(entry, Mapping) and owns_replicas(entry)
        }
    )


class ReplicaScaler:
    """Writes worker replicas through the scale subresource."""

    def __init__(self, kube: KubeClient, field_manager: str = AUTOSCALER_FIELD_MANAGER) -> None:
        """Scale through ``kube`` as ``field_manager``."""
        self.kube = kube
        self.field_manager = field_manager

    def scale(self, namespace: str, name: str, replicas: int) -> None:
        """Apply ``replicas`` to the Deployment ``namespace/name``.

        Raises:
            kubernetes.client.ApiException: The Deployment is gone (404) or the write
                was refused.
        """
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
            field_manager=self.field_manager,
            force=True,
            _content_type=_APPLY,
        )
