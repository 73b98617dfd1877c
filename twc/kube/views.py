"""Writing the generated TemporalWorker objects (views of Queue and fleet-file workers).

Three calls, each as narrow as the job allows (RBAC: ``temporalworkers`` create, patch,
delete in the workers' namespaces):

* a server-side apply under twc's own field manager: it creates a view, and puts back
  one that drifted, conditional on the ``resourceVersion`` the daemon read (a view
  changed meanwhile fails with 409 and the next iteration decides again);
* a JSON patch replacing the whole ``spec``, also conditional on the
  ``resourceVersion``: an apply cannot remove fields another manager added (it owns
  only what it applies), so a person's addition to a view's spec is removed this way;
* a delete conditional on the object's uid, so an object made again under the same
  name (by a person, say) is never deleted by mistake.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from twc.kube.client import status_of
from twc.native.objects import WORKER_PLURAL
from twc.native.views import VIEW_FIELD_MANAGER
from twc.spec.crds import CRD_VERSION, WORKER_GROUP

__all__ = ["TemporalWorkerViews"]

_APPLY = "application/apply-patch+yaml"
_JSON_PATCH = "application/json-patch+json"


class TemporalWorkerViews:
    """Creates, puts back and deletes generated TemporalWorker objects."""

    def __init__(self, custom_api: Any) -> None:
        """Work through a ``CustomObjectsApi``."""
        self._custom = custom_api

    def apply(self, body: Mapping[str, Any], *, resource_version: str | None) -> dict[str, Any]:
        """Server-side apply ``body`` under :data:`VIEW_FIELD_MANAGER`.

        Args:
            body: The whole view.
            resource_version: The version the daemon read; the apply fails with 409
                when the object changed since. ``None`` when creating: without force,
                a field someone else set meanwhile is a conflict, not taken over.

        Returns:
            The object as stored.
        """
        meta = dict(body["metadata"])
        if resource_version is not None:
            meta["resourceVersion"] = resource_version
        result = self._custom.patch_namespaced_custom_object(
            WORKER_GROUP,
            CRD_VERSION,
            str(meta["namespace"]),
            WORKER_PLURAL,
            str(meta["name"]),
            {**body, "metadata": meta},
            field_manager=VIEW_FIELD_MANAGER,
            # Only a view the daemon read as its own, at the version read, is forced.
            force=resource_version is not None,
            _content_type=_APPLY,
            _preload_content=False,
        )
        return _as_dict(result)

    def replace_spec(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str
    ) -> dict[str, Any]:
        """Replace the whole ``spec`` of a view, if it is still at ``resource_version``.

        Returns:
            The object as stored.
        """
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
            {"op": "replace", "path": "/spec", "value": dict(spec)},
        ]
        result = self._custom.patch_namespaced_custom_object(
            WORKER_GROUP,
            CRD_VERSION,
            namespace,
            WORKER_PLURAL,
            name,
            patch,
            field_manager=VIEW_FIELD_MANAGER,
            _content_type=_JSON_PATCH,
            _preload_content=False,
        )
        return _as_dict(result)

    def delete(self, namespace: str, name: str, uid: str) -> None:
        """Delete the view with this uid; already gone is fine."""
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        try:
            self._custom.delete_namespaced_custom_object(
                WORKER_GROUP,
                CRD_VERSION,
                namespace,
                WORKER_PLURAL,
                name,
                body=V1DeleteOptions(preconditions=V1Preconditions(uid=uid or None)),
            )
        except Exception as exc:
            if status_of(exc) != 404:
                raise


def _as_dict(response: Any) -> dict[str, Any]:
    # The raw JSON: the generated client does not turn every patch's answer into a dict.
    loaded: dict[str, Any] = json.loads(response.data)
    return loaded
