"""The daemon's own access to the Kubernetes API: config, worker replicas, secrets.

The daemon reaches the same API server as the engine's Kubernetes provider:
``KUBECONFIG`` (or ``~/.kube/config``) when set, else the pod's service account. The
calls it makes are exactly those the ClusterRole in ``deploy/daemon`` grants: list
Deployments, get Secrets, list/watch kmsvc Queues, TemporalWorkers, Connections and
ClusterConnections, patch TemporalWorker status and connection finalizers, create Events,
get/create/update Leases, and for a new worker's early apply (``twc.controller.early``)
get/patch/delete of Deployments and ServiceAccounts, which the engine needs anyway.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twc.builders import COMPONENT_WORKER, LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY
from twc.controller.early import ObjectRef

__all__ = ["Cluster", "api_client_from_environment"]

logger = logging.getLogger(__name__)

WORKER_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_WORKER}"
_API_VERSION = {"Deployment": "apps/v1", "ServiceAccount": "v1"}
# (connect, read) seconds for each of the loop's own calls: without a timeout a hung API server
# (accepting connections, never answering) would block the reconcile loop for good.
REQUEST_TIMEOUT = (5.0, 30.0)


def api_client_from_environment() -> Any | None:
    """A ``kubernetes.client.ApiClient`` from the environment, or ``None`` without one.

    ``KUBECONFIG`` (or ``~/.kube/config``) wins over the in-cluster service account, so
    a developer's shell and the engine agree on the cluster.
    """
    from kubernetes import client, config

    kubeconfig = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if os.environ.get("KUBECONFIG") or Path(kubeconfig).exists():
        return config.new_client_from_config(config_file=kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    return None


class Cluster:
    """Typed-enough API groups over one ``ApiClient``."""

    def __init__(
        self, api_client: Any, *, request_timeout: tuple[float, float] = REQUEST_TIMEOUT
    ) -> None:
        """Wrap ``api_client`` (a ``kubernetes.client.ApiClient``).

        Args:
            api_client: The client.
            request_timeout: ``(connect, read)`` seconds for each call the loop makes.
        """
        from kubernetes import client

        self.api_client = api_client
        self.request_timeout = request_timeout
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)

    def worker_replicas(self) -> dict[str, int]:
        """``spec.replicas`` of every twc worker Deployment, keyed ``<namespace>/<name>``."""
        # Read the raw JSON: turning every Deployment into the client's models was half
        # of a no-op iteration at 100 workers, for one integer each (bench/results.md).
        response = self.apps.list_deployment_for_all_namespaces(
            label_selector=WORKER_SELECTOR,
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )
        found = json.loads(response.data)
        out: dict[str, int] = {}
        for dep in found.get("items") or []:
            meta = dep.get("metadata") or {}
            replicas = (dep.get("spec") or {}).get("replicas")
            out[f"{meta.get('namespace')}/{meta.get('name')}"] = int(
                1 if replicas is None else replicas
            )
        return out

    def worker_deployments(self) -> dict[str, tuple[int, int]]:
        """``(spec.replicas, status.readyReplicas)`` of every twc worker Deployment."""
        response = self.apps.list_deployment_for_all_namespaces(
            label_selector=WORKER_SELECTOR,
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )
        found = json.loads(response.data)
        out: dict[str, tuple[int, int]] = {}
        for dep in found.get("items") or []:
            meta = dep.get("metadata") or {}
            replicas = (dep.get("spec") or {}).get("replicas")
            ready = (dep.get("status") or {}).get("readyReplicas")
            out[f"{meta.get('namespace')}/{meta.get('name')}"] = (
                int(1 if replicas is None else replicas),
                int(ready or 0),
            )
        return out

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]:
        """A Secret's decoded data.

        Raises:
            LookupError: The Secret does not exist.
        """
        try:
            secret = self.core.read_namespaced_secret(
                name, namespace, _request_timeout=self.request_timeout
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                raise LookupError(f"secret {namespace}/{name} not found") from exc
            raise
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    # ------------------------------------------------------------ early apply
    _APPLY = "application/apply-patch+yaml"

    def apply(self, obj: Mapping[str, Any], field_manager: str) -> None:
        """Server-side apply a worker's ``Deployment`` or ``ServiceAccount`` (no force: a
        field another manager set to another value is a conflict, not taken over)."""
        meta = obj["metadata"]
        kwargs = {
            "field_manager": field_manager,
            "_content_type": self._APPLY,
            "_request_timeout": self.request_timeout,
        }
        if obj["kind"] == "Deployment":
            self.apps.patch_namespaced_deployment(
                meta["name"], meta["namespace"], dict(obj), **kwargs
            )
        elif obj["kind"] == "ServiceAccount":
            self.core.patch_namespaced_service_account(
                meta["name"], meta["namespace"], dict(obj), **kwargs
            )
        else:  # pragma: no cover - early apply builds only these two kinds
            raise ValueError(f"cannot apply a {obj['kind']} early")

    def exists(self, ref: ObjectRef) -> bool:
        """Whether the object is in the API server."""
        return self._read(ref) is not None

    def release(self, ref: ObjectRef, field_manager: str) -> bool:
        """Drop ``field_manager``'s fields of the object: apply an empty body under it.

        Fields another manager (the engine's) also owns stay; the object is read first
        so that an object deleted meanwhile is not created again by the apply.

        Returns:
            False when the object is gone.
        """
        current = self._read(ref)
        if current is None:
            return False
        managers = {m.get("manager") for m in current["metadata"].get("managedFields") or []}
        if field_manager not in managers:
            return True
        body = {
            "apiVersion": current.get("apiVersion") or _API_VERSION[ref.kind],
            "kind": ref.kind,
            "metadata": {"name": ref.name, "namespace": ref.namespace},
        }
        self.apply(body, field_manager)
        return True

    def delete(self, ref: ObjectRef) -> None:
        """Delete the object; already gone is fine."""
        try:
            if ref.kind == "Deployment":
                self.apps.delete_namespaced_deployment(
                    ref.name, ref.namespace, _request_timeout=self.request_timeout
                )
            else:
                self.core.delete_namespaced_service_account(
                    ref.name, ref.namespace, _request_timeout=self.request_timeout
                )
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise

    def managed_by(self, field_manager: str) -> list[ObjectRef]:
        """twc worker Deployments (and their ServiceAccounts) ``field_manager`` still
        owns fields of: what a daemon killed between an early apply and its ``up`` left."""
        response = self.apps.list_deployment_for_all_namespaces(
            label_selector=WORKER_SELECTOR,
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )
        found: list[ObjectRef] = []
        for dep in json.loads(response.data).get("items") or []:
            meta = dep.get("metadata") or {}
            managers = {m.get("manager") for m in meta.get("managedFields") or []}
            if field_manager in managers:
                ns, name = str(meta.get("namespace")), str(meta.get("name"))
                found += [ObjectRef("ServiceAccount", ns, name), ObjectRef("Deployment", ns, name)]
        return found

    def _read(self, ref: ObjectRef) -> dict[str, Any] | None:
        try:
            if ref.kind == "Deployment":
                response = self.apps.read_namespaced_deployment(
                    ref.name,
                    ref.namespace,
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
            else:
                response = self.core.read_namespaced_service_account(
                    ref.name,
                    ref.namespace,
                    _preload_content=False,
                    _request_timeout=self.request_timeout,
                )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise
        data: dict[str, Any] = json.loads(response.data)
        return data

    def close(self) -> None:
        """Close the connection pool."""
        self.api_client.close()
