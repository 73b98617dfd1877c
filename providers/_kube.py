"""Cluster access for dynamic providers (imported lazily, inside provider methods).

The provider process inherits the engine's environment, so it reaches the same API
server the kubernetes provider uses: ``KUBECONFIG`` (or ~/.kube/config), else the
in-cluster service account when the daemon runs in a pod.
"""

from __future__ import annotations

import base64
import os


def read_secret_data(namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's decoded data.

    Raises:
        LookupError: the Secret does not exist.
    """
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        config.load_incluster_config()
        api = client.ApiClient()
    else:
        api = config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))
    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            raise LookupError(f"secret {namespace}/{name} not found") from exc
        raise
    finally:
        api.close()
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
