"""CustomResourceDefinitions generated from the fleet-file models.

``TemporalWorker`` (``temporal.kmsvc.io/v1``), ``Connection`` and ``ClusterConnection``
(``temporal.io/v1alpha1``) carry the same spec as their entries in the fleet file, so
their OpenAPI schemas are derived from the pydantic models rather than written by hand:
a field added to a model appears in the CRD with its docstring, and the two never
disagree.

``Connection`` is also the official worker controller's kind (same group, version and
name): its spec has exactly the official fields (``hostPort``, ``tls.serverName``,
``mutualTLSSecretRef``, ``apiKeySecretRef``), so either CRD keeps every field the other
writes, and where the official CRD is installed twc uses it as it is (see
:mod:`twc.kube.crds`). ``ClusterConnection`` is twc's own (the official controller has no
cluster-scoped connection): the same spec plus twc's ``secretSource``.

The API server only accepts *structural* schemas, so the models' JSON Schema is rewritten:
``$ref`` is inlined, ``anyOf [X, null]`` becomes ``X`` with ``nullable: true``, free-form
JSON becomes ``x-kubernetes-preserve-unknown-fields``, quantities become
``x-kubernetes-int-or-string``, and ``title``, ``additionalProperties: false`` and null
defaults are dropped (unknown fields are pruned by the server instead). Rules a single
model checks in a validator are restated as CEL ``x-kubernetes-validations`` with the
same messages.

Pure: builds plain dicts, imports nothing beyond pydantic and :mod:`twc.spec`.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from twc.spec._models import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    CONNECTION_VERSION,
    ClusterConnection,
    Connection,
    ConnectionRef,
    GateInputSource,
    ObjectRef,
    Rollout,
    RolloutStep,
    TemporalWorker,
)

__all__ = [
    "CONNECTION_SPEC_RULES",
    "CONNECTION_VERSION",
    "CRD_VERSION",
    "MANAGED_BY_LABEL",
    "VIEW_LABEL",
    "WORKER_GROUP",
    "WORKER_KIND",
    "WORKER_VERSION",
    "GateRunStatus",
    "ObservedConnectionRef",
    "RolloutState",
    "TemporalWorkerStatus",
    "WorkerCondition",
    "WorkerVersionStatus",
    "all_crds",
    "cluster_connection_crd",
    "connection_crd",
    "openapi_schema",
    "structural",
    "temporal_worker_crd",
]

WORKER_GROUP = "temporal.kmsvc.io"
"""API group of the ``TemporalWorker`` kind."""
WORKER_KIND = "TemporalWorker"
"""Kind of the Kubernetes-native worker object."""
WORKER_VERSION = "v1"
"""The served (and stored) version of the ``TemporalWorker`` CRD."""
CRD_VERSION = WORKER_VERSION
"""The ``TemporalWorker`` CRD's version (the name the daemon's watches use)."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""Label on every CRD twc generates (value ``twc``): what tells twc's CRDs from the
official controller's when installing."""
VIEW_LABEL = "twc.temporal.io/derived-from"
"""The label of the TemporalWorker objects twc generates to show a worker that comes
from a Queue object or the fleet file (see :mod:`twc.native.views`)."""
_FROM_PATH = ".metadata.labels." + VIEW_LABEL.replace(".", "\\.")

# Fields that come from the object's metadata, not its spec.
_METADATA_FIELDS = frozenset({"name", "namespace"})

Rule = dict[str, str]


def _set(field: str) -> str:
    # The server keeps an explicit null in a nullable field, but CEL's has() is false for
    # it: null means unset here, as it does to pydantic. (`!= null` does not compile.)
    return f"has(self.{field})"


CONNECTION_REF_RULES: list[Rule] = [
    {
        "rule": f"{_set('name')} != {_set('objectRef')}",
        "message": "exactly one of name or objectRef must be set",
    }
]
OBJECT_REF_RULES: list[Rule] = [
    {
        "rule": f"self.apiGroup == '{API_GROUP}'",
        "message": f"apiGroup must be {API_GROUP}",
    }
]
CONNECTION_SPEC_RULES: list[Rule] = [
    {
        "rule": f"!({_set('mutualTLSSecretRef')} && {_set('apiKeySecretRef')})",
        "message": "mutualTLSSecretRef and apiKeySecretRef are mutually exclusive",
    }
]
"""CEL rules on a Connection's or ClusterConnection's ``spec``."""

