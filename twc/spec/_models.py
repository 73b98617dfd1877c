"""Pydantic models of the fleet file.

These models check what a single object can check on its own (types, names, ranges,
mutually exclusive fields). Rules that need the whole fleet (references, duplicates,
defaults) live in :mod:`twc.spec._resolve`, which reports every problem at once.

Models are frozen: a loaded fleet is a value, safe to hash and share.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from twc.spec._names import (
    check_dns_label,
    check_dns_subdomain,
    check_duration,
    check_env_name,
    check_host_port,
    check_image,
    check_label_key,
    check_label_value,
    check_quantity,
    check_resource_name,
    check_secret_key,
    check_task_queue_name,
    check_temporal_namespace,
    parse_duration,
    parse_quantity,
)
from twc.spec._podsecurity import PodSecurityLevel
from twc.spec._template import check_pod_template, same_level_conflicts

if TYPE_CHECKING:
    from twc.spec._resolve import ResolvedWorker

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "CLUSTER_CONNECTION_KIND",
    "CONNECTION_KIND",
    "CONNECTION_VERSION",
    "DLQ",
    "MIN_PAUSE_SECONDS",
    "RESERVED_ENV_NAMES",
    "TLS",
    "Affinity",
    "AuthMode",
    "Autoscaling",
    "ClusterConnection",
    "Connection",
    "ConnectionRef",
    "ConnectionTarget",
    "CustomConnection",
    "Defaults",
    "Fleet",
    "GateInputSource",
    "GateWorkflow",
    "KeySelector",
    "Lifecycle",
    "ObjectRef",
    "Queue",
    "QueueRef",
    "Resources",
    "Rollout",
    "RolloutStep",
    "RolloutStrategy",
    "SecretKeyRef",
    "SecretRef",
    "SecretSource",
    "ServiceAccount",
    "Sharding",
    "StackSelector",
    "Sunset",
    "TemporalWorker",
    "Toleration",
    "WorkerSettings",
]

API_VERSION = "twc.temporal.io/v1"
"""The fleet file's ``apiVersion``."""
API_GROUP = "temporal.io"
"""The only API group a connection reference may name."""
CONNECTION_KIND = "Connection"
"""Kind of the namespaced connection object."""
CONNECTION_VERSION = "v1alpha1"
"""Version of the ``Connection`` and ``ClusterConnection`` objects: the official worker
controller's ``temporal.io/v1alpha1``, so its manifests apply unchanged."""
CLUSTER_CONNECTION_KIND = "ClusterConnection"
"""Kind of the cluster-scoped connection object."""

RESERVED_ENV_NAMES = frozenset(
    {
        "TEMPORAL_ADDRESS",
        "TEMPORAL_FRONTEND_ADDRESS",
        "TEMPORAL_NAMESPACE",
        "TEMPORAL_TASK_QUEUE",
        "TEMPORAL_API_KEY",
        "TEMPORAL_TLS",
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
        "TEMPORAL_TLS_SERVER_NAME",
        "POD_NAME",
        "POD_NAMESPACE",
        "NODE_NAME",
        "TEMPORAL_DEPLOYMENT_NAME",
        "TEMPORAL_WORKER_BUILD_ID",
    }
)
"""Environment variables twc sets on worker containers; user ``env`` may not set them."""


def _number_to_str(value: object) -> object:
    # YAML reads `cpu: 2` as an int; Kubernetes accepts numbers for quantities, so do we.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
LabelKey = Annotated[str, AfterValidator(check_label_key)]
LabelValue = Annotated[str, AfterValidator(check_label_value)]
SecretKey = Annotated[str, AfterValidator(check_secret_key)]
EnvName = Annotated[str, AfterValidator(check_env_name)]
HostPort = Annotated[str, AfterValidator(check_host_port)]
Image = Annotated[str, AfterValidator(check_image)]
TaskQueueName = Annotated[str, AfterValidator(check_task_queue_name)]
TemporalNamespace = Annotated[str, AfterValidator(check_temporal_namespace)]
ResourceName = Annotated[str, AfterValidator(check_resource_name)]
Quantity = Annotated[
    str,
    BeforeValidator(_number_to_str),
    AfterValidator(check_quantity),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}]}),
]
Duration = Annotated[
    str,
    AfterValidator(check_duration),
    WithJsonSchema(
        {"type": "string", "pattern": r"^(0|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$"}
    ),
]
"""A Go/Kubernetes duration string (``30s``, ``5m``, ``1h30m``), as the official worker
controller's ``metav1.Duration`` fields take it."""
Kind = Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{0,62}$")]
ServerName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s/]+$")]
ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]


