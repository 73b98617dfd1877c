"""CustomResourceDefinitions generated from the fleet-file models: their spec, docstrings
and CEL rules, as the *structural* schema the API server accepts."""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from twc.spec._models import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    ClusterConnection,
    Connection,
    DnsLabel,
    SpecModel,
    TemporalWorker,
)
from twc.spec._models import CONNECTION_VERSION as CONNECTION_VERSION

WORKER_GROUP = "temporal.kmsvc.io"
WORKER_KIND = "TemporalWorker"
CRD_VERSION = "v1"
"""The served and stored version of the ``TemporalWorker`` CRD."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""Label (value ``twc``) that tells twc's CRDs from the official controller's."""
OFFICIAL_WORKER_KIND = "WorkerDeployment"
"""The official controller's versioned worker (``temporal.io/v1alpha1``), served by twc too."""
OFFICIAL_WORKER_PLURAL = "workerdeployments"
RESOURCE_TEMPLATE_KIND = "WorkerResourceTemplate"
RESOURCE_TEMPLATE_PLURAL = "workerresourcetemplates"
VIEW_LABEL = "twc.temporal.io/derived-from"
"""Label of the TemporalWorker views twc writes of workers from a Queue or the fleet file."""
_METADATA_FIELDS = frozenset({"name", "namespace"})
_TIME: JsonDict = {"format": "date-time"}


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
    """``WorkerDeploymentReady`` or ``TemporalTaskQueueRegistered``."""
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    """Stable, CamelCase reason for the condition's last transition."""
    message: str = ""
    last_transition_time: str | None = Field(default=None, json_schema_extra=_TIME)
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The object's ``metadata.generation`` the condition was computed from."""


class ObservedConnectionRef(_StatusModel):
    """The connection a worker was last reconciled against, made absolute."""

    api_group: str
    kind: str
    name: str
    namespace: str | None = None
    """Namespace of a namespaced connection; empty for cluster-scoped kinds."""


class GateRunStatus(_StatusModel):
    """A gate workflow run on a version (the official controller's ``testWorkflows``)."""

    workflow_id: str = Field(alias="workflowID")
    task_queue: str
    status: str
    """``Running``, ``Completed``, ``Failed``, ``Canceled``, ``Terminated``, ``TimedOut``."""


class WorkerVersionStatus(_StatusModel):
    """One version of a versioned worker, with the official status names."""

    build_id: str = Field(alias="buildID")
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
    ramp_last_modified_at: str | None = Field(default=None, json_schema_extra=_TIME)
    """While Ramping: when the ramp last changed (a step's pause counts from here)."""
    drained_since: str | None = Field(default=None, json_schema_extra=_TIME)
    """When Drained: since when (its sunset delays count from here)."""
    test_workflows: list[GateRunStatus] = Field(default_factory=list)
    """The target version's gate runs."""
    scaling_reason: str | None = None
    """Autoscaled: why it has its count (the autoscaler's reason, or ``DrainingFloor``)."""


