"""The daemon's watch caches of built-in kinds: worker Deployments and Secrets.

Each iteration of the daemon reads the replicas of every worker Deployment and the
digest of every credential Secret. As LISTs those cost the fleet's size per iteration
(at 1000 workers the Deployment list alone was 0.7 s); as watch caches (one list, then a
watch, re-listed every ``resync_interval``) an iteration reads memory.

What is held is trimmed as it arrives, so thousands of objects stay small:

* a Deployment keeps its name, namespace, its stack, worker and build-ID labels,
  ``spec.replicas``, ``status.readyReplicas`` and which field managers own
  ``spec.replicas`` (whether the autoscaler claimed it);
* a Secret keeps its name, namespace and a digest per key, never a value: the daemon
  only needs to see that a credential changed (the copy it applies, and the pods' real
  credentials, are read directly when needed).
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from twc.builders import LABEL_STACK, LABEL_WORKER
from twc.kube.client import KubeClient
from twc.kube.scale import AUTOSCALER_FIELD_MANAGER, scale_owner_of
from twc.kube.watch import ObjectWatcher, builtin_lister
from twc.kube.workloads import WORKER_SELECTOR
from twc.rollout import BUILD_ID_LABEL
from twc.spec import label_value
from twc.spec.labels import owner_stack

_T = TypeVar("_T")

__all__ = ["SECRET_FIELD_SELECTOR", "DeploymentCache", "SecretCache", "digests_by_name"]

SECRET_FIELD_SELECTOR = "type!=kubernetes.io/service-account-token,type!=helm.sh/release.v1"  # noqa: S105 - a field selector, not a password
"""Secrets that can never be a connection's credentials stay out of the cache."""


_DEPLOYMENT_LABELS = (LABEL_STACK, LABEL_WORKER, BUILD_ID_LABEL)
"""What of a worker Deployment's labels the daemon reads: whose stack it is, and which
worker and version it runs."""


def _deployment_kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    labels = meta.get("labels") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": {k: labels[k] for k in _DEPLOYMENT_LABELS if k in labels},
        },
        "replicas": spec.get("replicas"),
        "readyReplicas": status.get("readyReplicas"),
        "replicaOwners": tuple(scale_owner_of(obj)),
    }


def _secret_kept(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    data = obj.get("data") or {}
    return {
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        # The base64 text digested as it is: a changed value changes its digest.
        "digests": {str(k): _digest(str(v)) for k, v in sorted(data.items())},
    }


def _digest(text: str) -> str:
    # The base64 text digested as it is: a changed value changes its digest.
    return hashlib.sha256(text.encode()).hexdigest()


def _nothing(_obj: Mapping[str, Any]) -> object:
    # Status changes every few seconds; the loop reads these caches when it runs and
    # is never woken by them.
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
        self._memo: dict[str, tuple[object, Any]] = {}
        """What was derived from the watch's objects, with the objects it came from."""
        self._ns_lock = threading.Lock()
        self._ns_memo: dict[str, dict[str, tuple[object, Any]]] = {}
        """Per reading and namespace: what was derived, with the group it came from."""
        self._ns_whole: dict[str, tuple[object, dict[str, Any]]] = {}
        """Per reading: the last :meth:`by_namespace`, with the groups it came from."""
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
                keep=_deployment_kept,
            )
        )

    def _memoised(self, name: str, derive: Callable[[Mapping[str, Mapping[str, Any]]], _T]) -> _T:
        """``derive`` of the stack's Deployments, made again only when the watch saw a
        change: every shard's loop reads the same cache on every iteration."""
        found = self._by_key()
        hit = self._memo.get(name)
        if hit is not None and hit[0] is found:
            return cast(_T, hit[1])
        value = derive(found)
        self._memo[name] = (found, value)
        return value

    def _by_key(self) -> Mapping[str, Mapping[str, Any]]:
        found = self._objects()
        hit = self._memo.get("")
        if hit is not None and hit[0] is found:
            return cast(Mapping[str, Mapping[str, Any]], hit[1])
        mine = self._mine(found)
        self._memo[""] = (found, mine)
        return mine

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
        :meth:`worker_deployments`, ``scaled``: :meth:`scaled`) per namespace, each
        namespace's made again only when its Deployments changed.

        A Deployment's status change is a new version of the whole cache: derived from
        all of it, the first shard to read after any event paid for every Deployment,
        and the autoscaler's own writes are such events (20 shards' readings after one
        event at 5000: 26.7 ms, now 2.6; bench/deployment-readings/slicecost.txt). The
        watch keeps its objects by namespace; so do these.

        Raises:
            LookupError: Not listed yet.
        """
        derive = _READINGS[reading]
        self._objects()  # raises until the first list, as the whole readings do
        groups = self.watcher.grouped(stale=True)
        assert groups is not None  # listed (above)
        with self._ns_lock:
            whole = self._ns_whole.get(reading)
            if whole is not None and whole[0] is groups:
                return whole[1]
            memo = self._ns_memo.setdefault(reading, {})
            out: dict[str, Any] = {}
            for ns, group in groups.items():
                hit = memo.get(ns)
                if hit is None or hit[0] is not group:
                    mine = self._mine({f"{ns}/{d['metadata']['name']}": d for d in group})
                    hit = memo[ns] = (group, derive(mine))
                out[ns] = hit[1]
            for gone in set(memo) - set(groups):
                del memo[gone]
            self._ns_whole[reading] = (groups, out)
            return out

    def worker_replicas(self) -> dict[str, int]:
        """``spec.replicas`` of every running worker, keyed ``<namespace>/<worker>``.

        A worker's in-place Deployment has the worker's name. A versioned worker's
        Deployments (one per version, ``<worker>-<buildID>``) count as that one worker,
        with their replicas summed: the deletion guard compares these keys with the
        desired workers, and a new version is no deletion of the old ones.

        Raises:
            LookupError: Not listed yet (the count is unknown, not zero).
        """
        return self._memoised("replicas", _worker_replicas)

    def worker_deployments(self) -> dict[str, tuple[int, int]]:
        """``(spec.replicas, status.readyReplicas)`` of every worker Deployment."""
        return self._memoised("deployments", _worker_deployments)

    def scaled(self) -> list[str]:
        """Worker Deployments whose ``spec.replicas`` the autoscaler's field manager owns."""
        return self._memoised("scaled", _scaled)


def _scaled(found: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(
        key for key, dep in found.items() if AUTOSCALER_FIELD_MANAGER in dep["replicaOwners"]
    )


def _worker_replicas(found: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, dep in found.items():
        meta = dep["metadata"]
        labels = meta.get("labels") or {}
        count = int(1 if dep["replicas"] is None else dep["replicas"])
        worker = labels.get(LABEL_WORKER)
        if labels.get(BUILD_ID_LABEL) and worker:
            versioned = f"{meta.get('namespace')}/{worker}"
            out[versioned] = out.get(versioned, 0) + count
        else:
            out[key] = count
    return out


def _worker_deployments(found: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    return {
        key: (
            int(1 if dep["replicas"] is None else dep["replicas"]),
            int(dep["readyReplicas"] or 0),
        )
        for key, dep in found.items()
    }


_READINGS: dict[str, Callable[[Mapping[str, Mapping[str, Any]]], Any]] = {
    "replicas": _worker_replicas,
    "deployments": _worker_deployments,
    "scaled": _scaled,
}
""":meth:`DeploymentCache.by_namespace`'s readings: each derives within a namespace (a
versioned worker's Deployments, summed, share their namespace)."""


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
