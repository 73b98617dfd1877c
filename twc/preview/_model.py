"""The preview report: pure data, serialized in camelCase as docs/preview-json.md
documents. Renaming or removing a field bumps :data:`SCHEMA_VERSION`."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


class Operation(StrEnum):
    """What the update will do, collapsed from the engine's finer step kinds."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"
    DELETE = "delete"
    SAME = "same"


class GroupKind(StrEnum):
    """What a group stands for: a twc component, or another top-level resource."""

    CONNECTION = "connection"
    QUEUE = "queue"
    WORKER = "worker"
    OTHER = "other"


class ReasonCode(StrEnum):
    """Stable machine-readable kind of a :class:`Reason`."""

    NEW_WORKER = "NewWorker"
    WORKER_REMOVED = "WorkerRemoved"
    NEW_CONNECTION = "NewConnection"
    CONNECTION_REMOVED = "ConnectionRemoved"
    NEW_QUEUE = "NewQueue"
    QUEUE_REMOVED = "QueueRemoved"
    NEW_RESOURCE = "NewResource"
    RESOURCE_REMOVED = "ResourceRemoved"
    CONNECTION_FINGERPRINT_CHANGED = "ConnectionFingerprintChanged"
    HOST_PORT_CHANGED = "HostPortChanged"
    CREDENTIALS_CHANGED = "CredentialsChanged"
    TWC_CREDENTIAL_CHANGED = "TwcCredentialChanged"
    IMAGE_CHANGED = "ImageChanged"
    REPLICAS_CHANGED = "ReplicasChanged"
    REPLICAS_SOURCE_CHANGED = "ReplicasSourceChanged"
    REPLICAS_AUTOSCALED = "ReplicasManagedByAutoscaling"
    ENV_CHANGED = "EnvChanged"
    COMPUTE_RESOURCES_CHANGED = "ComputeResourcesChanged"
    NEW_VERSION = "NewVersion"
    VERSION_ROLLBACK = "VersionRollback"
    VERSION_SUNSET = "VersionSunset"
    CHILD_ADDED = "ChildAdded"
    CHILD_REMOVED = "ChildRemoved"
    CHILD_REPLACED = "ChildReplaced"
    FIELDS_CHANGED = "FieldsChanged"


class Reason(_Model):
    """Why a group changes: a stable code and one line for humans."""

    code: ReasonCode
    message: str


class FieldChange(_Model):
    """One changed property of one resource (a path in the engine's syntax)."""

    path: str
    kind: Literal["add", "delete", "update"]
    replace: bool = False
    old: JsonValue = None
    new: JsonValue = None


class ResourceChange(_Model):
    """One resource of a group that the update touches."""

    urn: str
    type: str
    name: str
    operation: Operation
    replace_keys: list[str] = Field(default_factory=list)
    fields: list[FieldChange] = Field(default_factory=list)


class Group(_Model):
    """A twc component with its changing children, or another root resource."""

    kind: GroupKind
    name: str
    type: str
    urn: str
    operation: Operation
    restarts: bool = False
    connection: str | None = None
    reasons: list[Reason] = Field(default_factory=list)
    resources: list[ResourceChange] = Field(default_factory=list)


class OpCounts(_Model):
    """How many things each operation touches."""

    create: int = 0
    update: int = 0
    replace: int = 0
    delete: int = 0
    same: int = 0


class Summary(_Model):
    """Totals of a preview per resource and per group; the workers whose pods will roll."""

    resources: OpCounts
    groups: OpCounts
    restarting_workers: list[str] = Field(default_factory=list)
    has_changes: bool


class Diagnostic(_Model):
    """An error (the preview failed) or warning the engine reported, without colors."""

    severity: Literal["error", "warning"]
    message: str
    urn: str | None = None


class HeldDeletions(_Model):
    """Worker deletions over the deletion guard's share, held until ``twc approve``."""

    workers: list[str]
    running: int
    allowed: int


class PreviewReport(_Model):
    """Everything a reviewer needs from one ``pulumi preview --diff``."""

    schema_version: int = SCHEMA_VERSION
    project: str
    stack: str
    summary: Summary
    groups: list[Group] = Field(default_factory=list)
    errors: list[Diagnostic] = Field(default_factory=list)
    warnings: list[Diagnostic] = Field(default_factory=list)
    held_deletions: HeldDeletions | None = None

    @property
    def changed_groups(self) -> list[Group]:
        return [g for g in self.groups if g.operation is not Operation.SAME]
