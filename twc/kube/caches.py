"""The daemon's watch caches of built-in kinds: worker Deployments and Secrets.

An iteration reads replicas and credential digests from memory instead of listing them.
What is held is trimmed as it arrives: a Deployment as :func:`deployment_kept` keeps it,
a Secret as its name, namespace and a digest per key (never a value).
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from twc.builders import LABEL_STACK
from twc.kube.client import KubeClient
from twc.kube.scale import AUTOSCALER_FIELD_MANAGER
from twc.kube.watch import ObjectWatcher, builtin_lister
from twc.kube.workloads import (
    WORKER_SELECTOR,
    deployment_kept,
    worker_deployments,
    worker_replicas,
)
from twc.spec import label_value
from twc.spec.labels import owner_stack

_T = TypeVar("_T")

__all__ = ["SECRET_FIELD_SELECTOR", "DeploymentCache", "SecretCache", "digests_by_name"]

SECRET_FIELD_SELECTOR = "type!=kubernetes.io/service-account-token,type!=helm.sh/release.v1"  # noqa: S105 - a field selector, not a password
"""Secrets that can never be a connection's credentials stay out of the cache."""


def _secret_kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    data = obj.get("data") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "digests": {str(k): _digest(str(v)) for k, v in sorted(data.items())},
    }


def _digest(text: str) -> str:
    # The base64 text digested as it is: a changed value changes its digest.
    return hashlib.sha256(text.encode()).hexdigest()


def _nothing(_obj: Mapping[str, Any]) -> object:
    # The loop reads these caches when it runs and is never woken by them.
    return None


def _secret_content(obj: Mapping[str, Any]) -> object:
    return obj.get("digests")


