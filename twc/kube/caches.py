"""The daemon's watch caches of worker Deployments (trimmed by :func:`deployment_kept`)
and Secrets (a digest per key, never a value), read from memory each iteration."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from twc.kube.client import KubeClient
from twc.kube.watch import ObjectWatcher, Resource, WatchSettings, builtin_lister
from twc.kube.workloads import (
    AUTOSCALER_FIELD_MANAGER,
    WORKER_SELECTOR,
    deployment_kept,
    of_stack,
    worker_deployments,
    worker_replicas,
)
from twc.spec import label_value
from twc.spec.labels import owner_stack

SECRET_FIELD_SELECTOR = "type!=kubernetes.io/service-account-token,type!=helm.sh/release.v1"  # noqa: S105 - a field selector, not a password

Objects = Mapping[str, Mapping[str, Any]]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _secret_kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "digests": {str(k): _digest(str(v)) for k, v in sorted((obj.get("data") or {}).items())},
    }


_READINGS: dict[str, Callable[[Objects], Any]] = {
    "replicas": worker_replicas,
    "deployments": worker_deployments,
    "scaled": lambda found: {
        k: True for k, d in found.items() if AUTOSCALER_FIELD_MANAGER in d["replicaOwners"]
    },
}


class _Cache(ObjectWatcher):
    """An :class:`ObjectWatcher` of a built-in kind, read from memory."""

    def __init__(self, list_all: Callable[..., Any], resource: Resource, resync: float) -> None:
        super().__init__(None, resource, WatchSettings(resync), lister=builtin_lister(list_all))

    def wait_listed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the first list (started without a wakeup:
        the cache's own, first set by that list); whether it happened."""
        return self._wakeup.wait(timeout)

    def _listed(self) -> Objects:
        found = self.by_key()
        if found is None:
            raise LookupError(f"{self.plural} not listed yet: {self.failure() or 'waiting'}")
        return found


class DeploymentCache(_Cache):
    """Every twc worker Deployment of one stack, from a watch."""

    def __init__(
        self, kube: KubeClient, *, resync_interval: float, stack: str | None = None
    ) -> None:
        """``stack``: its Deployments and unlabelled ones (``None``: every worker's)."""
        self._stack = label_value(owner_stack(stack)) if stack is not None else None
        kept, ignored = deployment_kept, lambda _: None
        resource = Resource(
            "apps", "v1", "deployments", WORKER_SELECTOR, content=ignored, keep=kept
        )
        super().__init__(kube.apps.list_deployment_for_all_namespaces, resource, resync_interval)
        self._readings: dict[str, tuple[object, Mapping[str, Any]]] = {}

    def _mine(self) -> Objects:
        found = self._listed()
        if self._stack is None:
            return found
        return {k: dep for k, dep in found.items() if of_stack(dep, self._stack)}

    def read(self, reading: str) -> Any:
        """One reading of the cache (LookupError before the first list): ``replicas``
        (:func:`worker_replicas`), ``deployments`` (:func:`worker_deployments`) or ``scaled``
        (the Deployments whose ``spec.replicas`` the autoscaler's field manager owns)."""
        return _READINGS[reading](self._mine())

    def by_namespace(self, reading: str) -> Mapping[str, Any]:
        """:meth:`read` per namespace; worked out once per change of the cache (each change
        makes a new mapping), however many shards read it."""
        objects = self._objects
        if (last := self._readings.get(reading)) is None or last[0] is not objects:
            groups: dict[str, dict[str, Mapping[str, Any]]] = {}
            for key, dep in self._mine().items():
                groups.setdefault(key.partition("/")[0], {})[key] = dep
            last = (objects, {ns: _READINGS[reading](group) for ns, group in groups.items()})
            self._readings[reading] = last
        return last[1]


def digests_by_name(
    read: Callable[[str, str], Mapping[str, bytes]],
) -> Callable[[str, str], dict[str, bytes]]:
    """Per-key digests of a direct read, as :class:`SecretCache` digests its Secrets."""

    def digests(namespace: str, name: str) -> dict[str, bytes]:
        data = read(namespace, name)
        return {k: _digest(base64.b64encode(v).decode()).encode() for k, v in sorted(data.items())}

    return digests


class SecretCache(_Cache):
    """Per-key digests of the cluster's Secrets (never their values), from a watch."""

    def __init__(self, kube: KubeClient, *, resync_interval: float) -> None:
        resource = Resource(
            "",
            "v1",
            "secrets",
            field_selector=SECRET_FIELD_SELECTOR,
            content=lambda obj: obj.get("digests"),
            keep=_secret_kept,
        )
        super().__init__(kube.core.list_secret_for_all_namespaces, resource, resync_interval)

    def reader(
        self, fallback: Callable[[str, str], Mapping[str, bytes]]
    ) -> Callable[[str, str], dict[str, bytes]]:
        """:meth:`digests` while the cache is listed, else ``fallback`` digested the same."""
        direct = digests_by_name(fallback)

        def read(namespace: str, name: str) -> dict[str, bytes]:
            if self.by_key() is not None:
                return self.digests(namespace, name)
            return direct(namespace, name)

        return read

    def digests(self, namespace: str, name: str) -> dict[str, bytes]:
        """The Secret's per-key digests; LookupError when absent (or not listed yet)."""
        secret = self._listed().get(f"{namespace}/{name}")
        if secret is None:
            raise LookupError(f"secret {namespace}/{name} not found")
        return {k: v.encode() for k, v in secret["digests"].items()}