class RolloutState(_StatusModel):
    """Where a versioned worker's rollout stands."""

    phase: Literal["Progressing", "Complete", "Blocked", "Manual", "Unknown"]
    """``Blocked``: a gate failed; ``Manual``: operators route."""
    reason: str = ""
    """Stable reason: ``WaitingForPollers``, ``WaitingForGate``, ``Ramping``, ``GateFailed``..."""
    message: str = ""


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
    scaling_reason: str | None = None
    """Autoscaled: why it has its count (``Stabilized`` while the cool-down holds,
    ``BelowActivation`` asleep at zero; the autoscaler's reason)."""
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


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema node as a structural schema; ValueError on what it cannot express."""
    return _convert(schema, schema.get("$defs", {}), ())


def _convert(node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    node = {k: v for k, v in node.items() if k not in ("$defs", "title")}
    ref = node.pop("$ref", None)
    if ref is not None:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"recursive model {name} cannot be a structural schema")
        seen = (*seen, name)
        # Keys next to the $ref (a field's own description) win over the model's.
        node = {**_convert(defs[name], defs, seen), **node}
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        branches = [b for b in any_of if b != {"type": "null"}]
        if len(branches) < len(any_of):
            node["nullable"] = True
        types = {b.get("type") for b in branches}
        if len(branches) == 1:
            node = {**_convert(branches[0], defs, seen), **node}
        elif len(branches) == 2 and types in ({"string", "number"}, {"string", "integer"}):
            node["x-kubernetes-int-or-string"] = True  # Kubernetes quantities
        else:
            raise ValueError(f"cannot express anyOf {any_of!r} as a structural schema")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "default" in node and node["default"] is None:
        del node["default"]  # absent already means "inherit"
    if node.get("additionalProperties") is False:
        del node["additionalProperties"]  # forbidden in CRDs: the server prunes instead
    if "properties" in node:
        node["properties"] = {k: _convert(v, defs, seen) for k, v in node["properties"].items()}
        node.setdefault("type", "object")
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        additional = node["additionalProperties"] = _convert(additional, defs, seen)
        node.setdefault("type", "object")
    if isinstance(node.get("items"), dict):
        node["items"] = _convert(node["items"], defs, seen)
    escapes = ("x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields")
    if "type" not in node and not any(node.get(e) for e in escapes):
        node["x-kubernetes-preserve-unknown-fields"] = True  # a JsonValue: any JSON
    if isinstance(additional, dict) and additional.get("x-kubernetes-preserve-unknown-fields"):
        # A free-form mapping (e.g. nodeAffinity): say so at the object itself.
        del node["additionalProperties"]
        node["x-kubernetes-preserve-unknown-fields"] = True
    return node


def openapi_schema(model: type[BaseModel], *, drop: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The structural schema of one ``spec`` (or ``status``) of ``model``, without ``drop``."""
    schema = copy.deepcopy(model.model_json_schema(by_alias=True, mode="validation"))
    for key in drop:
        schema.get("properties", {}).pop(key, None)
    if rules := schema.get("x-kubernetes-validations"):  # none about a dropped field
        schema["x-kubernetes-validations"] = [
            r for r in rules if not any(f"self.{key}" in r["rule"] for key in drop)
        ]
    required = [key for key in schema.pop("required", []) if key not in drop]
    return structural(schema | ({"required": required} if required else {}))


