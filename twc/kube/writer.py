"""Writing back to TemporalWorker and connection objects: status, finalizers, Events.

Always with a JSON merge patch and never with server-side apply, so twc never takes
ownership of fields another manager set:

* status through the ``status`` subresource;
* finalizers on the main resource, conditional on the ``resourceVersion`` read (a
  concurrent change makes the patch fail with 409 and the next iteration retries);
* core/v1 Events on failures.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from twc.native.objects import NativeObject
from twc.timestamps import rfc3339

__all__ = ["MERGE_PATCH", "NativeWriter", "ObjectWriter"]

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
EVENT_SOURCE = "twc-daemon"
# Where Events about cluster-scoped objects go (as kubectl describe looks for them).
CLUSTER_EVENT_NAMESPACE = "default"


class ObjectWriter(Protocol):
    """The writes the loop's report step makes (:class:`NativeWriter` is the real one)."""

    def patch_status(self, obj: NativeObject, patch: Mapping[str, Any]) -> None:
        """Merge-patch ``obj``'s status subresource."""
        ...

    def set_finalizers(self, obj: NativeObject, finalizers: list[str]) -> None:
        """Replace ``obj``'s finalizers, only if it is unchanged since it was read."""
        ...

    def event(self, obj: NativeObject, reason: str, message: str, *, warning: bool = True) -> None:
        """Record a core/v1 Event about ``obj``."""
        ...


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
