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
* **Every write fenced.** A leader's writes go through :meth:`KubeClient.fenced`: right
  before each ``POST``/``PUT``/``PATCH``/``DELETE`` it asks how much of its Lease term is
  left, refuses the call (:class:`~twc.kube.lease.NotLeadingError`) when none is, and
  gives the call a timeout shorter than what is left, without retries. Every writer
  built on that client (scale, views, status, finalizers, Events, the record, early
  apply and its deletes) is fenced call by call, not once per batch.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twc.kube.lease import NotLeadingError

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
FENCE_MARGIN = 0.1
"""Seconds of a term a fenced write leaves unused: its timeout ends this much before."""
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""The methods a fenced client checks against the term."""


class NoClusterError(LookupError):
    """Neither a kubeconfig nor an in-cluster service account is available."""


def _timeout_client_class() -> type:
    from kubernetes import client

    class _TimeoutApiClient(client.ApiClient):  # type: ignore[misc]  # kubernetes ships no types
        default_timeout: tuple[float, float] = DEFAULT_TIMEOUT
        term_left: Callable[[], float] | None = None
        writes: Any = None  # the fenced writes' REST client: no retries

        def call_api(
            self,
            method: str,
            url: str,
            header_params: Any = None,
            body: Any = None,
            post_params: Any = None,
            _request_timeout: Any = None,
        ) -> Any:
            timeout = _request_timeout or self.default_timeout
            if self.term_left is None or method.upper() not in WRITES:
                return super().call_api(
                    method, url, header_params, body, post_params, _request_timeout=timeout
                )
            return self.writes.request(
                method,
                url,
                headers=header_params,
                body=body,
                post_params=post_params,
                _request_timeout=fenced_timeout(timeout, self.term_left()),
            )

        def close(self) -> None:
            super().close()
            if self.writes is not None:
                self.writes.close()

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


def fenced_timeout(timeout: float | tuple[float, float], left: float) -> float:
    """The total timeout of a write with ``left`` seconds of the term remaining.

    Raises:
        NotLeadingError: No term is left to write in.
    """
    total = timeout if isinstance(timeout, (int, float)) else sum(timeout)
    if left - FENCE_MARGIN <= 0:
        raise NotLeadingError("the Lease term is over: not writing")
    return min(float(total), left - FENCE_MARGIN)


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

    def fenced(self, term_left: Callable[[], float]) -> KubeClient:
        """This client with every write fenced by a Lease term (reads are unchanged and
        share this client's connections).

        Args:
            term_left: Seconds left in the term, asked right before each write (``inf``:
                no Lease fences the writes; 0 or less: no term).
        """
        from kubernetes.client import rest

        api = copy.copy(self.api_client)
        configuration = copy.copy(api.configuration)
        configuration.retries = 0  # a retry would outlast the timeout given
        api.writes = rest.RESTClientObject(configuration)
        api.term_left = term_left
        return KubeClient(api)

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
