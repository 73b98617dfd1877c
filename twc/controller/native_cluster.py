"""The daemon's I/O for Kubernetes-native objects: watches, status, finalizers, Events.

:class:`NativeWatch` keeps TemporalWorker objects and the objects of every connection
kind the registry knows (plugin kinds included: the registry says what to watch) in
memory, one list + watch thread per kind, each waking the loop on a change.

:class:`NativeWriter` writes back, always with a JSON merge patch and never with
server-side apply, so twc never takes ownership of fields another manager set:

* status through the ``status`` subresource;
* finalizers on the main resource, conditional on the ``resourceVersion`` read (a
  concurrent change makes the patch fail with 409 and the next iteration retries);
* core/v1 Events on failures.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from twc.connections import WatchedKind
from twc.controller.native import WORKER_PLURAL, NativeObject, NativeSnapshot
from twc.controller.queues import ObjectWatcher
from twc.spec.crds import CRD_VERSION, WORKER_GROUP

__all__ = [
    "MERGE_PATCH",
    "NativeSource",
    "NativeWatch",
    "NativeWriter",
    "StaticNative",
    "rfc3339",
]

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
EVENT_SOURCE = "twc-daemon"
# Where Events about cluster-scoped objects go (as kubectl describe looks for them).
CLUSTER_EVENT_NAMESPACE = "default"


def rfc3339(wall: float) -> str:
    """Unix time as the API server writes times."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _connection_content(obj: Mapping[str, Any]) -> object:
    # Spec, deletion and finalizers matter (a deletion must be answered); status not.
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    return (obj.get("spec"), meta.get("deletionTimestamp"), meta.get("finalizers"))


def _worker_content(obj: Mapping[str, Any]) -> object:
    # The daemon's own status writes must not wake the loop: spec and generation only.
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    return (obj.get("spec"), meta.get("generation"), meta.get("uid"))


class NativeSource(Protocol):
    """Where the loop gets TemporalWorker and connection objects from."""

    def start(self, wakeup: threading.Event) -> None:
        """Begin tracking; set ``wakeup`` whenever an object changes."""
        ...

    def stop(self) -> None:
        """Stop tracking."""
        ...

    def snapshot(self) -> NativeSnapshot | None:
        """The current objects, or ``None`` until every kind was listed once."""
        ...


class StaticNative:
    """A fixed set of objects (no cluster, or tests)."""

    def __init__(self, snapshot: NativeSnapshot | None = None) -> None:
        """Hold ``snapshot``; :meth:`replace` changes it and wakes the loop."""
        self._snapshot = snapshot or NativeSnapshot()
        self._wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        """Remember the event to set on :meth:`replace`."""
        self._wakeup = wakeup

    def stop(self) -> None:
        """Nothing to stop."""

    def snapshot(self) -> NativeSnapshot:
        """The objects."""
        return self._snapshot

    def replace(self, snapshot: NativeSnapshot) -> None:
        """Swap the objects and wake the loop."""
        self._snapshot = snapshot
        if self._wakeup is not None:
            self._wakeup.set()


class NativeWatch:
    """One :class:`~twc.controller.queues.ObjectWatcher` per kind."""

    def __init__(
        self,
        custom_api: Any,
        kinds: Iterable[WatchedKind],
        *,
        resync_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Prepare watchers for TemporalWorkers and each connection kind in ``kinds``."""
        self._workers = ObjectWatcher(
            custom_api,
            group=WORKER_GROUP,
            version=CRD_VERSION,
            plural=WORKER_PLURAL,
            resync_interval=resync_interval,
            clock=clock,
            content=_worker_content,
        )
        self._kinds = {
            kind: ObjectWatcher(
                custom_api,
                group=kind.api_group,
                version=kind.version,
                plural=kind.plural,
                resync_interval=resync_interval,
                clock=clock,
                content=_connection_content,
            )
            for kind in kinds
        }

    def _all(self) -> list[ObjectWatcher]:
        return [self._workers, *self._kinds.values()]

    def start(self, wakeup: threading.Event) -> None:
        """Start every watcher."""
        for watcher in self._all():
            watcher.start(wakeup)

    def stop(self) -> None:
        """Stop every watcher."""
        for watcher in self._all():
            watcher.stop()

    def list_now(self) -> NativeSnapshot:
        """List every kind once (no watch): the snapshot of a one-shot command."""
        for watcher in self._all():
            watcher.list_now()
        found = self.snapshot()
        assert found is not None  # every watcher was just listed
        return found

    def failure(self) -> str | None:
        """Why a kind's last list or watch failed, until it lists again; else ``None``."""
        for watcher in self._all():
            found = watcher.failure()
            if found:
                return f"{watcher.plural}.{watcher.group}: {found}"
        return None

    def snapshot(self) -> NativeSnapshot | None:
        """The objects of every kind, or ``None`` until each was listed once."""
        workers = self._workers.snapshot()
        if workers is None:
            return None
        connections: dict[WatchedKind, tuple[Mapping[str, Any], ...]] = {}
        for kind, watcher in self._kinds.items():
            found = watcher.snapshot()
            if found is None:
                return None
            connections[kind] = found
        return NativeSnapshot(workers=workers, connections=connections)


class NativeWriter:
    """Status, finalizer and Event writes to the API server."""

    def __init__(
        self, custom_api: Any, core_api: Any, *, wall: Callable[[], float] = time.time
    ) -> None:
        """Wrap a ``CustomObjectsApi`` and a ``CoreV1Api``."""
        self._custom = custom_api
        self._core = core_api
        self._wall = wall
        self._instance = socket.gethostname()

    def patch_status(self, obj: NativeObject, patch: Mapping[str, Any]) -> None:
        """Merge-patch ``obj``'s status subresource (never server-side apply)."""
        if obj.namespace:
            self._custom.patch_namespaced_custom_object_status(
                obj.group,
                obj.version,
                obj.namespace,
                obj.plural,
                obj.name,
                dict(patch),
                _content_type=MERGE_PATCH,
            )
        else:
            self._custom.patch_cluster_custom_object_status(
                obj.group, obj.version, obj.plural, obj.name, dict(patch), _content_type=MERGE_PATCH
            )

    def set_finalizers(self, obj: NativeObject, finalizers: list[str]) -> None:
        """Replace ``obj``'s finalizers, only if it is unchanged since it was read."""
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version}}
        if obj.namespace:
            self._custom.patch_namespaced_custom_object(
                obj.group,
                obj.version,
                obj.namespace,
                obj.plural,
                obj.name,
                body,
                _content_type=MERGE_PATCH,
            )
        else:
            self._custom.patch_cluster_custom_object(
                obj.group, obj.version, obj.plural, obj.name, body, _content_type=MERGE_PATCH
            )

    def event(self, obj: NativeObject, reason: str, message: str, *, warning: bool = True) -> None:
        """Create a core/v1 Event about ``obj``."""
        now = rfc3339(self._wall())
        namespace = obj.namespace or CLUSTER_EVENT_NAMESPACE
        involved: dict[str, Any] = {
            "apiVersion": obj.api_version,
            "kind": obj.kind,
            "name": obj.name,
            "uid": obj.uid,
            "resourceVersion": obj.resource_version,
        }
        if obj.namespace:
            involved["namespace"] = obj.namespace
        body = {
            "metadata": {"generateName": f"{obj.name}.", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": EVENT_SOURCE},
            "reportingComponent": EVENT_SOURCE,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._core.create_namespaced_event(namespace, body)
