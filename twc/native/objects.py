"""Kubernetes-native objects twc writes back to, and the delete-protection finalizer on
every connection object a worker uses. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twc.spec import API_GROUP, CONNECTION_VERSION, part
from twc.spec.crds import (
    CRD_VERSION,
    OFFICIAL_WORKER_KIND,
    OFFICIAL_WORKER_PLURAL,
    RESOURCE_TEMPLATE_KIND,
    RESOURCE_TEMPLATE_PLURAL,
    WORKER_GROUP,
    WORKER_KIND,
)

FINALIZER = "temporal.io/delete-protection"
WORKER_PLURAL = "temporalworkers"

IdentityKey = tuple[str, str, str, str | None]
"""(apiGroup, kind, name, namespace or ``None``): a connection's identity as a key."""


def metadata(obj: Any) -> Mapping[str, Any]:
    """An object's ``metadata``; empty when it has none (or is no mapping at all)."""
    return part(obj, "metadata")


@dataclass(frozen=True, slots=True)
class NativeObject:
    """The bookkeeping of one cluster object: how to address it and its metadata."""

    group: str
    version: str
    plural: str
    kind: str
    name: str
    namespace: str | None
    uid: str = ""
    generation: int | None = None
    resource_version: str = ""
    finalizers: tuple[str, ...] = ()
    deleting: bool = False  # metadata.deletionTimestamp is set
    status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """``<namespace>/<name>``, or ``<name>`` for a cluster-scoped object."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def identity(self) -> IdentityKey:
        """The connection identity this object provides (connection kinds)."""
        return (self.group, self.kind, self.name, self.namespace)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"

    @classmethod
    def of(
        cls, obj: Mapping[str, Any], *, group: str, version: str, plural: str, kind: str
    ) -> NativeObject:
        meta = metadata(obj)
        status = obj.get("status") if isinstance(obj, Mapping) else None
        generation, finalizers = meta.get("generation"), meta.get("finalizers")
        return cls(
            group=group,
            version=version,
            plural=plural,
            kind=kind,
            name=str(meta.get("name", "?")),
            namespace=str(meta["namespace"]) if meta.get("namespace") else None,
            uid=str(meta.get("uid", "")),
            generation=generation if isinstance(generation, int) else None,
            resource_version=str(meta.get("resourceVersion", "")),
            finalizers=tuple(map(str, finalizers)) if isinstance(finalizers, list) else (),
            deleting=bool(meta.get("deletionTimestamp")),
            status=dict(status) if isinstance(status, Mapping) else {},
        )


def worker_native(obj: Mapping[str, Any]) -> NativeObject:
    """The bookkeeping of a TemporalWorker object, or of an official WorkerDeployment."""
    if obj.get("kind") == OFFICIAL_WORKER_KIND:
        official = {"version": CONNECTION_VERSION, "plural": OFFICIAL_WORKER_PLURAL}
        return NativeObject.of(obj, group=API_GROUP, kind=OFFICIAL_WORKER_KIND, **official)
    return NativeObject.of(
        obj, group=WORKER_GROUP, version=CRD_VERSION, plural=WORKER_PLURAL, kind=WORKER_KIND
    )


def template_native(obj: Mapping[str, Any]) -> tuple[NativeObject, str]:
    """The bookkeeping of a ``WorkerResourceTemplate`` object, and the key
    (``<namespace>/<name>``) of the WorkerDeployment it names."""
    coordinates = {"version": CONNECTION_VERSION, "plural": RESOURCE_TEMPLATE_PLURAL}
    native = NativeObject.of(obj, group=API_GROUP, kind=RESOURCE_TEMPLATE_KIND, **coordinates)
    spec = obj.get("spec") or {}
    ref = spec.get("workerDeploymentRef") or spec.get("temporalWorkerDeploymentRef") or {}
    return native, f"{native.namespace}/{ref.get('name', '')}"


def finalizer_updates(
    objects: Iterable[NativeObject], referenced: Iterable[IdentityKey]
) -> list[tuple[NativeObject, list[str]]]:
    """``(object, new finalizers)``: :data:`FINALIZER` on referenced objects, off the rest."""
    wanted = set(referenced)
    out: list[tuple[NativeObject, list[str]]] = []
    for obj in objects:
        has, want = FINALIZER in obj.finalizers, obj.identity in wanted
        if want and not has and not obj.deleting:
            out.append((obj, [*obj.finalizers, FINALIZER]))
        elif has and not want:
            out.append((obj, [f for f in obj.finalizers if f != FINALIZER]))
    return out
