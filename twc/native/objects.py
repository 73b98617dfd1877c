"""Kubernetes-native objects twc reads and writes back: TemporalWorkers and connections.

:class:`NativeObject` is what twc keeps of one object to write back to it (its status,
finalizers, Events): the group/version/plural to address it and the bookkeeping of its
metadata. :func:`finalizer_updates` decides which connection objects carry the
``temporal.io/delete-protection`` finalizer: one is kept on every connection object some
worker uses, so deleting a connection waits until no worker uses it.

Pure: no client, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twc.connections import ConnectionIdentity
from twc.spec.crds import CRD_VERSION, WORKER_GROUP, WORKER_KIND

__all__ = [
    "FINALIZER",
    "WORKER_PLURAL",
    "IdentityKey",
    "NativeObject",
    "finalizer_updates",
    "identity_key",
    "worker_native",
]

FINALIZER = "temporal.io/delete-protection"
"""Kept on every connection object some worker references."""
WORKER_PLURAL = "temporalworkers"
"""Resource name of TemporalWorker objects."""

IdentityKey = tuple[str, str, str, str | None]
"""(apiGroup, kind, name, namespace or ``None``): a connection's identity as a key."""


def identity_key(identity: ConnectionIdentity) -> IdentityKey:
    """The hashable form of a resolved connection's identity."""
    return (identity.api_group, identity.kind, identity.name, identity.namespace)


@dataclass(frozen=True, slots=True)
class NativeObject:
    """What the daemon needs to know of one cluster object to write back to it."""

    group: str
    """API group."""
    version: str
    """Version it was read at."""
    plural: str
    """Resource name in URLs."""
    kind: str
    """Kind."""
    name: str
    """``metadata.name``."""
    namespace: str | None
    """``metadata.namespace``; ``None`` for cluster-scoped kinds."""
    uid: str = ""
    """``metadata.uid``."""
    generation: int | None = None
    """``metadata.generation``."""
    resource_version: str = ""
    """``metadata.resourceVersion`` (finalizer patches are conditional on it)."""
    finalizers: tuple[str, ...] = ()
    """``metadata.finalizers``."""
    deleting: bool = False
    """Whether ``metadata.deletionTimestamp`` is set."""
    status: Mapping[str, Any] = field(default_factory=dict)
    """The object's current ``status`` (TemporalWorkers)."""

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
        """``<group>/<version>`` (just the version for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"

    @classmethod
    def of(
        cls, obj: Mapping[str, Any], *, group: str, version: str, plural: str, kind: str
    ) -> NativeObject:
        """Read the bookkeeping of ``obj``, tolerating malformed metadata."""
        meta_raw = obj.get("metadata") if isinstance(obj, Mapping) else None
        meta: Mapping[str, Any] = meta_raw if isinstance(meta_raw, Mapping) else {}
        status_raw = obj.get("status") if isinstance(obj, Mapping) else None
        generation = meta.get("generation")
        finalizers = meta.get("finalizers")
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
            finalizers=tuple(str(f) for f in finalizers) if isinstance(finalizers, list) else (),
            deleting=bool(meta.get("deletionTimestamp")),
            status=dict(status_raw) if isinstance(status_raw, Mapping) else {},
        )


def worker_native(obj: Mapping[str, Any], version: str = CRD_VERSION) -> NativeObject:
    """The bookkeeping of a TemporalWorker object."""
    return NativeObject.of(
        obj, group=WORKER_GROUP, version=version, plural=WORKER_PLURAL, kind=WORKER_KIND
    )


def finalizer_updates(
    objects: Iterable[NativeObject], referenced: Iterable[IdentityKey]
) -> list[tuple[NativeObject, list[str]]]:
    """Which connection objects need their finalizers changed, and to what.

    A referenced object gets :data:`FINALIZER` (unless it is already being deleted: the
    API server refuses new finalizers then, and a referenced object being deleted keeps
    the one it has); an unreferenced object loses it, which lets a pending deletion
    complete. Other finalizers are kept as they are.

    Args:
        objects: The connection objects in the cluster.
        referenced: Identities some worker uses (now, or as last applied).

    Returns:
        ``(object, new finalizer list)`` for each object to patch.
    """
    wanted = set(referenced)
    out: list[tuple[NativeObject, list[str]]] = []
    for obj in objects:
        has = FINALIZER in obj.finalizers
        want = obj.identity in wanted
        if want and not has and not obj.deleting:
            out.append((obj, [*obj.finalizers, FINALIZER]))
        elif has and not want:
            out.append((obj, [f for f in obj.finalizers if f != FINALIZER]))
    return out