ROLLOUT_RULES: list[Rule] = [
    {
        "rule": f"self.strategy != 'Progressive' || ({_set('steps')} && size(self.steps) > 0)",
        "message": "steps are required for Progressive rollout",
    },
    {
        # Strictly increasing: sorted, and no percentage twice (CEL has no index loop).
        "rule": f"self.strategy != 'Progressive' || !{_set('steps')} || "
        "(self.steps.map(s, s.rampPercentage).isSorted() && "
        "self.steps.all(s, self.steps.exists_one(t, t.rampPercentage == s.rampPercentage)))",
        "message": "rampPercentage must increase between each step",
    },
]
"""CEL rules of a rollout (the official controller's, with its messages)."""
ROLLOUT_STEP_RULES: list[Rule] = [
    {
        "rule": "duration(self.pauseDuration) >= duration('30s')",
        "message": "pause duration must be at least 30s",
    }
]
# No CEL rule for "input or inputFrom": ``input`` is free-form JSON, which CEL cannot see
# (the API server refuses the rule: "undefined field 'input'"). The model checks it when
# the daemon loads the object, as the official controller's webhook does.
GATE_INPUT_RULES: list[Rule] = [
    {
        "rule": f"{_set('configMapKeyRef')} != {_set('secretKeyRef')}",
        "message": "exactly one of configMapKeyRef or secretKeyRef must be set",
    }
]

# Model validators restated in CEL, keyed by the model's name in the JSON Schema's $defs.
_DEF_RULES: dict[str, list[Rule]] = {
    ConnectionRef.__name__: CONNECTION_REF_RULES,
    ObjectRef.__name__: OBJECT_REF_RULES,
    Rollout.__name__: ROLLOUT_RULES,
    RolloutStep.__name__: ROLLOUT_STEP_RULES,
    GateInputSource.__name__: GATE_INPUT_RULES,
}


# --- status -----------------------------------------------------------------------------


class _StatusModel(BaseModel):
    """Base of status models: camelCase keys; unknown keys from other writers ignored."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )


class WorkerCondition(_StatusModel):
    """One condition on a TemporalWorker, shaped like ``metav1.Condition``."""

    type: str
    """Condition type, e.g. ``WorkerDeploymentReady`` or ``TemporalTaskQueueRegistered``."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str = ""
    """Stable, CamelCase reason for the condition's last transition."""
    message: str = ""
    """Human-readable details of the last transition."""
    last_transition_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}
    )
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The object's ``metadata.generation`` the condition was computed from."""


class ObservedConnectionRef(_StatusModel):
    """The connection a worker was last reconciled against, made absolute."""

    api_group: str
    """API group of the connection kind."""
    kind: str
    """Kind of the connection object, e.g. ``ClusterConnection``."""
    name: str
    """Name of the connection object."""
    namespace: str | None = None
    """Namespace of a namespaced connection; empty for cluster-scoped kinds."""


class GateRunStatus(_StatusModel):
    """A gate workflow run on a version (the official controller's ``testWorkflows``)."""

    workflow_id: str = Field(alias="workflowID")
    """Its workflow ID."""
    task_queue: str
    """The task queue it runs on."""
    status: str
    """``Running``, ``Completed``, ``Failed``, ``Canceled``, ``Terminated``, ``TimedOut``."""


class WorkerVersionStatus(_StatusModel):
    """One version of a versioned worker, with the official status names."""

    build_id: str = Field(alias="buildID")
    """The version's build ID."""
    status: Literal["NotRegistered", "Inactive", "Ramping", "Current", "Draining", "Drained"]
    """Where Temporal's routing has it."""
    deployment: str | None = None
    """Its Deployment's name, while it has one."""
    replicas: int | None = Field(default=None, ge=0)
    """Replicas its Deployment asks for."""
    ready_replicas: int | None = Field(default=None, ge=0)
    """Replicas of it ready to serve."""
    ramp_percentage: float | None = Field(default=None, ge=0, le=100)
    """While Ramping: its share of new workflow executions."""
    ramp_last_modified_at: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}
    )
    """While Ramping: when the ramp last changed (a step's pause counts from here)."""
    drained_since: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    """When Drained: since when (its sunset delays count from here)."""
    test_workflows: list[GateRunStatus] = Field(default_factory=list)
    """The target version's gate runs."""


