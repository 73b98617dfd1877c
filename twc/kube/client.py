"""One way to reach the API server: an explicit kubeconfig, ``KUBECONFIG``,
``~/.kube/config``, then the pod's service account (the provider's order). A call without
``_request_timeout`` gets :data:`DEFAULT_TIMEOUT`; through :meth:`KubeClient.fenced`,
every write is refused (:class:`NotLeadingError`) when the Lease term is
over, and otherwise times out before the term ends, without retries."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

DEFAULT_TIMEOUT = (5.0, 30.0)
T = TypeVar("T")
FENCE_MARGIN = 0.1  # seconds of a term a fenced write leaves unused
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class NoClusterError(LookupError):
    """Neither a kubeconfig nor an in-cluster service account is available."""


class NotLeadingError(RuntimeError):
    """An engine run or a fenced write was about to start without a valid term."""


@functools.cache
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
            args = (method, url, header_params, body, post_params)
            if self.term_left is None or method.upper() not in WRITES:
                return super().call_api(*args, _request_timeout=timeout)
            total = timeout if isinstance(timeout, (int, float)) else sum(timeout)
            left = self.term_left() - FENCE_MARGIN
            if left <= 0:
                raise NotLeadingError("the Lease term is over: not writing")
            return self.writes.request(*args, _request_timeout=min(float(total), left))

        def close(self) -> None:
            super().close()
            if self.writes is not None:
                self.writes.close()

    return _TimeoutApiClient


def TimeoutApiClient(configuration: Any, timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> Any:
    """A ``kubernetes.client.ApiClient`` whose calls time out by default."""
    api = _timeout_client_class()(configuration=configuration)
    api.default_timeout = timeout
    return api


def api_client(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    retries: int | None = None,
) -> Any:
    """The ``ApiClient`` for the cluster twc works on (``retries``: ``None``, the pool's
    three); NoClusterError when no kubeconfig exists and this is not a pod."""
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


@contextlib.contextmanager
def tolerating(*statuses: int) -> Iterator[None]:
    """Let an API call fail with one of ``statuses`` (a delete's 404: already gone)."""
    try:
        yield
    except Exception as exc:
        if status_of(exc) not in statuses:
            raise


def unless_404(call: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """``call(*args, **kwargs)``, or ``None`` when the API server answers 404."""
    with tolerating(404):
        return call(*args, **kwargs)
    return None


def annotations_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """A copy of an object's (JSON) annotations, empty when it or they are absent."""
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def read_json(read: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """A typed ``read_*`` call's answer as the API's own JSON, or ``None`` on 404."""
    response = unless_404(read, *args, _preload_content=False)
    return None if response is None else dict(json.loads(response.data))


class KubeClient(contextlib.AbstractContextManager["KubeClient"]):
    """The API groups twc uses, over one :func:`api_client` (closed on leaving a ``with``)."""

    def __init__(self, api: Any) -> None:
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
        """This client with every write fenced by ``term_left()`` (``inf``: no Lease)."""
        from kubernetes.client import rest

        api = copy.copy(self.api_client)
        configuration = copy.copy(api.configuration)
        configuration.retries = 0  # a retry would outlast the timeout given
        api.writes = rest.RESTClientObject(configuration)
        api.term_left = term_left
        return KubeClient(api)

    def close(self) -> None:
        self.api_client.close()

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