def _crd(
    spec_model: type[BaseModel],
    short_name: str,
    status: JsonDict,
    columns: list[JsonDict],
    drop: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    kind = spec_model.__name__
    worker, plural = kind == WORKER_KIND, f"{kind.lower()}s"
    scope = "Cluster" if kind == CLUSTER_CONNECTION_KIND else "Namespaced"
    group, version = (WORKER_GROUP, CRD_VERSION) if worker else (API_GROUP, CONNECTION_VERSION)
    root: dict[str, Any] = {
        "type": "object",
        "description": (spec_model.__doc__ or "").strip(),
        "properties": {
            "spec": openapi_schema(spec_model, drop=_METADATA_FIELDS | drop),
            "status": status,
        },
        "required": ["spec"],
    }
    if worker:
        # Worker names name Deployments and pods: a DNS label, not a subdomain.
        rule = "size(self.metadata.name) <= 63"
        message = "metadata.name must be at most 63 characters"
        root["x-kubernetes-validations"] = [{"rule": rule, "message": message}]
    age = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    names = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {MANAGED_BY_LABEL: "twc"}},
        "spec": {
            "group": group,
            "scope": scope,
            "names": names | {"shortNames": [short_name]},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "additionalPrinterColumns": [*columns, age],
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def _column(name: str, path: str, kind: str = "string", priority: int = 0) -> JsonDict:
    column: JsonDict = {"name": name, "type": kind, "jsonPath": path}
    return column | ({"priority": priority} if priority else {})


def temporal_worker_crd() -> dict[str, Any]:
    """The ``TemporalWorker`` CRD: a fleet worker's spec, :class:`TemporalWorkerStatus`."""
    status = openapi_schema(TemporalWorkerStatus)
    # One condition per type, merged by type under server-side apply.
    status["properties"]["conditions"] |= {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    }
    columns = [
        _column("Phase", ".status.phase"),
        _column("Replicas", ".status.replicas", "integer"),
        _column("Ready", ".status.readyReplicas", "integer"),
        _column("TaskQueue", ".status.taskQueue"),
        # `Queue` or `Fleet` on the views twc writes; empty on objects people made.
        _column("From", ".metadata.labels." + VIEW_LABEL.replace(".", "\\.")),
        # Versioned workers, as the official controller shows them (`-o wide`).
        _column("Current", ".status.currentVersion.buildID", priority=1),
        _column("Target", ".status.targetVersion.buildID", priority=1),
        _column("Ramp %", ".status.targetVersion.rampPercentage", "number", 1),
    ]
    return _crd(TemporalWorker, "tw", status, columns)


# The official controller's column and (field-less) status, so either CRD reads the same.
_HOST = _column("Host", ".spec.hostPort") | {"description": "Temporal server endpoint"}


def connection_crd() -> dict[str, Any]:
    """The namespaced ``Connection`` CRD (``temporal.io/v1alpha1``, the official kind;
    twc's ``twcCredentials`` an annotation)."""
    return _crd(Connection, "tconn", {"type": "object"}, [_HOST], frozenset({"twcCredentials"}))


def cluster_connection_crd() -> dict[str, Any]:
    """The cluster-scoped ``ClusterConnection`` CRD (``temporal.io/v1alpha1``): the official fields,
    twc's ``secretSource``, ``allowedNamespaces`` and ``twcCredentials`` being annotations."""
    extras = frozenset({"secretSource", "allowedNamespaces", "twcCredentials"})
    return _crd(ClusterConnection, "tcc", {"type": "object"}, [_HOST], extras)


def worker_deployment_crd() -> dict[str, Any]:
    """The official ``WorkerDeployment`` CRD (``temporal.io/v1alpha1``): the official spec
    fields and nothing of twc's (the official manifests apply as they are), read through
    :func:`~twc.spec.convert.as_temporal_worker`; its status is the official shape."""
    crd = temporal_worker_crd()
    version = crd["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]
    ours = root["properties"]["spec"]["properties"]
    rollout = copy.deepcopy(ours["rollout"])
    rollout["properties"].pop("failureRate")  # twc's own field, not the official kind's
    build_id = rollout["properties"].pop("buildID")
    kinds = {"type": "string", "enum": [CONNECTION_KIND, CLUSTER_CONNECTION_KIND]}
    ref = {"type": "object", "properties": {"name": {"type": "string"}, "kind": kinds}}
    ref["required"] = ["name"]
    options = {
        "type": "object",
        "properties": {
            "connectionRef": ref,
            "temporalNamespace": {"type": "string", "minLength": 1},
            "unsafeCustomBuildID": {k: v for k, v in build_id.items() if k != "nullable"},
        },
        "required": ["connectionRef", "temporalNamespace"],
    }
    seconds = {"type": "integer", "minimum": 0}
    root["properties"] = {
        "spec": {
            "type": "object",
            "properties": {
                **{key: ours[key] for key in ("replicas", "template", "sunset")},
                **{"minReadySeconds": seconds, "progressDeadlineSeconds": seconds},
                **{"rollout": rollout, "workerOptions": options},
            },
            "required": ["rollout", "sunset", "template", "workerOptions"],
        },
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    root["description"] = "A versioned worker, the official worker controller's kind."
    crd["metadata"]["name"] = f"{OFFICIAL_WORKER_PLURAL}.{API_GROUP}"
    kind = OFFICIAL_WORKER_KIND
    names = {"kind": kind, "listKind": f"{kind}List", "plural": OFFICIAL_WORKER_PLURAL}
    crd["spec"] |= {"group": API_GROUP, "names": names | {"singular": kind.lower()}}
    crd["spec"]["names"]["shortNames"] = ["wd", "wdeployment"]
    version["name"] = CONNECTION_VERSION
    columns = version["additionalPrinterColumns"][-4:]  # the official ones, shown by default
    version["additionalPrinterColumns"] = [
        {k: v for k, v in c.items() if k != "priority"} for c in columns
    ]
    return crd


class WorkerDeploymentRef(SpecModel):
    name: DnsLabel
    """A WorkerDeployment of the same namespace."""


class WorkerResourceTemplate(SpecModel):
    """An object made with each running version of a WorkerDeployment (the official kind):
    read as that worker's ``resourceTemplates`` entry named like it."""

    worker_deployment_ref: WorkerDeploymentRef | None = None
    temporal_worker_deployment_ref: WorkerDeploymentRef | None = None
    """The older name of ``workerDeploymentRef``."""
    template: dict[str, JsonValue]
    """The object's ``apiVersion``, ``kind`` and ``spec``."""


def worker_resource_template_crd() -> dict[str, Any]:
    """The official ``WorkerResourceTemplate`` CRD (``temporal.io/v1alpha1``)."""
    columns = [
        _column("Worker", ".spec.workerDeploymentRef.name"),
        _column("Kind", ".spec.template.kind"),
    ]
    status: JsonDict = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return _crd(WorkerResourceTemplate, "wrt", status, columns)


def all_crds() -> list[dict[str, Any]]:
    """Every CRD generated from the spec models, in install order."""
    return [
        temporal_worker_crd(),
        connection_crd(),
        cluster_connection_crd(),
        worker_deployment_crd(),
        worker_resource_template_crd(),
    ]