class RolloutState(_StatusModel):
    """Where a versioned worker's rollout stands."""

    phase: Literal["Progressing", "Complete", "Blocked", "Manual", "Unknown"]
    """``Blocked``: a gate failed; ``Manual``: operators route."""
    reason: str = ""
    """Stable reason: ``WaitingForPollers``, ``WaitingForGate``, ``Ramping``,
    ``Promoting``, ``RollingBack``, ``RolloutComplete``, ``GateFailed``..."""
    message: str = ""
    """The same in words."""


class TemporalWorkerStatus(_StatusModel):
    """What the daemon last observed of a TemporalWorker (the status subresource)."""

    phase: Literal["Pending", "Ready", "Failed"] | None = None
    """``Pending`` until the Deployment is ready and the task queue has pollers."""
    replicas: int | None = Field(default=None, ge=0)
    """Replicas the Deployment asks for."""
    ready_replicas: int | None = Field(default=None, ge=0)
    """Replicas ready to serve."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The ``metadata.generation`` this status was computed from."""
    task_queue: str | None = None
    """The task queue the worker polls (``taskQueueName``, or its queue's name)."""
    observed_connection_ref: ObservedConnectionRef | None = None
    """The connection the worker was last reconciled against."""
    conditions: list[WorkerCondition] = Field(default_factory=list)
    """``WorkerDeploymentReady`` and ``TemporalTaskQueueRegistered``."""
    deployment_name: str | None = None
    """With ``rollout``: the worker's Temporal worker deployment (``<ns>/<name>``)."""
    target_version: WorkerVersionStatus | None = None
    """With ``rollout``: the version the spec asks for."""
    current_version: WorkerVersionStatus | None = None
    """With ``rollout``: the version Temporal routes new executions to."""
    ramping_version: WorkerVersionStatus | None = None
    """With ``rollout``: a version other than the target that ramps (set by hand)."""
    deprecated_versions: list[WorkerVersionStatus] = Field(default_factory=list)
    """With ``rollout``: every other version that still has a Deployment."""
    rollout: RolloutState | None = None
    """With ``rollout``: where the rollout stands."""


# --- JSON Schema -> structural OpenAPI ---------------------------------------------------