class SpecModel(BaseModel):
    """Base of every fleet-file model: camelCase keys, unknown keys rejected, frozen."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        frozen=True,
        use_attribute_docstrings=True,
        hide_input_in_errors=True,
    )


class AuthMode(StrEnum):
    """How a connection authenticates to the Temporal frontend."""

    NONE = "none"
    """No client credentials (TLS may still be on)."""
    MTLS = "mTLS"
    """A client certificate and key from a kubernetes.io/tls secret."""
    API_KEY = "apiKey"
    """A bearer API key from one key of a secret."""


class ConnectionTarget(BaseModel):
    """A connection reference made absolute: what a connection provider resolves.

    ``namespace`` is the namespace of the *referencing* worker; providers of
    cluster-scoped kinds ignore it.
    """

    model_config = ConfigDict(frozen=True)

    api_group: str
    """API group of the connection kind (always ``temporal.io`` today)."""
    kind: str
    """Kind of the connection object, e.g. ``Connection`` or ``ClusterConnection``."""
    name: str
    """Name of the connection object."""
    namespace: str
    """Namespace of the worker holding the reference."""

    def __str__(self) -> str:
        return f"{self.kind} {self.api_group}/{self.name}"


class ObjectRef(SpecModel):
    """A typed reference to a connection object of any registered kind."""

    api_group: str
    """API group of the referenced kind; must be ``temporal.io``."""
    kind: Kind
    """Kind of the referenced object, e.g. ``ClusterConnection``; resolved through the
    connection-provider registry."""
    name: DnsSubdomain
    """Name of the referenced object."""

    @model_validator(mode="after")
    def _known_group(self) -> ObjectRef:
        if self.api_group != API_GROUP:
            raise ValueError(f"apiGroup must be {API_GROUP}, got {self.api_group!r}")
        return self


class ConnectionRef(SpecModel):
    """Which Temporal connection a worker uses: exactly one of ``name`` or ``objectRef``."""

    name: DnsSubdomain | None = None
    """Name of a ``Connection`` in the worker's own namespace."""
    object_ref: ObjectRef | None = None
    """A typed reference, e.g. to a ``ClusterConnection``."""

    @model_validator(mode="after")
    def _exactly_one(self) -> ConnectionRef:
        if (self.name is None) == (self.object_ref is None):
            raise ValueError("exactly one of name or objectRef must be set")
        return self

    def target(self, namespace: str) -> ConnectionTarget:
        """Return the reference made absolute for a worker in ``namespace``."""
        if self.object_ref is not None:
            return ConnectionTarget(
                api_group=self.object_ref.api_group,
                kind=self.object_ref.kind,
                name=self.object_ref.name,
                namespace=namespace,
            )
        assert self.name is not None  # guaranteed by _exactly_one
        return ConnectionTarget(
            api_group=API_GROUP, kind=CONNECTION_KIND, name=self.name, namespace=namespace
        )


class SecretRef(SpecModel):
    """A whole Secret: for mTLS, a kubernetes.io/tls secret with ``tls.crt``,
    ``tls.key`` and optionally ``ca.crt``."""

    name: DnsSubdomain
    """Name of the Secret, looked up in the namespace of each worker using it."""


class SecretKeyRef(SpecModel):
    """One key of a Secret."""

    name: DnsSubdomain
    """Name of the Secret, looked up in the namespace of each worker using it."""
    key: SecretKey = "api-key"
    """Key inside the Secret's data that holds the value."""
    optional: bool | None = None
    """Accepted for the official controller's ``apiKeySecretRef`` (a Kubernetes
    SecretKeySelector); a connection's secret is never optional to twc, so only
    ``false`` (or leaving it out) is valid."""

    @model_validator(mode="after")
    def _not_optional(self) -> SecretKeyRef:
        if self.optional:
            raise ValueError("optional: a connection cannot work without its API key secret")
        return self


class TLS(SpecModel):
    """TLS towards the Temporal frontend. Present (even empty) means TLS is on."""

    server_name: ServerName | None = None
    """Server name for SNI and certificate verification, when it differs from the host."""


class SecretSource(SpecModel):
    """Where twc copies a ClusterConnection's credential secret from."""

    namespace: DnsLabel
    """Namespace holding the original secret; twc copies it into every namespace whose
    workers use the connection."""


