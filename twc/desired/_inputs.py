"""The desired state's inputs, and the one schema that carries them into the program's
process (:class:`DesiredInputs`, a JSON file named by :data:`INPUTS_ENV`), so the program
computes from exactly the inputs the caller saw and hashed."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from twc.native.objects import metadata
from twc.rollout import WorkerVersions
from twc.spec import QUEUE_API_VERSION, QUEUE_KIND
from twc.spec.crds import WORKER_GROUP, WORKER_KIND

INPUTS_ENV = "TWC_DESIRED_INPUTS"
QUEUE_GROUP = QUEUE_API_VERSION.split("/", 1)[0]
QUEUE_KIND_KEY = f"{QUEUE_KIND}.{QUEUE_GROUP}"
WORKER_KIND_KEY = f"{WORKER_KIND}.{WORKER_GROUP}"
# Only twc's annotations are part of an object's desired state (not kubectl's copies).
_TWC_ANNOTATION_PREFIX = "twc.temporal.io/"


def kind_key(kind: str, group: str) -> str:
    """``<Kind>.<group>``: how a kind is named in the inputs."""
    return f"{kind}.{group}"


def object_key(obj: Mapping[str, Any]) -> str:
    """``<namespace>/<name>`` of an object, or ``<name>`` when cluster-scoped."""
    meta = metadata(obj)
    name = str(meta.get("name", "?"))
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def trimmed(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What of an object the desired state reads: identity, labels, twc's annotations, spec."""
    meta = metadata(obj)
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
    return {"metadata": out_meta, **{k: obj[k] for k in ("apiVersion", "kind", "spec") if k in obj}}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ObjectList(_Model):
    """The objects of one kind as observed, or the fact that they could not be."""

    objects: tuple[dict[str, JsonValue], ...] | None = ()
    """The objects; ``None`` when the kind is *unknown* this time (its list failed)."""
    failure: str | None = None

    @classmethod
    def known(cls, objects: Iterable[Mapping[str, Any]], *, trim: bool = True) -> ObjectList:
        """A successful observation of ``objects`` (``trim``: only what the desired state reads)."""
        items = (trimmed(o) if trim else dict(o) for o in objects)
        return cls(objects=tuple(items))

    @classmethod
    def of_api(cls, objects: Iterable[Any]) -> ObjectList:
        """A successful observation of API objects: the same mappings, not copied or validated
        again (an unchanged object compares at once); nothing may change them."""
        return cls.model_construct(objects=tuple(objects), failure=None)

    def trimmed(self) -> ObjectList:
        return self if self.objects is None else ObjectList.known(self.objects)

    @classmethod
    def unknown(cls, failure: str) -> ObjectList:
        return cls(objects=None, failure=failure or "unknown")

    @property
    def is_known(self) -> bool:
        return self.objects is not None


class HeldObjects(_Model):
    """Workers whose deletion is held, with the inputs they last came from (objects and
    fleet-file entries), so the program keeps them unchanged until it is confirmed."""

    workers: tuple[str, ...] = ()
    cluster: dict[str, dict[str, dict[str, JsonValue]]] = Field(default_factory=dict)
    """Per kind key, per object key, objects observed gone whose removal is held."""
    file: dict[str, tuple[dict[str, JsonValue], ...]] = Field(default_factory=dict)
    """Per fleet-file section, entries removed from the file whose removal is held."""


class BuildScope(_Model):
    """A targeted ``up``'s part of the program: it registers only these workers' components;
    the other workers' outputs are kept from ``statuses``."""

    workers: tuple[str, ...]
    statuses: dict[str, JsonValue] = Field(default_factory=dict)


class DesiredInputs(_Model):
    """Everything the desired state is computed from, besides the connection registry."""

    version: Literal[1] = 1
    fleet: dict[str, JsonValue] | None = None
    """The fleet file's document as the caller validated it; ``None``: the program reads it."""
    cluster: dict[str, ObjectList] | None = None
    """Per kind key, the cluster's objects; ``None``: the fleet file alone."""
    replicas: dict[str, int] = Field(default_factory=dict)
    """Replicas of autoscaled workers keyed ``<namespace>/<worker>``."""
    accepted: dict[str, dict[str, dict[str, JsonValue]]] = Field(default_factory=dict)
    """Per kind key, per object key, the last accepted spec (trimmed)."""
    held: HeldObjects | None = None
    conflicts: dict[str, str] = Field(default_factory=dict)
    """New workers left out because others' objects have their names (``ObjectExists``)."""
    refused: dict[str, str] = Field(default_factory=dict)
    """Per TemporalWorker object, the API server's refusal of its Deployment (``InvalidSpec``)."""
    versions: dict[str, WorkerVersions] = Field(default_factory=dict)
    """Per versioned worker, the versions whose Deployments the program declares."""
    scope: BuildScope | None = None
    """A targeted ``up`` that builds only some workers (never hashed or compared)."""

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
        """Read a document written by :meth:`to_file`."""
        return cls.model_validate_json(Path(path).read_text())

    @classmethod
    def from_env(cls) -> DesiredInputs | None:
        """The document :data:`INPUTS_ENV` names, or ``None`` when it names none."""
        path = os.environ.get(INPUTS_ENV)
        return cls.from_file(path) if path else None