class _Cache:
    """One :class:`ObjectWatcher` with a wait for its first list."""

    def __init__(self, watcher: ObjectWatcher) -> None:
        self.watcher = watcher

    def start(self, wakeup: threading.Event | None = None) -> None:
        """Start listing and watching."""
        self.watcher.start(wakeup or threading.Event())

    def stop(self) -> None:
        """Stop watching."""
        self.watcher.stop()

    def failure(self) -> str | None:
        """Why the last list or watch failed, until a list succeeds again."""
        return self.watcher.failure()

    def _objects(self) -> Mapping[str, Mapping[str, Any]]:
        found = self.watcher.by_key()
        if found is None:
            failure = self.watcher.failure()
            raise LookupError(
                f"{self.watcher.plural} not listed yet" + (f": {failure}" if failure else "")
            )
        return found

    def last_answer(self) -> float:
        """When the API server last answered this cache (see
        :meth:`ObjectWatcher.last_answer`)."""
        return self.watcher.last_answer()

    @property
    def quiet_window(self) -> float:
        """The longest a healthy cache goes without an answer, in seconds."""
        return self.watcher.quiet_window

    @property
    def kind(self) -> str:
        """What the cache holds (its resource's plural)."""
        return self.watcher.plural

    def wait_listed(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> bool:
        """Wait up to ``timeout`` seconds for the first list; whether it happened."""
        deadline = clock() + timeout
        while self.watcher.snapshot() is None and clock() < deadline:
            time.sleep(0.05)
        return self.watcher.snapshot() is not None


class DeploymentCache(_Cache):
    """Every twc worker Deployment, from a watch."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        resync_interval: float,
        stack: str | None = None,
        watch_timeout: int = 60,
    ) -> None:
        """Prepare the watch (started by :meth:`start`).

        Args:
            kube: The cluster.
            resync_interval: Seconds between re-lists under the watch.
            watch_timeout: Server-side timeout of one watch request: the longest the
                cache goes without an answer while the API server is healthy.
            stack: The stack whose workers these are: its Deployments and those without
                any stack label (made before twc labelled them) are read, another
                stack's are not. ``None``: every twc worker Deployment.
        """
        self._stack = label_value(owner_stack(stack)) if stack is not None else None
        super().__init__(
            ObjectWatcher(
                None,
                group="apps",
                version="v1",
                plural="deployments",
                resync_interval=resync_interval,
                watch_timeout=watch_timeout,
                label_selector=WORKER_SELECTOR,
                content=_nothing,
                lister=builtin_lister(kube.apps.list_deployment_for_all_namespaces),
                keep=deployment_kept,
            )
        )

    def _read(self, derive: Callable[[Mapping[str, Mapping[str, Any]]], _T]) -> _T:
        return derive(self._mine(self._objects()))

    def _mine(self, found: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
        if self._stack is None:
            return found
        return {
            key: dep
            for key, dep in found.items()
            if (dep["metadata"].get("labels") or {}).get(LABEL_STACK) in (self._stack, None)
        }

    def by_namespace(self, reading: str) -> Mapping[str, Any]:
        """One of the readings (``replicas``: :meth:`worker_replicas`, ``deployments``:
        :meth:`worker_deployments`, ``scaled``: :meth:`scaled`) per namespace.

        Raises:
            LookupError: Not listed yet.
        """
        groups: dict[str, dict[str, Mapping[str, Any]]] = {}
        for key, dep in self._mine(self._objects()).items():
            groups.setdefault(key.partition("/")[0], {})[key] = dep
        derive = _READINGS[reading]
        return {ns: derive(group) for ns, group in groups.items()}

    def worker_replicas(self) -> dict[str, int]:
        """``spec.replicas`` of every running worker (see :func:`worker_replicas`).

        Raises:
            LookupError: Not listed yet (the count is unknown, not zero).
        """
        return self._read(worker_replicas)

    def worker_deployments(self) -> dict[str, tuple[int, int]]:
        """``(spec.replicas, status.readyReplicas)`` of every worker Deployment."""
        return self._read(worker_deployments)

    def scaled(self) -> list[str]:
        """Worker Deployments whose ``spec.replicas`` the autoscaler's field manager owns."""
        return self._read(_scaled)


def _scaled(found: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(
        key for key, dep in found.items() if AUTOSCALER_FIELD_MANAGER in dep["replicaOwners"]
    )


_READINGS: dict[str, Callable[[Mapping[str, Mapping[str, Any]]], Any]] = {
    "replicas": worker_replicas,
    "deployments": worker_deployments,
    "scaled": _scaled,
}


def digests_by_name(
    read: Callable[[str, str], Mapping[str, bytes]],
) -> Callable[[str, str], dict[str, bytes]]:
    """A Secret's per-key digests from a direct read by name (``read`` gives its decoded
    data), digested as :class:`SecretCache` digests what it watches, so the two can stand
    in for each other without changing a digest."""

    def digests(namespace: str, name: str) -> dict[str, bytes]:
        data = read(namespace, name)
        return {k: _digest(base64.b64encode(v).decode()).encode() for k, v in sorted(data.items())}

    return digests


class SecretCache(_Cache):
    """Per-key digests of the cluster's Secrets (never their values), from a watch."""

    def __init__(
        self, kube: KubeClient, *, resync_interval: float, watch_timeout: int = 60
    ) -> None:
        """Prepare the watch (started by :meth:`start`); ``watch_timeout`` as for
        :class:`DeploymentCache`."""
        super().__init__(
            ObjectWatcher(
                None,
                group="",
                version="v1",
                plural="secrets",
                resync_interval=resync_interval,
                watch_timeout=watch_timeout,
                field_selector=SECRET_FIELD_SELECTOR,
                content=_secret_content,
                lister=builtin_lister(kube.core.list_secret_for_all_namespaces),
                keep=_secret_kept,
            )
        )

    def reader(
        self, fallback: Callable[[str, str], Mapping[str, bytes]]
    ) -> Callable[[str, str], dict[str, bytes]]:
        """:meth:`digests` while the cache is listed, else ``fallback`` (a direct read,
        e.g. where the daemon may read Secrets only in some namespaces and so cannot
        list them cluster-wide) digested the same way, so switching between the two
        changes no digest."""

        direct = digests_by_name(fallback)

        def read(namespace: str, name: str) -> dict[str, bytes]:
            if self.watcher.by_key() is not None:
                return self.digests(namespace, name)
            return direct(namespace, name)

        return read

    def digests(self, namespace: str, name: str) -> dict[str, bytes]:
        """The Secret's keys, each mapped to a digest of its value.

        Shaped like a Secret's data, so a connection's ``secret_digest`` (which digests
        only the keys it reads) works on it: the result changes exactly when one of
        those keys' values does.

        Raises:
            LookupError: The Secret does not exist (or the cache is not listed yet).
        """
        secret = self._objects().get(f"{namespace}/{name}")
        if secret is None:
            raise LookupError(f"secret {namespace}/{name} not found")
        return {k: v.encode() for k, v in secret["digests"].items()}