class _ConnectionSpec(SpecModel):
    """Fields shared by ``Connection`` and ``ClusterConnection``."""

    host_port: HostPort
    """Temporal frontend address as ``host:port`` (``[ipv6]:port`` for IPv6)."""
    tls: TLS | None = None
    """TLS settings; mTLS and API keys switch TLS on even without this block."""
    mutual_tls_secret_ref: SecretRef | None = Field(default=None, alias="mutualTLSSecretRef")
    """Client certificate secret for mTLS; mutually exclusive with ``apiKeySecretRef``."""
    api_key_secret_ref: SecretKeyRef | None = None
    """Secret key holding a Temporal API key; mutually exclusive with
    ``mutualTLSSecretRef``."""

    @model_validator(mode="after")
    def _one_auth_mode(self) -> _ConnectionSpec:
        if self.mutual_tls_secret_ref is not None and self.api_key_secret_ref is not None:
            raise ValueError("mutualTLSSecretRef and apiKeySecretRef are mutually exclusive")
        return self

    @property
    def auth_mode(self) -> AuthMode:
        """The authentication mode implied by the secret references."""
        if self.mutual_tls_secret_ref is not None:
            return AuthMode.MTLS
        if self.api_key_secret_ref is not None:
            return AuthMode.API_KEY
        return AuthMode.NONE

    @property
    def tls_enabled(self) -> bool:
        """Whether the client must use TLS (API keys are only ever sent over TLS)."""
        return self.tls is not None or self.auth_mode is not AuthMode.NONE


class ClusterConnection(_ConnectionSpec):
    """A cluster-scoped Temporal connection, usable by workers in any namespace."""

    name: DnsSubdomain
    """Name, unique among cluster connections."""
    secret_source: SecretSource | None = None
    """Copy the credential secret from this namespace into each using namespace.
    Without it the secret must already exist wherever workers use the connection."""
    allowed_namespaces: tuple[DnsLabel, ...] | None = None
    """Namespaces whose workers may use this connection; unset: every namespace. A
    worker elsewhere is refused (``NamespaceNotAllowed``) and nothing is made for it: no
    credential copy, no Deployment. Referencing a ClusterConnection is then not enough
    to have its credential copied into a namespace."""

    @model_validator(mode="after")
    def _source_needs_secret(self) -> ClusterConnection:
        if self.secret_source is not None and self.auth_mode is AuthMode.NONE:
            raise ValueError(
                "secretSource needs a secret to copy: set mutualTLSSecretRef or apiKeySecretRef"
            )
        if self.secret_source is not None and self.allowed_namespaces is None:
            raise ValueError(
                "secretSource needs allowedNamespaces: a credential is copied only into "
                "namespaces the connection names"
            )
        return self


class Connection(_ConnectionSpec):
    """A namespaced Temporal connection, usable only by workers in its namespace."""

    name: DnsSubdomain
    """Name, unique within its namespace."""
    namespace: DnsLabel
    """Namespace of the connection (and of the workers that may use it)."""


class CustomConnection(SpecModel):
    """Configuration for a connection kind added by a provider plugin.

    twc only checks the envelope; the provider registered for ``kind`` validates
    ``spec``.
    """

    api_group: str = API_GROUP
    """API group of the kind; must be ``temporal.io``."""
    kind: Kind
    """Kind served by a registered connection provider."""
    name: DnsSubdomain
    """Name of the object, as referenced by ``connectionRef.objectRef.name``."""
    namespace: DnsLabel | None = None
    """Namespace, for namespaced kinds; omit for cluster-scoped kinds."""
    spec: dict[str, JsonValue] = Field(default_factory=dict)
    """Provider-specific settings."""

    @model_validator(mode="after")
    def _not_builtin(self) -> CustomConnection:
        if self.api_group != API_GROUP:
            raise ValueError(f"apiGroup must be {API_GROUP}, got {self.api_group!r}")
        if self.kind in (CONNECTION_KIND, CLUSTER_CONNECTION_KIND):
            section = "connections" if self.kind == CONNECTION_KIND else "clusterConnections"
            raise ValueError(f"declare {self.kind} objects under {section}, not customConnections")
        return self


class Queue(SpecModel):
    """A kmsvc Queue (``kmsvc.io/v1``); ``workerEnabled`` derives a worker for it."""

    name: DnsLabel
    """Queue name; also the default Temporal task queue of its workers."""
    namespace: DnsLabel = "default"
    """Namespace of the Queue object (and of its derived worker)."""
    fifo: bool = False
    """Whether the queue preserves order."""
    partitions: int | None = Field(default=None, ge=1, le=10_000)
    """Number of partitions; workers default to one replica per partition."""
    worker_enabled: bool = False
    """Derive a worker ``worker-<name>`` unless an explicit worker already serves the
    queue."""
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Labels of the Queue object."""
    create_object: bool = False
    """Have twc create and own the kmsvc Queue object itself (otherwise it is managed
    elsewhere, e.g. by the kmsvc operator, and twc only derives its worker)."""


class QueueRef(SpecModel):
    """Reference to a queue in ``queues:``."""

    name: DnsLabel
    """Name of the queue."""
    namespace: DnsLabel | None = None
    """Namespace of the queue; defaults to the worker's namespace."""


