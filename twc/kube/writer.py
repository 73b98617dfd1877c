"""Writing to twc's own objects outside the engine. TemporalWorker and connection objects:
status, finalizers, Events, by JSON merge patches (never owning others' fields); finalizers at
the ``resourceVersion`` read (409 on a concurrent change; the next iteration retries). The
generated TemporalWorker objects (views of Queue and fleet-file workers): a server-side apply
at the ``resourceVersion`` read, a JSON patch of the whole ``spec`` (an apply cannot remove
others' fields), a delete conditional on the uid."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from typing import Any, Protocol

from twc.kube.client import tolerating
from twc.native.objects import WORKER_PLURAL, NativeObject
from twc.native.views import VIEW_FIELD_MANAGER
from twc.spec.crds import CRD_VERSION, WORKER_GROUP
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

    def __init__(self, custom_api: Any, core_api: Any) -> None:
        self._custom = custom_api
        self._core = core_api
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
        now = rfc3339(time.time())
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


class TemporalWorkerViews:
    """Creates, puts back and deletes generated TemporalWorker objects."""

    def __init__(self, custom_api: Any) -> None:
        self._custom = custom_api

    def _patch(self, namespace: str, name: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        response = self._custom.patch_namespaced_custom_object(
            WORKER_GROUP,
            CRD_VERSION,
            namespace,
            WORKER_PLURAL,
            name,
            body,
            field_manager=VIEW_FIELD_MANAGER,
            _preload_content=False,
            **kwargs,
        )
        return dict(json.loads(response.data))

    def apply(self, body: Mapping[str, Any], *, resource_version: str | None) -> dict[str, Any]:
        """Server-side apply ``body``; the object as stored. With ``resource_version`` it
        is forced (409 when the object changed since); without, conflicts stay conflicts."""
        meta = dict(body["metadata"])
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        return self._patch(
            str(meta["namespace"]),
            str(meta["name"]),
            {**body, "metadata": meta},
            force=resource_version is not None,
            _content_type="application/apply-patch+yaml",
        )

    def replace_spec(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str
    ) -> dict[str, Any]:
        """Replace the ``spec`` of a view still at ``resource_version``; the stored object."""
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "replace", "path": "/spec", "value": dict(spec)},
        ]
        return self._patch(namespace, name, patch, _content_type="application/json-patch+json")

    def delete(self, namespace: str, name: str, uid: str) -> None:
        """Delete the view with this uid; already gone is fine."""
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        options = V1DeleteOptions(preconditions=V1Preconditions(uid=uid or None))
        with tolerating(404):
            self._custom.delete_namespaced_custom_object(
                WORKER_GROUP, CRD_VERSION, namespace, WORKER_PLURAL, name, body=options
            )
