"""The desired state's inputs, and the one schema that carries them between processes.

The daemon, ``twc up``/``preview`` and the program under plain ``pulumi up`` each gather
the same inputs — the fleet file, the cluster's objects, the autoscaler's replicas, the
last accepted spec of each object — and hand them to
:func:`twc.desired.desired_fleet`. When the caller is not the program itself (the daemon
and ``twc up`` drive the engine through the Automation API), the inputs cross into the
program's process as one JSON document, :class:`DesiredInputs`, named by the environment
variable :data:`INPUTS_ENV`. The program computes the desired state from exactly the
inputs the caller saw and hashed, never from a newer file it happened to read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from twc.rollout import WorkerVersions
from twc.spec import QUEUE_API_VERSION, QUEUE_KIND
from twc.spec.crds import WORKER_GROUP, WORKER_KIND

__all__ = [
    "INPUTS_ENV",
    "QUEUE_KIND_KEY",
    "WORKER_KIND_KEY",
    "DesiredInputs",
    "HeldObjects",
    "ObjectList",
    "kind_key",
    "object_key",
    "trimmed",
]

INPUTS_ENV = "TWC_DESIRED_INPUTS"
"""Environment variable naming the :class:`DesiredInputs` file the program reads."""

QUEUE_GROUP = QUEUE_API_VERSION.split("/", 1)[0]
QUEUE_KIND_KEY = f"{QUEUE_KIND}.{QUEUE_GROUP}"
"""Kind key of kmsvc Queue objects."""
WORKER_KIND_KEY = f"{WORKER_KIND}.{WORKER_GROUP}"
"""Kind key of TemporalWorker objects."""

# Annotations with this prefix belong to twc and are part of an object's desired state
# (e.g. twc-only settings on the official connection objects). Other annotations, such
# as kubectl's last-applied copy of the whole object, are not.
_TWC_ANNOTATION_PREFIX = "twc.temporal.io/"


def kind_key(kind: str, group: str) -> str:
    """``<Kind>.<group>``: how a kind is named in the inputs."""
    return f"{kind}.{group}"


def object_key(obj: Mapping[str, Any]) -> str:
    """``<namespace>/<name>`` of an object, or ``<name>`` when cluster-scoped, tolerating
    malformed metadata."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "?"
    name = str(meta.get("name", "?"))
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def trimmed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What of an object the desired state reads: identity, labels, twc's annotations
    and spec. Status and bookkeeping (managed fields, resource versions) are left out,
    so the inputs stay small and do not change when only they change."""
    meta_raw = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta: Mapping[str, Any] = meta_raw if isinstance(meta_raw, Mapping) else {}
    out_meta: dict[str, Any] = {
        k: meta[k] for k in ("name", "namespace", "uid", "generation") if k in meta
    }
    labels = meta.get("labels")
    if isinstance(labels, Mapping) and labels:
        out_meta["labels"] = dict(labels)
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        ours = {k: v for k, v in annotations.items() if str(k).startswith(_TWC_ANNOTATION_PREFIX)}
        if ours:
            out_meta["annotations"] = ours
    out: dict[str, Any] = {"metadata": out_meta}
    for key in ("apiVersion", "kind", "spec"):
        if isinstance(obj, Mapping) and key in obj:
            out[key] = obj[key]
    return out


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ObjectList(_Model):
    """The objects of one kind as observed, or the fact that they could not be."""

    objects: tuple[dict[str, JsonValue], ...] | None = ()
    """The objects; ``None`` when the kind is *unknown* this time (its list failed)."""
    failure: str | None = None
    """Why the kind is unknown (the list's error), in words."""

    @classmethod
    def known(cls, objects: Iterable[Mapping[str, Any]], *, trim: bool = True) -> ObjectList:
        """A successful observation of ``objects``.

        Args:
            objects: The objects as the API returns them.
            trim: Keep only what the desired state reads (:func:`trimmed`). The daemon
                keeps whole objects in memory (their status and finalizers are written
                back); what crosses into the program is always trimmed.
        """
        items = (trimmed(o) if trim else dict(o) for o in objects)
        return cls(objects=tuple(items))

    @classmethod
    def of_api(cls, objects: Iterable[Mapping[str, Any]], *, copy: bool = True) -> ObjectList:
        """A successful observation of objects decoded from the API server's JSON, kept
        whole and not validated again (they are JSON values by construction);
        ``copy=False`` keeps the very dicts given."""
        items: tuple[Any, ...] = tuple(dict(o) for o in objects) if copy else tuple(objects)
        return cls.model_construct(objects=items, failure=None)

    def trimmed(self) -> ObjectList:
        """The same observation with every object trimmed."""
        if self.objects is None:
            return self
        return ObjectList(objects=tuple(trimmed(o) for o in self.objects), failure=self.failure)

    @classmethod
    def unknown(cls, failure: str) -> ObjectList:
        """A failed observation."""
        return cls(objects=None, failure=failure or "unknown")

    @property
    def is_known(self) -> bool:
        """Whether the objects were observed."""
        return self.objects is not None


class HeldObjects(_Model):
    """What keeps workers whose deletion the deletion guard holds in the desired state.

    A worker is held with the inputs it came from, as they were last accepted: its
    TemporalWorker or Queue object, or its fleet-file entry, and its connection when
    that went too. The desired state then holds the worker exactly as before, so the
    program keeps it (nothing of it changes) until the deletion is confirmed.
    """

    workers: tuple[str, ...] = ()
    """The held workers, ``<namespace>/<name>``."""
    cluster: dict[str, dict[str, dict[str, JsonValue]]] = Field(default_factory=dict)
    """Per kind key, per object key, objects observed gone whose removal is held."""
    file: dict[str, tuple[dict[str, JsonValue], ...]] = Field(default_factory=dict)
    """Per fleet-file section (``workers``, ``queues``, ``clusterConnections``...),
    entries removed from the file whose removal is held."""


class BuildScope(_Model):
    """A targeted ``up``'s part of the program: which workers it builds.

    The desired state is computed whole; the program registers only these workers'
    components (with their connections and queues), and the engine keeps every
    resource it neither registers nor targets as it is. The stack's outputs are kept
    whole from ``statuses``.
    """

    workers: tuple[str, ...]
    """The workers to build, ``<namespace>/<name>``: exactly those the ``up`` targets."""
    statuses: dict[str, JsonValue] = Field(default_factory=dict)
    """The other workers' status outputs as the stack last recorded them."""


class DesiredInputs(_Model):
    """Everything the desired state is computed from, besides the connection registry."""

    version: Literal[1] = 1
    """Schema version of this document."""
    fleet: dict[str, JsonValue] | None = None
    """The fleet file's document as the caller validated it; ``None``: the program reads
    the file named by its config."""
    cluster: dict[str, ObjectList] | None = None
    """Per kind key (``Queue.kmsvc.io``, ``TemporalWorker.temporal.kmsvc.io``,
    ``ClusterConnection.temporal.io``...), the cluster's objects; ``None`` means the
    fleet file alone (``--file-only``, or a fleet that opts out of cluster objects)."""
    replicas: dict[str, int] = Field(default_factory=dict)
    """Replicas of autoscaled workers keyed ``<namespace>/<worker>``: the autoscaler's
    decision (daemon) or what the cluster runs now (``twc up``, plain ``pulumi up``)."""
    accepted: dict[str, dict[str, dict[str, JsonValue]]] = Field(default_factory=dict)
    """Per kind key, per object key, the last spec of that object that was accepted
    (trimmed). An object that turns invalid keeps this spec; a kind whose list failed
    keeps all of its accepted objects. A kind listed here was observed at least once."""
    held: HeldObjects | None = None
    """Workers whose deletion is held (more than the guard's share would go at once),
    with the objects and entries that keep them; ``None`` when nothing is held."""
    conflicts: dict[str, str] = Field(default_factory=dict)
    """New workers left out because objects of their names exist that twc did not create
    (``ObjectExists``), keyed ``<namespace>/<name>``, with why."""

    # --- versioned rollouts ---------------------------------------------------------
    versions: dict[str, WorkerVersions] = Field(default_factory=dict)
    """Per versioned worker (``<namespace>/<worker>``), the versions whose Deployments
    the program declares besides the target, with their replicas and version specs:
    planned by the daemon or ``twc up`` from Temporal and the cluster, or (plain
    ``pulumi up``) every version that has a Deployment, as it runs."""

    # --- how the program runs ---------------------------------------------------------
    scope: BuildScope | None = None
    """A targeted ``up`` that builds only some workers; ``None`` builds them all. Not an
    input of the desired state: nothing hashes or compares it."""

    def for_program(self) -> DesiredInputs:
        """The document as it crosses into the program: every object trimmed."""
        if self.cluster is None:
            return self
        return self.model_copy(
            update={"cluster": {k: v.trimmed() for k, v in self.cluster.items()}}
        )

    def to_file(self, path: Path) -> Path:
        """Write :meth:`for_program` atomically (write a sibling, then rename)."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.for_program().model_dump_json())
        tmp.replace(path)
        return path

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> DesiredInputs:
        """Read a document written by :meth:`to_file`.

        Raises:
            OSError: The file cannot be read.
            pydantic.ValidationError: It is not a valid document.
        """
        return cls.model_validate(json.loads(Path(path).read_text()))

    @classmethod
    def from_env(cls) -> DesiredInputs | None:
        """The document :data:`INPUTS_ENV` names, or ``None`` when it names none."""
        path = os.environ.get(INPUTS_ENV)
        return cls.from_file(path) if path else None
