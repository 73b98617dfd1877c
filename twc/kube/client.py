"""One way to reach the API server: the client factory and its default timeouts.

Every part of twc that talks to Kubernetes (the daemon, ``twc up``/``preview``/``status``,
the program under plain ``pulumi up``, the dynamic providers, the test bed) builds its
client here, so all of them agree on which cluster they mean and none of them can hang:

* **Which cluster.** An explicit kubeconfig wins, then ``KUBECONFIG``, then
  ``~/.kube/config``, then the pod's service account. The kubernetes provider of the
  engine reads the same variables in the same order, so the engine and twc's own calls
  never disagree about the cluster.
* **No call without a timeout.** :class:`TimeoutApiClient` gives every request that does
  not set its own ``_request_timeout`` the default ``(connect, read)`` seconds. A hung
  API server (connections accepted, no answer) then fails a call, which the caller
  reports and retries, instead of blocking a thread for good. Watches set a longer
  timeout of their own (the server's watch timeout plus a margin); the Lease calls a
  shorter one, without retries (``retries=0``), so a round of the election always ends
  before the leader's renew deadline.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_TIMEOUT",
    "KubeClient",
    "NoClusterError",
    "TimeoutApiClient",
    "api_client",
    "kube_client",
    "read_json",
    "status_of",
]

DEFAULT_TIMEOUT = (5.0, 30.0)
"""``(connect, read)`` seconds for a call that sets no timeout of its own."""


class NoClusterError(LookupError):
    """Neither a kubeconfig nor an in-cluster service account is available."""


def _timeout_client_class() -> type:
    from kubernetes import client

    class _TimeoutApiClient(client.ApiClient):  # type: ignore[misc]  # kubernetes ships no types
        default_timeout: tuple[float, float] = DEFAULT_TIMEOUT

        def call_api(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("_request_timeout") is None:
                kwargs["_request_timeout"] = self.default_timeout
            return super().call_api(*args, **kwargs)

    return _TimeoutApiClient


_CLASS: type | None = None


def TimeoutApiClient(configuration: Any, timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> Any:
    """A ``kubernetes.client.ApiClient`` whose calls time out by default.

    The class is built on first use, so importing this module does not import the
    kubernetes client (the pure layers and ``twc validate`` stay fast).
    """
    global _CLASS
    if _CLASS is None:
        _CLASS = _timeout_client_class()
    api = _CLASS(configuration=configuration)
    api.default_timeout = timeout
    return api


def api_client(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    retries: int | None = None,
) -> Any:
    """The ``ApiClient`` for the cluster twc works on.

    Args:
        kubeconfig: A kubeconfig file to use; otherwise ``KUBECONFIG``, then
            ``~/.kube/config``, then the in-cluster service account.
        timeout: Default ``(connect, read)`` seconds of each call.
        retries: Retries of a failed connection or read (``None``: the HTTP pool's
            default of three, so a read may take up to four timeouts; ``0``: none).

    Raises:
        NoClusterError: No kubeconfig exists and this is not a pod.
    """
    from kubernetes import client, config

    path = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG")
    if not path and (Path.home() / ".kube" / "config").exists():
        path = str(Path.home() / ".kube" / "config")
    configuration = client.Configuration()
    if path:
        config.load_kube_config(config_file=path, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        raise NoClusterError("no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a pod")
    if retries is not None:
        configuration.retries = retries
    return TimeoutApiClient(configuration, timeout)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call (``None`` when it never got an answer)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def read_json(read: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """What a typed client's ``read_*`` call returns, as the API's own JSON (camelCase,
    no model objects), or ``None`` when the object is absent (404)."""
    try:
        response = read(*args, _preload_content=False)
    except Exception as exc:
        if status_of(exc) == 404:
            return None
        raise
    data: dict[str, Any] = json.loads(response.data)
    return data


class KubeClient:
    """The API groups twc uses, over one :func:`api_client`."""

    def __init__(self, api: Any) -> None:
        """Wrap ``api`` (from :func:`api_client`)."""
        from kubernetes import client

        self.api_client = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.coordination = client.CoordinationV1Api(api)
        self.extensions = client.ApiextensionsV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)

    def close(self) -> None:
        """Close the connection pool."""
        self.api_client.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def kube_client(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    retries: int | None = None,
) -> KubeClient:
    """A :class:`KubeClient` for the cluster (see :func:`api_client`)."""
    return KubeClient(api_client(kubeconfig, timeout=timeout, retries=retries))