class Autoscaling(SpecModel):
    """Backlog-driven replica bounds; the daemon picks replicas within them."""

    min_replicas: int = Field(default=1, ge=0, le=10_000)
    """Fewest replicas (0 allows scaling to zero while the backlog is empty)."""
    max_replicas: int = Field(ge=1, le=10_000)
    """Most replicas."""
    target_backlog_per_replica: int = Field(ge=1)
    """Approximate task-queue backlog one replica is expected to keep up with."""
    scale_down_stabilization_seconds: int = Field(default=300, ge=0, le=86_400)
    """How long a lower replica count must be recommended before scaling down."""
    activation_backlog: int = Field(default=0, ge=0)
    """With ``minReplicas: 0``, the backlog at or below which the worker sleeps at zero
    replicas, as KEDA's ``activationThreshold``: from zero it wakes (to at least one
    replica) only once the backlog exceeds this, and it goes back to zero once the
    backlog has stayed at or below it for the scale-down stabilization window. Above
    it the ordinary backlog-per-replica math decides. Ignored when ``minReplicas`` is
    at least 1."""

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas ({self.min_replicas}) must not exceed "
                f"maxReplicas ({self.max_replicas})"
            )
        return self


class Resources(SpecModel):
    """Container compute resources, as in Kubernetes."""

    requests: dict[ResourceName, Quantity] = Field(default_factory=dict)
    """Guaranteed amounts, e.g. ``{cpu: 500m, memory: 512Mi}``."""
    limits: dict[ResourceName, Quantity] = Field(default_factory=dict)
    """Upper bounds, e.g. ``{cpu: "2", memory: 2Gi}``."""

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        # The API server rejects request > limit; catching it here names the field.
        for name, request in self.requests.items():
            limit = self.limits.get(name)
            if limit is not None and parse_quantity(request) > parse_quantity(limit):
                raise ValueError(
                    f"requests.{name} ({request}) must not exceed limits.{name} ({limit})"
                )
        return self

    def to_kubernetes(self) -> dict[str, dict[str, str]]:
        """Return the Kubernetes ``resources`` block (empty sections omitted)."""
        out: dict[str, dict[str, str]] = {}
        if self.requests:
            out["requests"] = dict(self.requests)
        if self.limits:
            out["limits"] = dict(self.limits)
        return out


class Lifecycle(SpecModel):
    """Container lifecycle hooks, as exec commands."""

    post_start_command: tuple[str, ...] = ()
    """Command run right after the container starts; empty for none."""
    pre_stop_command: tuple[str, ...] = ()
    """Command run before the container is stopped; empty for none."""

    def to_kubernetes(self) -> dict[str, Any]:
        """The container's ``lifecycle`` hooks (empty when neither command is set)."""
        hooks: dict[str, Any] = {}
        if self.post_start_command:
            hooks["postStart"] = {"exec": {"command": list(self.post_start_command)}}
        if self.pre_stop_command:
            hooks["preStop"] = {"exec": {"command": list(self.pre_stop_command)}}
        return hooks


class Toleration(SpecModel):
    """A Kubernetes toleration."""

    key: LabelKey | None = None
    """Taint key; empty with ``operator: Exists`` tolerates everything."""
    operator: Literal["Exists", "Equal"] = "Equal"
    """``Equal`` matches ``value``; ``Exists`` matches any value."""
    value: LabelValue | None = None
    """Taint value for ``operator: Equal``."""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to match; empty matches all effects."""
    toleration_seconds: int | None = Field(default=None, ge=0)
    """For ``NoExecute``: how long the pod stays bound after the taint appears."""

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.key is None and self.operator != "Exists":
            raise ValueError("operator must be Exists when key is empty")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds only applies to effect NoExecute")
        return self

    def to_kubernetes(self) -> dict[str, Any]:
        """Return the Kubernetes toleration object."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Affinity(SpecModel):
    """Kubernetes affinity rules, passed through unchanged."""

    node_affinity: dict[str, JsonValue] | None = None
    """Kubernetes ``nodeAffinity``."""
    pod_affinity: dict[str, JsonValue] | None = None
    """Kubernetes ``podAffinity``."""
    pod_anti_affinity: dict[str, JsonValue] | None = None
    """Kubernetes ``podAntiAffinity``."""

    def to_kubernetes(self) -> dict[str, Any]:
        """Return the Kubernetes affinity object."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ServiceAccount(SpecModel):
    """The worker's ServiceAccount (twc creates one per worker)."""

    annotations: dict[LabelKey, str] = Field(default_factory=dict)
    """Annotations, e.g. a cloud IAM role binding."""
    automount_token: bool = False
    """Mount the API token into pods; workers rarely talk to Kubernetes, so off."""


