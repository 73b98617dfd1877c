"""Writing the generated TemporalWorker objects (views of Queue and fleet-file workers):
a server-side apply at the ``resourceVersion`` read, a JSON patch of the whole ``spec`` (an
apply cannot remove others' fields), a delete conditional on the uid."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from twc.kube.client import tolerating
from twc.native.objects import WORKER_PLURAL
from twc.native.views import VIEW_FIELD_MANAGER
from twc.spec.crds import CRD_VERSION, WORKER_GROUP


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
        stored: dict[str, Any] = json.loads(response.data)
        return stored

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
