"""A small Kubernetes client for the embedded environment and the tests.

Built on twc's own client (:mod:`twc.kube.client`: the same factory and default
timeouts as the product), with the few operations the test bed needs spelled out: apply
a CRD and wait until it is served, read and patch objects, list custom objects. Each
``Kube`` owns its own ``ApiClient`` so several environments can coexist in one process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from twc.kube.client import KubeClient, api_client, status_of


class Kube(KubeClient):
    """Typed-enough access to one API server through a kubeconfig."""

    def __init__(self, kubeconfig: Path | str) -> None:
        self.kubeconfig = str(kubeconfig)
        super().__init__(api_client(self.kubeconfig))
        self.ext = self.extensions

    # ------------------------------------------------------------------ CRDs
    def apply_crd(self, crd: dict[str, Any], timeout: float = 30.0) -> None:
        """Create or replace a CustomResourceDefinition and wait until it is Established."""
        name = crd["metadata"]["name"]
        try:
            current = self.ext.read_custom_resource_definition(name)
            body = dict(crd)
            body["metadata"] = dict(
                crd["metadata"], resourceVersion=current.metadata.resource_version
            )
            self.ext.replace_custom_resource_definition(name, body)
        except Exception as exc:
            if status_of(exc) != 404:
                raise
            self.ext.create_custom_resource_definition(crd)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            obj = self.ext.read_custom_resource_definition(name)
            conditions = (obj.status.conditions if obj.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                return
            time.sleep(0.2)
        raise TimeoutError(f"CRD {name} not Established after {timeout:.0f} s")

    # ------------------------------------------------------------ namespaces
    def ensure_namespace(self, name: str) -> None:
        """Create a namespace if it does not exist."""
        try:
            self.core.create_namespace({"metadata": {"name": name}})
        except Exception as exc:
            if status_of(exc) != 409:
                raise

    # --------------------------------------------------------------- objects
    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment as a plain camelCase dict, or None."""
        try:
            obj = self.apps.read_namespaced_deployment(name, namespace)
        except Exception as exc:
            if status_of(exc) == 404:
                return None
            raise
        return dict(self.api_client.sanitize_for_serialization(obj))

    def list_deployments(self, label_selector: str = "") -> list[dict[str, Any]]:
        """All Deployments in all namespaces, as plain dicts."""
        items = self.apps.list_deployment_for_all_namespaces(label_selector=label_selector).items
        return [dict(self.api_client.sanitize_for_serialization(d)) for d in items]

    def list_custom(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str | None = None,
        label_selector: str = "",
    ) -> list[dict[str, Any]]:
        """Custom objects (all namespaces unless one is given)."""
        if namespace:
            res = self.custom.list_namespaced_custom_object(
                group, version, namespace, plural, label_selector=label_selector
            )
        else:
            res = self.custom.list_cluster_custom_object(
                group, version, plural, label_selector=label_selector
            )
        return list(res.get("items", []))