class DLQ(SpecModel):
    """Optional dead-letter-queue processor, run as a StatefulSet next to the worker."""

    enabled: bool = False
    """Run the DLQ processor."""
    image: Image | None = None
    """Processor image; defaults to the worker's image."""
    replicas: int = Field(default=1, ge=0, le=100)
    """Processor replicas."""
    task_queue_name: TaskQueueName | None = None
    """Task queue the processor polls; defaults to ``<worker task queue>-dlq``."""
    resources: Resources | None = None
    """Processor resources; default to the worker's."""


MIN_PAUSE_SECONDS = 30
"""Shortest ``pauseDuration`` of a rollout step (the official controller's limit)."""
MAX_ROLLOUT_STEPS = 20
"""Most steps a rollout may have (the official controller's limit)."""


class RolloutStrategy(StrEnum):
    """How a new worker version takes over new workflow executions."""

    MANUAL = "Manual"
    """Deploy the new version and scale it, but never route to it: operators move
    traffic themselves (the Temporal CLI)."""
    ALL_AT_ONCE = "AllAtOnce"
    """The new version becomes Current as soon as it is healthy (after the gate)."""
    PROGRESSIVE = "Progressive"
    """The new version ramps through ``steps``, then becomes Current."""


class RolloutStep(SpecModel):
    """One step of a Progressive rollout."""

    ramp_percentage: int = Field(ge=1, le=99)
    """Drives versioned rollouts: the share of new workflow executions routed to the new
    version during this step, 1 to 99 (percent); strictly increasing from step to step."""
    pause_duration: Duration
    """Drives versioned rollouts: how long this step lasts before the next one, at least
    ``30s`` (a Go duration: ``30s``, ``5m``, ``1h``)."""
    gate: GateWorkflow | None = None
    """Drives versioned rollouts (beyond the official controller): a workflow run on the
    new version during this step; the step advances only once it completed (a failed
    one stops the rollout and sends new executions back to the Current version)."""

    @model_validator(mode="after")
    def _long_enough(self) -> RolloutStep:
        if parse_duration(self.pause_duration) < MIN_PAUSE_SECONDS:
            raise ValueError(
                f"pauseDuration {self.pause_duration!r} must be at least {MIN_PAUSE_SECONDS}s"
            )
        return self


class KeySelector(SpecModel):
    """One key of a ConfigMap or Secret in the worker's namespace (a Kubernetes
    ConfigMapKeySelector / SecretKeySelector)."""

    name: DnsSubdomain
    """Name of the ConfigMap or Secret."""
    key: SecretKey
    """Key inside its data."""
    optional: bool | None = None
    """Whether a missing object or key is tolerated (Kubernetes' own flag)."""


class GateInputSource(SpecModel):
    """Where a gate workflow's input comes from: exactly one of the two."""

    config_map_key_ref: KeySelector | None = None
    """A ConfigMap key holding a JSON document."""
    secret_key_ref: KeySelector | None = None
    """A Secret key holding a JSON document (kept out of logs and previews)."""

    @model_validator(mode="after")
    def _exactly_one(self) -> GateInputSource:
        if (self.config_map_key_ref is None) == (self.secret_key_ref is None):
            raise ValueError("exactly one of configMapKeyRef or secretKeyRef must be set")
        return self


class GateWorkflow(SpecModel):
    """A workflow that must complete on a new version before it gets any traffic."""

    workflow_type: str = Field(min_length=1, max_length=1000)
    """Drives versioned rollouts: the workflow type started on the new version's task
    queue."""
    input: JsonValue = None
    """Drives versioned rollouts: inline JSON passed as the gate workflow's first
    argument; exclusive with ``inputFrom``."""
    input_from: GateInputSource | None = None
    """Drives versioned rollouts: a ConfigMap or Secret key whose JSON document is the
    gate workflow's first argument; exclusive with ``input``."""

    @model_validator(mode="after")
    def _one_input(self) -> GateWorkflow:
        if self.input is not None and self.input_from is not None:
            raise ValueError("only one of input or inputFrom may be set")
        return self


RolloutStep.model_rebuild()


