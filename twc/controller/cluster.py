"""The daemon's own access to the Kubernetes API: config, worker replicas, secrets.

The daemon reaches the same API server as the engine's Kubernetes provider:
``KUBECONFIG`` (or ``~/.kube/config``) when set, else the pod's service account. The
calls it makes are exactly those the ClusterRole in ``deploy/daemon`` grants: list
Deployments, get Secrets, list/watch kmsvc Queues, get/create/update Leases.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from pathlib import Path
from typing import Any

from twc.builders import COMPONENT_WORKER, LABEL_COMPONENT, LABEL_MANAGED_BY, MANAGED_BY

__all__ = ["Cluster", "api_client_from_environment"]

logger = logging.getLogger(__name__)

WORKER_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_COMPONENT}={COMPONENT_WORKER}"


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

    def __init__(self, api_client: Any) -> None:
        """Wrap ``api_client`` (a ``kubernetes.client.ApiClient``)."""
        from kubernetes import client

        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)

    def worker_replicas(self) -> dict[str, int]:
        """``spec.replicas`` of every twc worker Deployment, keyed ``<namespace>/<name>``."""
        # Read the raw JSON: turning every Deployment into the client's models was half
        # of a no-op iteration at 100 workers, for one integer each (bench/results.md).
        response = self.apps.list_deployment_for_all_namespaces(
            label_selector=WORKER_SELECTOR, _preload_content=False
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

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes]:
        """A Secret's decoded data.

        Raises:
            LookupError: The Secret does not exist.
        """
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                raise LookupError(f"secret {namespace}/{name} not found") from exc
            raise
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def close(self) -> None:
        """Close the connection pool."""
        self.api_client.close()