def _is_null(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null" and len(schema) == 1


def _is_int_or_string(branches: list[Any]) -> bool:
    types = {b.get("type") for b in branches if isinstance(b, dict)}
    return len(branches) == 2 and types in ({"string", "number"}, {"string", "integer"})


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rewrite a pydantic JSON Schema node into a structural OpenAPI v3 schema.

    Args:
        schema: A JSON Schema node, e.g. ``Model.model_json_schema(by_alias=True)``.
        defs: The ``$defs`` that ``$ref`` nodes point into; taken from ``schema`` when
            it is the document root.

    Returns:
        A new schema with no ``$ref``/``$defs``, no null branches, a ``type`` on every
        node (or one of the ``x-kubernetes-*`` escapes the API server accepts instead),
        and the CEL rules of models that have them.

    Raises:
        ValueError: On a construct the API server cannot express (a recursive model, a
            union of two object types), so a model change fails in tests, not at install.
    """
    if defs is None:
        defs = schema.get("$defs", {})
    return _convert(schema, defs, ())


def _convert(node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    node = dict(node)
    node.pop("$defs", None)
    rules: list[Rule] = []

    ref = node.pop("$ref", None)
    if ref is not None:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"recursive model {name} cannot be a structural schema")
        target = _convert(defs[name], defs, (*seen, name))
        # Keys next to the $ref (a field's own description) win over the model's.
        node = {**target, **node}
        seen = (*seen, name)

    any_of = node.pop("anyOf", None)
    if any_of is not None:
        branches = [b for b in any_of if not _is_null(b)]
        if len(branches) < len(any_of):
            node["nullable"] = True
        if len(branches) == 1:
            inner = _convert(branches[0], defs, seen)
            node = {**inner, **node}
        elif _is_int_or_string(branches):
            # Kubernetes quantities: the API server's own int-or-string escape.
            node["x-kubernetes-int-or-string"] = True
        else:
            raise ValueError(f"cannot express anyOf {any_of!r} as a structural schema")

    if "const" in node:
        node["enum"] = [node.pop("const")]
    node.pop("title", None)
    if "default" in node and node["default"] is None:
        # Absent already means "inherit"; a null default would only be pruned or rejected.
        del node["default"]
    if node.get("additionalProperties") is False:
        # Forbidden in CRDs: the server prunes unknown fields instead.
        del node["additionalProperties"]

    if "properties" in node:
        node["properties"] = {
            key: _convert(value, defs, seen) for key, value in node["properties"].items()
        }
        node.setdefault("type", "object")
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        node["additionalProperties"] = _convert(additional, defs, seen)
        node.setdefault("type", "object")
    if isinstance(node.get("items"), dict):
        node["items"] = _convert(node["items"], defs, seen)

    if ref is not None:
        rules.extend(_DEF_RULES.get(ref.rsplit("/", 1)[-1], []))
    if rules:
        node["x-kubernetes-validations"] = [*node.get("x-kubernetes-validations", []), *rules]

    if (
        "type" not in node
        and not node.get("x-kubernetes-int-or-string")
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        # A pydantic JsonValue ({}): any JSON, kept as written.
        node["x-kubernetes-preserve-unknown-fields"] = True
    additional = node.get("additionalProperties")
    if (
        node.get("type") == "object"
        and isinstance(additional, dict)
        and additional.get("x-kubernetes-preserve-unknown-fields")
    ):
        # A free-form mapping (e.g. nodeAffinity): say so at the object itself.
        del node["additionalProperties"]
        node["x-kubernetes-preserve-unknown-fields"] = True
    return node


def openapi_schema(
    model: type[BaseModel], *, drop: frozenset[str] = frozenset(), rules: list[Rule] | None = None
) -> dict[str, Any]:
    """Return the structural OpenAPI schema of ``model``'s JSON form.

    Args:
        model: A fleet-file (or status) model.
        drop: Top-level fields to leave out (those that live in the object's metadata).
        rules: CEL rules for the model's own node.

    Returns:
        The schema of one ``spec`` (or ``status``) object.
    """
    schema = copy.deepcopy(model.model_json_schema(by_alias=True, mode="validation"))
    properties = schema.get("properties", {})
    for key in drop:
        properties.pop(key, None)
    if "required" in schema:
        schema["required"] = [key for key in schema["required"] if key not in drop]
        if not schema["required"]:
            del schema["required"]
    out = structural(schema)
    out.pop("x-kubernetes-validations", None)
    own = [*_DEF_RULES.get(model.__name__, []), *(rules or [])]
    if own:
        out["x-kubernetes-validations"] = own
    return out


# --- CRDs -------------------------------------------------------------------------------

_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _crd(
    *,
    group: str,
    kind: str,
    plural: str,
    scope: Literal["Namespaced", "Cluster"],
    short_names: list[str],
    description: str,
    spec: dict[str, Any],
    status: dict[str, Any] | None,
    columns: list[dict[str, Any]],
    root_rules: list[Rule] | None = None,
    version_name: str = WORKER_VERSION,
) -> dict[str, Any]:
    properties: dict[str, Any] = {"spec": spec}
    if status is not None:
        properties["status"] = status
    root: dict[str, Any] = {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": ["spec"],
    }
    if root_rules:
        root["x-kubernetes-validations"] = root_rules
    version: dict[str, Any] = {
        "name": version_name,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
        "additionalPrinterColumns": [*columns, _AGE_COLUMN],
    }
    if status is not None:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "labels": {MANAGED_BY_LABEL: "twc"},
        },
        "spec": {
            "group": group,
            "scope": scope,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
            },
            "versions": [version],
        },
    }


def _doc(model: type[BaseModel]) -> str:
    return (model.__doc__ or "").strip()


def temporal_worker_crd() -> dict[str, Any]:
    """The ``TemporalWorker`` CRD (``temporal.kmsvc.io/v1``, namespaced).

    Its spec is a fleet-file worker without ``name``/``namespace`` (the object's
    metadata); its status subresource is :class:`TemporalWorkerStatus`.
    """
    spec = openapi_schema(
        TemporalWorker,
        drop=_METADATA_FIELDS,
        rules=[
            {
                "rule": f"{_set('queueRef')} || {_set('taskQueueName')}",
                "message": "set queueRef or taskQueueName: the worker needs a task queue",
            }
        ],
    )
    status = openapi_schema(TemporalWorkerStatus)
    conditions = status["properties"]["conditions"]
    # One condition per type, merged by type under server-side apply.
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return _crd(
        group=WORKER_GROUP,
        kind=WORKER_KIND,
        plural="temporalworkers",
        scope="Namespaced",
        short_names=["tw"],
        description=_doc(TemporalWorker),
        spec=spec,
        status=status,
        columns=[
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            # The resolved queue: a worker with only a queueRef has no spec.taskQueueName.
            {"name": "TaskQueue", "type": "string", "jsonPath": ".status.taskQueue"},
            # Where the worker comes from: `Queue` or `Fleet` on the objects twc generates
            # to show every worker it runs; empty on objects people made.
            {"name": "From", "type": "string", "jsonPath": _FROM_PATH},
            # Versioned workers, as the official controller shows them (`-o wide`).
            {
                "name": "Current",
                "type": "string",
                "jsonPath": ".status.currentVersion.buildID",
                "priority": 1,
            },
            {
                "name": "Target",
                "type": "string",
                "jsonPath": ".status.targetVersion.buildID",
                "priority": 1,
            },
            {
                "name": "Ramp %",
                "type": "number",
                "jsonPath": ".status.targetVersion.rampPercentage",
                "priority": 1,
            },
        ],
        root_rules=[
            {
                # Worker names name Deployments and pods: a DNS label, not a subdomain.
                "rule": "size(self.metadata.name) <= 63",
                "message": "metadata.name must be at most 63 characters",
            }
        ],
    )


def _connection_columns() -> list[dict[str, Any]]:
    # The official controller's column, so `kubectl get connections` reads the same.
    return [
        {
            "name": "Host",
            "type": "string",
            "jsonPath": ".spec.hostPort",
            "description": "Temporal server endpoint",
        },
    ]


# The official Connection has a status subresource with no fields yet; the same shape
# here, so either CRD treats a status write alike.
_CONNECTION_STATUS: dict[str, Any] = {"type": "object"}


def connection_crd() -> dict[str, Any]:
    """The namespaced ``Connection`` CRD (``temporal.io/v1alpha1``, the official kind)."""
    return _crd(
        group=API_GROUP,
        kind=CONNECTION_KIND,
        plural="connections",
        scope="Namespaced",
        short_names=["tconn"],
        description=_doc(Connection),
        spec=openapi_schema(Connection, drop=_METADATA_FIELDS, rules=CONNECTION_SPEC_RULES),
        status=dict(_CONNECTION_STATUS),
        columns=_connection_columns(),
        version_name=CONNECTION_VERSION,
    )


def cluster_connection_crd() -> dict[str, Any]:
    """The cluster-scoped ``ClusterConnection`` CRD (``temporal.io/v1alpha1``, twc's own)."""
    return _crd(
        group=API_GROUP,
        kind=CLUSTER_CONNECTION_KIND,
        plural="clusterconnections",
        scope="Cluster",
        short_names=["tcc"],
        description=_doc(ClusterConnection),
        spec=openapi_schema(
            ClusterConnection,
            drop=_METADATA_FIELDS,
            rules=[
                *CONNECTION_SPEC_RULES,
                {
                    "rule": f"!{_set('secretSource')} || {_set('mutualTLSSecretRef')} || "
                    f"{_set('apiKeySecretRef')}",
                    "message": "secretSource needs a secret to copy: "
                    "set mutualTLSSecretRef or apiKeySecretRef",
                },
            ],
        ),
        status=dict(_CONNECTION_STATUS),
        columns=_connection_columns(),
        version_name=CONNECTION_VERSION,
    )


def all_crds() -> list[dict[str, Any]]:
    """Every CRD generated from the spec models, in install order."""
    return [temporal_worker_crd(), connection_crd(), cluster_connection_crd()]