class Rollout(SpecModel):
    """Versioned rollouts: each build runs as its own Deployment and Temporal's Worker
    Versioning routes new workflows to it by ``strategy`` (the official worker
    controller's ``rollout``). Without it a worker rolls its pods in place."""

    strategy: RolloutStrategy
    """Drives versioned rollouts: ``AllAtOnce``, ``Progressive`` or ``Manual``."""
    steps: tuple[RolloutStep, ...] = Field(default=(), max_length=MAX_ROLLOUT_STEPS)
    """Drives versioned rollouts: the ramp steps of a Progressive rollout (required
    there, at most 20, ramp percentages strictly increasing); other strategies ignore
    them."""
    gate: GateWorkflow | None = None
    """Drives versioned rollouts: a workflow that must complete on the new version
    before it gets traffic."""
    build_id: str | None = Field(
        default=None,
        alias="buildID",
        min_length=1,
        max_length=63,
        pattern=r"^[a-zA-Z0-9]([a-zA-Z0-9._-]*[a-zA-Z0-9])?$",
    )
    """Drives versioned rollouts: the build ID of the version the spec describes, instead
    of the one derived from the image tag and a hash of the pods (the official
    controller's ``unsafeCustomBuildID``). While it stays the same, a changed pod
    template rolls that version's pods in place: keep it only while workflow code does
    not change."""

    @model_validator(mode="after")
    def _steps(self) -> Rollout:
        if self.strategy is RolloutStrategy.PROGRESSIVE:
            if not self.steps:
                raise ValueError("steps are required for Progressive rollout")
            last = 0
            for index, step in enumerate(self.steps):
                if step.ramp_percentage <= last:
                    raise ValueError(
                        f"steps[{index}].rampPercentage ({step.ramp_percentage}) must be "
                        f"greater than the step before ({last}): percentages increase"
                    )
                last = step.ramp_percentage
        return self


class Sunset(SpecModel):
    """What happens to a version once it is drained (no traffic, no pinned workflows
    running): scaled to zero, then deleted. Drives versioned rollouts."""

    scaledown_delay: Duration = "1h"
    """Drives versioned rollouts: how long after draining a version's Deployment is
    scaled to zero (default 1h)."""
    delete_delay: Duration = "24h"
    """Drives versioned rollouts: how long after draining a version's Deployment is
    deleted (default 24h)."""


def _checked_template(template: dict[str, JsonValue]) -> dict[str, JsonValue]:
    problems = check_pod_template(template, RESERVED_ENV_NAMES)
    if problems:
        raise ValueError("; ".join(problems))
    return template


PodTemplate = Annotated[dict[str, JsonValue], AfterValidator(_checked_template)]
"""A Kubernetes PodTemplateSpec, kept as written (twc checks only its own rules)."""


class WorkerSettings(SpecModel):
    """Settings shared by ``defaults:`` and each worker; unset means "inherit"."""

    image: Image | None = None
    """Worker container image."""
    image_pull_policy: ImagePullPolicy | None = None
    """Kubernetes image pull policy (default ``IfNotPresent``)."""
    temporal_namespace: TemporalNamespace | None = None
    """Temporal namespace the worker polls (default ``default``)."""
    replicas: int | None = Field(default=None, ge=0, le=10_000)
    """Fixed replica count; ignored while ``autoscaling`` is set. Defaults to the
    queue's ``partitions``, else 1."""
    connection_ref: ConnectionRef | None = None
    """The Temporal connection to use."""
    autoscaling: Autoscaling | None = None
    """Backlog-driven scaling bounds."""
    resources: Resources | None = None
    """Container resources."""
    node_selector: dict[LabelKey, LabelValue] | None = None
    """Node labels the pods must run on."""
    affinity: Affinity | None = None
    """Affinity rules."""
    tolerations: tuple[Toleration, ...] | None = None
    """Tolerations."""
    lifecycle: Lifecycle | None = None
    """Lifecycle hooks."""
    dlq: DLQ | None = None
    """Dead-letter-queue processor."""
    service_account: ServiceAccount | None = None
    """ServiceAccount settings."""
    env: dict[EnvName, str] | None = None
    """Extra environment variables for the worker container (twc's own are reserved)."""
    termination_grace_period_seconds: int | None = Field(default=None, ge=0, le=86_400)
    """Time a stopping worker gets to finish in-flight tasks (default 60)."""
    template: PodTemplate | None = None
    """The worker's pods as a Kubernetes PodTemplateSpec (the official worker
    controller's ``template``): command, args, ``valueFrom``/``envFrom``, volumes,
    probes, ports, security contexts, sidecars... twc merges its env, volumes and init
    container into the worker container (named ``worker``, or the only one). Shorthand
    fields fill what it leaves unset; the same thing set both ways differently at one
    level is an error."""
    rollout: Rollout | None = None
    """Drives versioned rollouts (Worker Versioning): one Deployment per build, traffic
    moved by strategy. Unset: pods roll in place."""
    sunset: Sunset | None = None
    """Drives versioned rollouts: when drained versions are scaled down and deleted."""

    @model_validator(mode="after")
    def _env_not_reserved(self) -> WorkerSettings:
        clashes = sorted(set(self.env or {}) & RESERVED_ENV_NAMES)
        if clashes:
            raise ValueError(f"env may not set {', '.join(clashes)}: twc sets these itself")
        return self

    @model_validator(mode="after")
    def _template_agrees(self) -> WorkerSettings:
        if self.template is not None:
            problems = same_level_conflicts(self.template, self.shorthand())
            if problems:
                raise ValueError("; ".join(problems))
        return self

    def shorthand(self) -> dict[str, Any]:
        """The shorthand pod fields in Kubernetes form, keyed by fleet-file name.

        An unset field, or one that renders to nothing (``resources: {}``, a lifecycle
        without commands, empty ``nodeSelector``), is None: it sets nothing.
        """
        return {
            "image": self.image,
            "imagePullPolicy": self.image_pull_policy,
            "resources": (self.resources.to_kubernetes() or None) if self.resources else None,
            "lifecycle": (self.lifecycle.to_kubernetes() or None) if self.lifecycle else None,
            "env": dict(self.env) if self.env else None,
            "nodeSelector": dict(self.node_selector) if self.node_selector else None,
            "affinity": (self.affinity.to_kubernetes() or None) if self.affinity else None,
            "tolerations": (
                [t.to_kubernetes() for t in self.tolerations] if self.tolerations else None
            ),
            "terminationGracePeriodSeconds": self.termination_grace_period_seconds,
        }


