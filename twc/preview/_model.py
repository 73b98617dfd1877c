"""The preview report: pure data, stable, serialized as documented in docs/preview-json.md.

Field names serialize in camelCase (``schemaVersion``, ``restartingWorkers``), like the
fleet file and Pulumi's own JSON. Adding a field is a compatible change; renaming or
removing one bumps :data:`SCHEMA_VERSION`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

__all__ = [
    "SCHEMA_VERSION",
    "Diagnostic",
    "FieldChange",
    "Group",
    "GroupKind",
    "HeldDeletions",
    "OpCounts",
    "Operation",
    "PreviewReport",
    "Reason",
    "ReasonCode",
    "ResourceChange",
    "Summary",
]

SCHEMA_VERSION = 1
"""Version of the JSON document; bumped on any incompatible change."""


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
    """What a group of resources stands for."""

    CONNECTION = "connection"
    """A ``twc:temporal:ClusterConnection`` or ``twc:temporal:Connection``."""
    QUEUE = "queue"
    """A ``twc:kmsvc:Queue``."""
    WORKER = "worker"
    """A ``twc:temporal:TemporalWorker``."""
    OTHER = "other"
    """A top-level resource outside any twc component (a namespace, a provider...)."""


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
    """Why a group changes, in words."""

    code: ReasonCode
    """Stable kind of reason, for tools."""
    message: str
    """One line for humans, e.g. ``image tag 1.4.2 → 1.5.0``."""


class FieldChange(_Model):
    """One changed property of one resource, from the engine's detailed diff."""

    path: str
    """Property path in the engine's syntax, e.g. ``spec.template.spec.containers[0].image``."""
    kind: Literal["add", "delete", "update"]
    """``add``: no old value; ``delete``: no new value; ``update``: both."""
    replace: bool = False
    """The change cannot be made in place: the resource is replaced."""
    old: JsonValue = None
    """The value before (null for ``add``); ``[secret]`` or ``[unknown]`` when hidden."""
    new: JsonValue = None
    """The value after (null for ``delete``); ``[unknown]`` when known only after apply."""


class ResourceChange(_Model):
    """One resource in a group that the update touches."""

    urn: str
    """The resource's URN."""
    type: str
    """Its Pulumi type token, e.g. ``kubernetes:apps/v1:Deployment``."""
    name: str
    """Its logical name, e.g. ``temporal/worker-orders-deployment``."""
    operation: Operation
    """What happens to it."""
    replace_keys: list[str] = Field(default_factory=list)
    """Properties that force a replacement (only for ``replace``)."""
    fields: list[FieldChange] = Field(default_factory=list)
    """Changed properties (empty for ``create`` and ``delete``)."""


class Group(_Model):
    """A twc component (worker, connection, queue) with its children, or another root."""

    kind: GroupKind
    """What the group stands for."""
    name: str
    """The component's logical name, e.g. ``temporal/worker-orders`` or ``prod``."""
    type: str
    """The component's type token, e.g. ``twc:temporal:TemporalWorker``."""
    urn: str
    """The component's URN."""
    operation: Operation
    """The group's overall operation."""
    restarts: bool = False
    """Workers only: the pod template changes (or the workload is replaced), so pods roll."""
    connection: str | None = None
    """Workers only: the name of the connection group it uses, when it can be told."""
    reasons: list[Reason] = Field(default_factory=list)
    """Why it changes, most important first."""
    resources: list[ResourceChange] = Field(default_factory=list)
    """Resources of the group that change (unchanged ones are only counted)."""


class OpCounts(_Model):
    """How many things each operation touches."""

    create: int = 0
    update: int = 0
    replace: int = 0
    delete: int = 0
    same: int = 0


class Summary(_Model):
    """Totals of a preview."""

    resources: OpCounts
    """Per resource, like Pulumi's own summary (stack and default providers excluded)."""
    groups: OpCounts
    """Per group (worker, connection, queue, other root)."""
    restarting_workers: list[str] = Field(default_factory=list)
    """Workers whose pods will roll, sorted."""
    has_changes: bool
    """Whether anything changes at all."""


class Diagnostic(_Model):
    """An error or warning the engine reported."""

    severity: Literal["error", "warning"]
    """How bad it is; errors make the preview fail (exit code 1)."""
    message: str
    """The message, without color codes."""
    urn: str | None = None
    """The resource it is about, if any."""


class HeldDeletions(_Model):
    """Deletions beyond the deletion guard's share: more running workers than one ``up``
    may delete at once. The daemon holds them until confirmed (``twc approve``);
    ``twc up`` asks first."""

    workers: list[str]
    """The workers that would be deleted, sorted."""
    running: int
    """Workers the stack runs now."""
    allowed: int
    """How many of them one ``up`` may delete without confirmation."""


class PreviewReport(_Model):
    """Everything a reviewer needs from one ``pulumi preview --diff``."""

    schema_version: int = SCHEMA_VERSION
    """Version of this document's shape."""
    project: str
    """The Pulumi project."""
    stack: str
    """The stack previewed."""
    summary: Summary
    """Totals."""
    groups: list[Group] = Field(default_factory=list)
    """Connections, then queues, then workers, then others; each sorted by name."""
    errors: list[Diagnostic] = Field(default_factory=list)
    """Error diagnostics; non-empty means the preview failed."""
    warnings: list[Diagnostic] = Field(default_factory=list)
    """Warning diagnostics."""
    held_deletions: HeldDeletions | None = None
    """Deletions beyond the deletion guard's share, or ``None`` when within it."""

    @property
    def changed_groups(self) -> list[Group]:
        """Groups whose operation is not ``same``."""
        return [g for g in self.groups if g.operation is not Operation.SAME]
