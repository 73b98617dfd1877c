"""Writing back to TemporalWorker and connection objects: status, finalizers, Events, by
JSON merge patches (never owning others' fields); finalizers at the ``resourceVersion``
read (409 on a concurrent change; the next iteration retries)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from twc.native.objects import NativeObject
from twc.timestamps import rfc3339

MERGE_PATCH = "application/merge-patch+json"
EVENT_SOURCE = "twc-daemon"
CLUSTER_EVENT_NAMESPACE = "default"
"""Where Events about cluster-scoped objects go (where kubectl describe looks)."""


class ObjectWriter(Protocol):
    """The writes the loop's report step makes (:class:`NativeWriter` is the real one)."""

    def patch_status(self, obj: NativeObject, patch: Mapping[str, Any]) -> None: ...
    def set_finalizers(self, obj: NativeObject, finalizers: list[str]) -> None: ...
    def event(
        self, obj: NativeObject, reason: str, message: str, *, warning: bool = True
    ) -> None: ...


class NativeWriter:
    """Status, finalizer and Event writes to the API server."""

    def __init__(
        self, custom_api: Any, core_api: Any, *, wall: Callable[[], float] = time.time
    ) -> None:
        self._custom = custom_api
        self._core = core_api
        self._wall = wall
        self._instance = socket.gethostname()

    def _patch(self, obj: NativeObject, body: Any, *, status: bool) -> None:
        scope, suffix = "namespaced" if obj.namespace else "cluster", "_status" if status else ""
        call = getattr(self._custom, f"patch_{scope}_custom_object{suffix}")
        where = (obj.namespace, obj.plural, obj.name) if obj.namespace else (obj.plural, obj.name)
        call(obj.group, obj.version, *where, body, _content_type=MERGE_PATCH)

    def patch_status(self, obj: NativeObject, patch: Mapping[str, Any]) -> None:
        """Merge-patch ``obj``'s status subresource."""
        self._patch(obj, dict(patch), status=True)

    def set_finalizers(self, obj: NativeObject, finalizers: list[str]) -> None:
        """Replace ``obj``'s finalizers, only if it is unchanged since it was read."""
        meta = {"finalizers": finalizers, "resourceVersion": obj.resource_version}
        self._patch(obj, {"metadata": meta}, status=False)

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