class Defaults(WorkerSettings):
    """Values used by derived workers and by workers that omit a field."""


class TemporalWorker(WorkerSettings):
    """A worker Deployment polling one Temporal task queue."""

    name: DnsLabel
    """Worker name (names the Deployment, ServiceAccount and pods)."""
    namespace: DnsLabel = "default"
    """Kubernetes namespace of the worker."""
    queue_ref: QueueRef | None = None
    """The kmsvc queue this worker serves."""
    task_queue_name: TaskQueueName | None = None
    """Temporal task queue; defaults to the queue's name."""

    @model_validator(mode="after")
    def _has_task_queue(self) -> TemporalWorker:
        if self.queue_ref is None and self.task_queue_name is None:
            raise ValueError("set queueRef or taskQueueName: the worker needs a task queue")
        return self


class Sharding(SpecModel):
    """How a stack is split into shards, each its own Pulumi stack (own state, lock and
    Lease), so a change costs what its shard costs rather than what the fleet costs."""

    by: Literal["namespace"] = "namespace"
    """What keeps workers together: every object of one Kubernetes namespace (its
    workers, queues and credential-secret copies) lives in one shard."""
    max_workers_per_shard: int = Field(default=250, ge=1, le=100_000)
    """A new namespace joins the least-filled shard with room for its workers; when
    none has room a new shard is opened. Namespaces already assigned never move, so a
    shard may grow past this as its namespaces grow."""
    assignment_namespace: DnsLabel = "default"
    """Namespace of the ConfigMap ``twc-shards-<stack>`` that records which shard each
    namespace belongs to (the daemon's own namespace is a good choice: its Role grants
    that ConfigMap and the shards' Leases)."""


class DeletionGuard(SpecModel):
    """How many of the stack's workers one apply may delete without a person's yes.

    More deletions than ``maxShare`` of the workers the stack runs (a deleted CRD, a
    list that answered wrongly, a fleet file cut in half) are held: no entry point
    deletes them until someone approves that exact set (``twc approve``, ``twc up
    --yes``, or the approval annotation on the stack's record).
    """

    max_share: float = Field(default=0.25, ge=0, le=1)
    """Share of the stack's workers one apply may delete (at least one is always
    allowed); ``1`` turns the guard off."""
    release_after: float | None = Field(default=None, ge=0)
    """Seconds after which the daemon deletes held workers still wanted on its own;
    unset (the default): never, only an approval releases them."""

    def allowed(self, total: int) -> int:
        """How many of ``total`` workers one apply may delete (at least one)."""
        return max(1, int(self.max_share * total))


