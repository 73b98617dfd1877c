"""Kubernetes-native objects converted to fleet-file models.

``TemporalWorker`` (``temporal.kmsvc.io/v1``), ``Connection`` and ``ClusterConnection``
(``temporal.io/v1alpha1``, the official worker controller's version) objects carry the
same spec as their fleet-file entries; their name and namespace come from ``metadata``.
The CRD schema already rejects most mistakes, but not everything the models check
(names that are DNS subdomains but not labels, reserved env names, request > limit...),
so every object goes through its model here and an invalid one raises
:class:`~twc.errors.SpecError` naming the object.

Objects of connection kinds added by a provider plugin become
:class:`~twc.spec.CustomConnection` entries: twc checks the envelope, the provider its
``spec``.

Pure, like the rest of :mod:`twc.spec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from twc.errors import SpecError, SpecIssue
from twc.spec._load import _issues
from twc.spec._models import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    CONNECTION_VERSION,
    ClusterConnection,
    Connection,
    CustomConnection,
    TemporalWorker,
)

__all__ = [
    "CONNECTION_API_VERSION",
    "WORKER_API_VERSION",
    "load_cluster_connection_object",
    "load_connection_object",
    "load_custom_connection_object",
    "load_worker_object",
    "object_description",
]

WORKER_API_VERSION = "temporal.kmsvc.io/v1"
"""``apiVersion`` of TemporalWorker objects."""
CONNECTION_API_VERSION = f"{API_GROUP}/{CONNECTION_VERSION}"
"""``apiVersion`` of Connection and ClusterConnection objects."""

_M = TypeVar("_M", bound=BaseModel)
_RENAME = {"name": "metadata.name", "namespace": "metadata.namespace"}


def _parts(obj: object) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    if not isinstance(obj, Mapping):
        return {}, {}
    meta = obj.get("metadata")
    spec = obj.get("spec")
    return (
        meta if isinstance(meta, Mapping) else {},
        spec if isinstance(spec, Mapping) else {},
    )


def object_description(api_version: str, kind: str, obj: object) -> str:
    """``<apiVersion> <kind> <namespace>/<name>`` (or ``<name>`` when cluster-scoped)."""
    meta, _ = _parts(obj)
    name = meta.get("name", "?")
    where = f"{meta['namespace']}/{name}" if meta.get("namespace") else str(name)
    return f"{api_version} {kind} {where}"


def _load(
    model: type[_M],
    obj: object,
    *,
    api_version: str,
    kind: str,
    namespaced: bool,
    spec_key: str | None = None,
    envelope: Mapping[str, Any] | None = None,
) -> _M:
    describe = object_description(api_version, kind, obj)
    if not isinstance(obj, Mapping):
        raise SpecError([SpecIssue(describe, "", "expected a mapping")])
    issues: list[SpecIssue] = []
    if obj.get("apiVersion", api_version) != api_version:
        issues.append(SpecIssue(describe, "apiVersion", f"must be {api_version}"))
    if obj.get("kind", kind) != kind:
        issues.append(SpecIssue(describe, "kind", f"must be {kind}"))
    for key in ("metadata", "spec"):
        if obj.get(key) is not None and not isinstance(obj.get(key), Mapping):
            issues.append(SpecIssue(describe, key, "expected a mapping"))
    if issues:
        raise SpecError(issues)
    meta, spec = _parts(obj)
    rename = dict(_RENAME)
    if spec_key is None:
        data: dict[str, Any] = {**spec}
        rename.update({key: f"spec.{key}" for key in spec if key not in _RENAME})
        # The object's own metadata wins: a spec cannot rename or move the object.
        data.pop("name", None)
        data.pop("namespace", None)
    else:
        data = {**(envelope or {}), spec_key: dict(spec)}
        rename[spec_key] = "spec"
    data["name"] = meta.get("name")
    if namespaced:
        data["namespace"] = meta.get("namespace")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise SpecError(_issues(err, describe, model, rename)) from None


def load_worker_object(obj: object) -> TemporalWorker:
    """Convert a ``TemporalWorker`` object (as the API returns it) to a fleet worker.

    Args:
        obj: The object, e.g. from ``CustomObjectsApi.list_cluster_custom_object``.

    Returns:
        The worker, named and namespaced from ``metadata``.

    Raises:
        SpecError: The object is not a valid worker; the file is named
            ``temporal.kmsvc.io/v1 TemporalWorker <namespace>/<name>``.
    """
    return _load(
        TemporalWorker, obj, api_version=WORKER_API_VERSION, kind="TemporalWorker", namespaced=True
    )


def load_connection_object(obj: object) -> Connection:
    """Convert a namespaced ``Connection`` object to its fleet-file model.

    Raises:
        SpecError: The object is not a valid Connection.
    """
    return _load(
        Connection, obj, api_version=CONNECTION_API_VERSION, kind=CONNECTION_KIND, namespaced=True
    )


def load_cluster_connection_object(obj: object) -> ClusterConnection:
    """Convert a cluster-scoped ``ClusterConnection`` object to its fleet-file model.

    Raises:
        SpecError: The object is not a valid ClusterConnection.
    """
    return _load(
        ClusterConnection,
        obj,
        api_version=CONNECTION_API_VERSION,
        kind=CLUSTER_CONNECTION_KIND,
        namespaced=False,
    )


def load_custom_connection_object(
    obj: object, *, api_group: str, kind: str, namespaced: bool, version: str = "v1"
) -> CustomConnection:
    """Convert an object of a plugin's connection kind to a ``customConnections`` entry.

    Args:
        obj: The object.
        api_group: The kind's API group (``temporal.io``).
        kind: The kind, as registered by the provider.
        namespaced: Whether the kind is namespaced.
        version: The served version the object was read at.

    Raises:
        SpecError: The envelope is invalid (the provider checks ``spec`` itself).
    """
    return _load(
        CustomConnection,
        obj,
        api_version=f"{api_group}/{version}",
        kind=kind,
        namespaced=namespaced,
        spec_key="spec",
        envelope={"apiGroup": api_group, "kind": kind},
    )