class StackSelector(SpecModel):
    """Which cluster objects (Queue and TemporalWorker objects) a stack takes: those
    matching every field set. An object two stacks select is refused by both
    (``StackConflict``), so no worker is ever applied by two stacks."""

    namespaces: tuple[DnsLabel, ...] | None = None
    """Namespaces whose objects the stack takes; unset: every namespace."""
    match_labels: dict[LabelKey, LabelValue] | None = None
    """Labels an object must carry to be taken; unset: any labels."""

    def selects(self, namespace: str | None, labels: Mapping[str, str]) -> bool:
        """Whether an object of ``namespace`` with ``labels`` is selected."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return all(labels.get(k) == v for k, v in (self.match_labels or {}).items())


PodSecurityKey = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(/[a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
]


class Fleet(SpecModel):
    """A fleet file: every Temporal worker of one environment."""

    api_version: Literal["twc.temporal.io/v1"]
    """Schema version; ``twc.temporal.io/v1``."""
    kind: Literal["Fleet"]
    """Always ``Fleet``."""
    cluster_objects: bool = True
    """Whether the stack's desired state includes the cluster's objects: labelled kmsvc
    Queues, TemporalWorker, Connection and ClusterConnection objects. Every entry point
    honours it alike (the daemon, ``twc up``/``preview`` and plain ``pulumi up``), so
    none of them deletes the workers another one created from the cluster. ``false``:
    the fleet file alone."""
    sharding: Sharding | None = None
    """Split the stack into shards by namespace (``None``: one stack for the fleet)."""
    deletion_guard: DeletionGuard = Field(default_factory=DeletionGuard)
    """How many workers one apply may delete before a person must approve."""
    select: StackSelector | None = None
    """The cluster objects this stack takes (``None``: every one, as a stack alone on
    its cluster does). Stacks that set it publish it in their control namespace and each
    refuses an object another stack's ``select`` takes too."""
    pod_security: dict[PodSecurityKey, PodSecurityLevel] = Field(default_factory=dict)
    """The Pod Security Standards profile the pods of workers from tenants' objects
    (TemporalWorker and Queue objects) are held to, by ``<namespace>`` or
    ``<namespace>/<worker>`` (the more specific wins); ``restricted`` for the rest.
    A worker whose template sets more is refused (``InvalidSpec``)."""
    defaults: Defaults = Field(default_factory=Defaults)
    """Values for derived workers and workers that omit a field."""
    cluster_connections: tuple[ClusterConnection, ...] = ()
    """Cluster-scoped connections."""
    connections: tuple[Connection, ...] = ()
    """Namespaced connections."""
    custom_connections: tuple[CustomConnection, ...] = ()
    """Objects of connection kinds added by provider plugins."""
    queues: tuple[Queue, ...] = ()
    """kmsvc queues."""
    workers: tuple[TemporalWorker, ...] = ()
    """Explicit workers."""

    @model_validator(mode="after")
    def _select_unsharded(self) -> Fleet:
        if self.select is not None and self.sharding is not None:
            # Each shard publishes its own selection: siblings would refuse each other.
            raise ValueError("select and sharding cannot be combined")
        return self

    # Resolution cache, filled by load_fleet (which has just checked the fleet). It is
    # derived data: equality ignores it and copies drop it.
    _resolved: tuple[ResolvedWorker, ...] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fleet):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # holds dicts and lists: not hashable

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """Copy the fleet (see pydantic); the copy resolves its workers afresh."""
        copied = super().model_copy(update=update, deep=deep)
        copied._resolved = None
        return copied

    def resolved_workers(self) -> list[ResolvedWorker]:
        """Return every worker with defaults applied, derived workers included.

        Explicit workers come first, in file order, then derived ones in queue order.

        Raises:
            SpecError: If the fleet is inconsistent (only possible for a Fleet built
                without :func:`twc.spec.load_fleet`, which checks this up front).
        """
        if self._resolved is None:
            # Imported here: _resolve needs these models, so a module-level import
            # would be circular.
            from twc.spec._resolve import resolve_or_raise

            self._resolved = resolve_or_raise(self, "<fleet>")
        return list(self._resolved)

    def pod_security_level(self, namespace: str, name: str) -> PodSecurityLevel:
        """The profile a tenant's worker ``namespace/name`` is held to."""
        found = self.pod_security.get(f"{namespace}/{name}") or self.pod_security.get(namespace)
        return found or "restricted"

    def find_cluster_connection(self, name: str) -> ClusterConnection | None:
        """Return the ClusterConnection called ``name``, if any."""
        return next((c for c in self.cluster_connections if c.name == name), None)

    def find_connection(self, namespace: str, name: str) -> Connection | None:
        """Return the Connection ``namespace/name``, if any."""
        return next(
            (c for c in self.connections if c.namespace == namespace and c.name == name), None
        )

    def find_custom_connection(
        self, kind: str, name: str, namespace: str | None = None
    ) -> CustomConnection | None:
        """Return the custom connection object of ``kind`` called ``name``, if any.

        A cluster-scoped object (no namespace) matches any ``namespace``.
        """
        for c in self.custom_connections:
            if c.kind == kind and c.name == name and c.namespace in (None, namespace):
                return c
        return None

    def find_queue(self, namespace: str, name: str) -> Queue | None:
        """Return the queue ``namespace/name``, if any."""
        return next((q for q in self.queues if q.namespace == namespace and q.name == name), None)
