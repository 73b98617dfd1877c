"""Pydantic models of the fleet file's entries: what one object can check alone.

Rules needing the whole fleet live in :mod:`twc.spec._resolve`; a rule across one model's
fields is stated once, for both its CRD (CEL) and Python (:class:`Rule`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from pydantic.config import JsonDict

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
from twc.spec._template import check_pod_template, numbers_as_strings, same_level_conflicts
from twc.spec.resources import check_resource_template

API_GROUP = "temporal.io"
"""The only API group a connection reference may name."""
CONNECTION_KIND = "Connection"
CLUSTER_CONNECTION_KIND = "ClusterConnection"
CONNECTION_VERSION = "v1alpha1"
"""Version of ``Connection``/``ClusterConnection``: the official worker controller's."""
MIN_PAUSE_SECONDS = 30
"""Shortest ``pauseDuration`` of a rollout step (the official controller's limit)."""

RESERVED_ENV_NAMES = frozenset(
    {"TEMPORAL_ADDRESS", "TEMPORAL_FRONTEND_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_TASK_QUEUE"}
    | {"TEMPORAL_API_KEY", "TEMPORAL_TLS", "TEMPORAL_TLS_SERVER_NAME", "TEMPORAL_WORKER_BUILD_ID"}
    | {"TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH", "NODE_NAME", "POD_NAME"}
    | {"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_DEPLOYMENT_NAME", "POD_NAMESPACE"}
)
"""Environment variables twc sets on worker containers; user ``env`` may not set them."""


class Rule(NamedTuple):
    """A rule across a model's fields: ``cel`` in its CRD schema, ``holds`` checked in Python
    with the same message (``None``: a validator of the model checks it, saying more)."""

    cel: str
    message: str
    holds: Callable[[Any], bool] | None = None


def _exactly_one(a: str, b: str) -> Rule:
    """The rule that exactly one of the fields ``a`` and ``b`` (camelCase) is set."""
    fields = (to_snake(a), to_snake(b))
    return Rule(
        f"has(self.{a}) != has(self.{b})",
        f"exactly one of {a} or {b} must be set",
        lambda m: sum(getattr(m, field) is not None for field in fields) == 1,
    )


def _cel_rules(schema: JsonDict, model: type[Any]) -> None:
    """A model's :class:`Rule` list in its JSON schema, as ``x-kubernetes-validations``."""
    if rules := getattr(model, "rules", ()):
        schema["x-kubernetes-validations"] = [{"rule": r.cel, "message": r.message} for r in rules]


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
    BeforeValidator(numbers_as_strings),  # Kubernetes accepts numbers for quantities
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
Kind = Annotated[str, Field(pattern=r"^[A-Z][A-Za-z0-9]{0,62}$")]
ServerName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s/]+$")]
ImagePullPolicy = Literal["Always", "IfNotPresent", "Never"]


class SpecModel(BaseModel):
    """Base of every fleet-file model: camelCase keys, unknown keys rejected, frozen, and
    its ``rules`` kept."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        frozen=True,
        use_attribute_docstrings=True,
        hide_input_in_errors=True,
        json_schema_extra=_cel_rules,
    )
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _rules_hold(self) -> Self:
        for rule in self.rules:
            if rule.holds is not None and not rule.holds(self):
                raise ValueError(rule.message)
        return self


class AuthMode(StrEnum):
    """How a connection authenticates to the Temporal frontend."""

    NONE = "none"
    MTLS = "mTLS"
    API_KEY = "apiKey"


class ConnectionTarget(BaseModel):
    """A connection reference made absolute; ``namespace`` is the referencing worker's."""

    model_config = ConfigDict(frozen=True)

    api_group: str
    kind: str
    name: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.kind} {self.api_group}/{self.name}"


class ObjectRef(SpecModel):
    """A typed reference to a connection object of any registered kind."""

    rules = (Rule(f"self.apiGroup == '{API_GROUP}'", f"apiGroup must be {API_GROUP}"),)

    api_group: str
    """API group of the referenced kind; must be ``temporal.io``."""
    kind: Kind
    """Kind of the referenced object, e.g. ``ClusterConnection``."""
    name: DnsSubdomain
    """Name of the referenced object."""

    @model_validator(mode="after")
    def _known_group(self) -> ObjectRef:
        if self.api_group != API_GROUP:
            raise ValueError(f"apiGroup must be {API_GROUP}, got {self.api_group!r}")
        return self


class ConnectionRef(SpecModel):
    """Which Temporal connection a worker uses: exactly one of ``name`` or ``objectRef``."""

    rules = (_exactly_one("name", "objectRef"),)

    name: DnsSubdomain | None = None
    """Name of a ``Connection`` in the worker's own namespace."""
    object_ref: ObjectRef | None = None
    """A typed reference, e.g. to a ``ClusterConnection``."""

    def target(self, namespace: str) -> ConnectionTarget:
        """The reference made absolute for a worker in ``namespace``."""
        ref = self.object_ref or ObjectRef.model_construct(
            api_group=API_GROUP, kind=CONNECTION_KIND, name=self.name or ""
        )
        return ConnectionTarget(**ref.model_dump(by_alias=False), namespace=namespace)


class SecretRef(SpecModel):
    """A whole Secret: for mTLS, a kubernetes.io/tls secret (``tls.crt``, ``tls.key``)."""

    name: DnsSubdomain
    """Name of the Secret, looked up in the namespace of each worker using it."""


class SecretKeyRef(SpecModel):
    """One key of a Secret."""

    name: DnsSubdomain
    """Name of the Secret, looked up in the namespace of each worker using it."""
    key: SecretKey = "api-key"
    """Key inside the Secret's data that holds the value."""
    optional: bool | None = None
    """Only ``false`` or unset: a connection's secret is never optional to twc."""

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
    """Namespace holding the original secret, copied into each namespace that uses it."""


_ONE_AUTH = Rule(
    "!(has(self.mutualTLSSecretRef) && has(self.apiKeySecretRef))",
    "mutualTLSSecretRef and apiKeySecretRef are mutually exclusive",
    lambda c: c.mutual_tls_secret_ref is None or c.api_key_secret_ref is None,
)
_ONE_GIVEN = Rule(
    "has(self.mutualTLSSecretRef) || has(self.apiKeySecretRef)",
    "set mutualTLSSecretRef or apiKeySecretRef",
    lambda c: c.auth_mode is not AuthMode.NONE,
)


class _Credentials(SpecModel):
    """A credential for Temporal: an mTLS client certificate or an API key."""

    rules: ClassVar[tuple[Rule, ...]] = (_ONE_AUTH,)

    mutual_tls_secret_ref: SecretRef | None = Field(default=None, alias="mutualTLSSecretRef")
    """Client certificate secret for mTLS; exclusive with ``apiKeySecretRef``."""
    api_key_secret_ref: SecretKeyRef | None = None
    """Secret key holding a Temporal API key; exclusive with ``mutualTLSSecretRef``."""

    @property
    def auth_mode(self) -> AuthMode:
        """The authentication mode implied by the secret references."""
        if self.mutual_tls_secret_ref is not None:
            return AuthMode.MTLS
        return AuthMode.NONE if self.api_key_secret_ref is None else AuthMode.API_KEY


class TwcCredentials(_Credentials):
    """The credential twc's own calls use (task-queue checks, routing, gates, backlogs), so
    workers, which get the connection's own, never hold routing rights."""

    rules = (_ONE_AUTH, _ONE_GIVEN)


class _ConnectionSpec(_Credentials):
    """Fields shared by ``Connection`` and ``ClusterConnection``."""

    host_port: HostPort
    """Temporal frontend address as ``host:port`` (``[ipv6]:port`` for IPv6)."""
    tls: TLS | None = None
    """TLS settings; mTLS and API keys switch TLS on even without this block."""
    twc_credentials: TwcCredentials | None = None
    """twc's own credential, read where the workers' is; unset: twc uses the workers'."""

    @property
    def tls_enabled(self) -> bool:
        """Whether the client must use TLS (API keys are only ever sent over TLS)."""
        return (
            self.tls is not None
            or self.auth_mode is not AuthMode.NONE
            or (self.twc_credentials is not None)
        )


class ClusterConnection(_ConnectionSpec):
    """A cluster-scoped Temporal connection, usable by workers in any namespace."""

    rules = (
        _ONE_AUTH,
        Rule(
            "!has(self.secretSource) || has(self.mutualTLSSecretRef) || has(self.apiKeySecretRef)",
            "secretSource needs a secret to copy: set mutualTLSSecretRef or apiKeySecretRef",
            lambda c: c.secret_source is None or c.auth_mode is not AuthMode.NONE,
        ),
    )

    name: DnsSubdomain
    """Name, unique among cluster connections."""
    secret_source: SecretSource | None = None
    """Copy the credential secret from there into each using namespace (else it must exist)."""
    allowed_namespaces: tuple[DnsLabel, ...] | None = None
    """Namespaces whose workers may use it (unset: all); others are refused, nothing made."""

    @model_validator(mode="after")
    def _source_names_namespaces(self) -> ClusterConnection:
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
    """An object of a connection kind a provider plugin adds; the provider checks ``spec``."""

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
    """Derive a worker ``worker-<name>`` unless an explicit worker serves the queue."""
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Labels of the Queue object."""
    create_object: bool = False
    """twc creates and owns the Queue object (else it only derives its worker)."""


class QueueRef(SpecModel):
    """Reference to a queue in ``queues:``."""

    name: DnsLabel
    """Name of the queue."""
    namespace: DnsLabel | None = None
    """Namespace of the queue; defaults to the worker's namespace."""


class ReplicaBounds(SpecModel):
    """Replica bounds in place of the worker's own; unset means the worker's."""

    min_replicas: int | None = Field(default=None, ge=0, le=10_000)
    """Fewest replicas."""
    max_replicas: int | None = Field(default=None, ge=1, le=10_000)
    """Most replicas."""


class StatusBounds(SpecModel):
    """Replica bounds per version status (Temporal's ``Current``, ``Ramping``, ``Draining``)."""

    current: ReplicaBounds | None = None
    """The version new executions go to."""
    ramping: ReplicaBounds | None = None
    """A version taking a share of new executions."""
    draining: ReplicaBounds | None = None
    """A version only its pinned workflows still run on, until Temporal reports it Drained."""


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
    """With ``minReplicas: 0``: the backlog above which it wakes from zero (KEDA's activation)."""
    by_status: StatusBounds | None = None
    """Versioned rollouts: a version's bounds while Temporal reports it in that status. A
    Draining version keeps its floor until it is Drained (its pinned workflows need
    pollers), then scales within the worker's own bounds until its sunset."""

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        for status in (None, "Current", "Ramping", "Draining"):
            bounds = self.for_status(status)
            if bounds.min_replicas > bounds.max_replicas:
                raise ValueError(
                    f"{f'byStatus.{status.lower()}: ' if status else ''}minReplicas "
                    f"({bounds.min_replicas}) must not exceed maxReplicas ({bounds.max_replicas})"
                )
        return self

    def for_status(self, status: str | None) -> Autoscaling:
        """The bounds of a version Temporal reports in ``status`` (the worker's, unless set)."""
        found = getattr(self.by_status, (status or "").lower(), None)
        if not isinstance(found, ReplicaBounds):
            return self
        given = found.model_dump(by_alias=False, exclude_none=True)
        return self.model_copy(update={**given, "by_status": None})

    def widest(self) -> tuple[int, int]:
        """The lowest floor and highest ceiling of every status's bounds."""
        every = [self.for_status(s) for s in (None, "Current", "Ramping", "Draining")]
        return min(b.min_replicas for b in every), max(b.max_replicas for b in every)


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
        """The Kubernetes ``resources`` block (empty sections omitted)."""
        return {key: dict(value) for key, value in self if value}


class Lifecycle(SpecModel):
    """Container lifecycle hooks, as exec commands."""

    post_start_command: tuple[str, ...] = ()
    """Command run right after the container starts; empty for none."""
    pre_stop_command: tuple[str, ...] = ()
    """Command run before the container is stopped; empty for none."""


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


class Affinity(SpecModel):
    """Kubernetes affinity rules, passed through unchanged."""

    node_affinity: dict[str, JsonValue] | None = None
    """Kubernetes ``nodeAffinity``."""
    pod_affinity: dict[str, JsonValue] | None = None
    """Kubernetes ``podAffinity``."""
    pod_anti_affinity: dict[str, JsonValue] | None = None
    """Kubernetes ``podAntiAffinity``."""


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


class RolloutStrategy(StrEnum):
    """How a new worker version takes over new workflow executions."""

    MANUAL = "Manual"
    """Deploy and scale the new version, never route to it: operators move traffic."""
    ALL_AT_ONCE = "AllAtOnce"
    """The new version becomes Current as soon as it is healthy (after the gate)."""
    PROGRESSIVE = "Progressive"
    """The new version ramps through ``steps``, then becomes Current."""


class KeySelector(SpecModel):
    """One key of a ConfigMap or Secret in the worker's namespace."""

    name: DnsSubdomain
    """Name of the ConfigMap or Secret."""
    key: SecretKey
    """Key inside its data."""
    optional: bool | None = None
    """Whether a missing object or key is tolerated (Kubernetes' own flag)."""


class GateInputSource(SpecModel):
    """Where a gate workflow's input comes from: exactly one of the two."""

    rules = (_exactly_one("configMapKeyRef", "secretKeyRef"),)

    config_map_key_ref: KeySelector | None = None
    """A ConfigMap key holding a JSON document."""
    secret_key_ref: KeySelector | None = None
    """A Secret key holding a JSON document (kept out of logs and previews)."""


class GateWorkflow(SpecModel):
    """A workflow that must complete on a new version before it gets any traffic."""

    # No CEL rule for "input or inputFrom": CEL cannot see free-form JSON.
    workflow_type: str = Field(min_length=1, max_length=1000)
    """Drives versioned rollouts: the workflow type started on the new version's task queue."""
    input: JsonValue = None
    """Drives versioned rollouts: inline JSON, the first argument; not with ``inputFrom``."""
    input_from: GateInputSource | None = None
    """Drives versioned rollouts: a ConfigMap or Secret key whose JSON is the first argument."""

    @model_validator(mode="after")
    def _one_input(self) -> GateWorkflow:
        if self.input is not None and self.input_from is not None:
            raise ValueError("only one of input or inputFrom may be set")
        return self


class RolloutStep(SpecModel):
    """One step of a Progressive rollout."""

    rules = (
        Rule(
            f"duration(self.pauseDuration) >= duration('{MIN_PAUSE_SECONDS}s')",
            f"pause duration must be at least {MIN_PAUSE_SECONDS}s",
        ),
    )

    ramp_percentage: int = Field(ge=1, le=99)
    """Drives versioned rollouts: percent of new executions sent to the new version; increasing."""
    pause_duration: Duration
    """Drives versioned rollouts: how long this step lasts, at least ``30s`` (a Go duration)."""
    gate: GateWorkflow | None = None
    """Drives versioned rollouts: a workflow that must complete in this step (failed: roll back)."""

    @model_validator(mode="after")
    def _long_enough(self) -> RolloutStep:
        if parse_duration(self.pause_duration) < MIN_PAUSE_SECONDS:
            raise ValueError(
                f"pauseDuration {self.pause_duration!r} must be at least {MIN_PAUSE_SECONDS}s"
            )
        return self


class FailureRate(SpecModel):
    """Rolls a ramping version back when a workflow type fails more often on it than on the
    Current version (failed, timed out or terminated, of the closed ones)."""

    margin_percent: float = Field(default=10, ge=0, le=100)
    """Percentage points its failure rate may exceed the Current version's by."""
    min_sample: int = Field(default=20, ge=1)
    """Closed workflows of the type on the ramping version before its rate counts."""
    window: Duration = "10m"
    """How far back closed workflows count."""


class Rollout(SpecModel):
    """Drives versioned rollouts: one Deployment per build, new workflows routed by strategy."""

    rules = (
        Rule(
            "self.strategy != 'Progressive' || (has(self.steps) && size(self.steps) > 0)",
            "steps are required for Progressive rollout",
            lambda r: r.strategy is not RolloutStrategy.PROGRESSIVE or bool(r.steps),
        ),
        Rule(
            # Strictly increasing: sorted, and no percentage twice (CEL has no index loop).
            "self.strategy != 'Progressive' || !has(self.steps) || "
            "(self.steps.map(s, s.rampPercentage).isSorted() && "
            "self.steps.all(s, self.steps.exists_one(t, t.rampPercentage == s.rampPercentage)))",
            "rampPercentage must increase between each step",
        ),
    )

    strategy: RolloutStrategy
    """Drives versioned rollouts: ``AllAtOnce``, ``Progressive`` or ``Manual``."""
    steps: tuple[RolloutStep, ...] = Field(default=(), max_length=20)
    """Drives versioned rollouts: a Progressive rollout's steps (required there, at most 20)."""
    gate: GateWorkflow | None = None
    """Drives versioned rollouts: a workflow that must complete on the new version first."""
    build_id: str | None = Field(
        default=None,
        alias="buildID",
        min_length=1,
        max_length=63,
        pattern=r"^[a-zA-Z0-9]([a-zA-Z0-9._-]*[a-zA-Z0-9])?$",
    )
    """Drives versioned rollouts: a build ID instead of the derived one; while it stays, pods roll
    in place (the official ``unsafeCustomBuildID``)."""
    failure_rate: FailureRate | None = None
    """Drives versioned rollouts: a ramp is rolled back when a workflow type fails more often
    on it than on the Current version (Progressive)."""

    @model_validator(mode="after")
    def _steps_increase(self) -> Rollout:
        if self.strategy is not RolloutStrategy.PROGRESSIVE:
            return self
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
    """Drives versioned rollouts: when a drained version is scaled down, then deleted."""

    scaledown_delay: Duration = "1h"
    """Drives versioned rollouts: how long after draining a version is scaled to zero."""
    delete_delay: Duration = "24h"
    """Drives versioned rollouts: how long after draining a version is deleted."""


def _no_problems(check: Callable[[dict[str, JsonValue]], list[str]]) -> AfterValidator:
    """A validator failing with every problem ``check`` finds in a template, in one message."""

    def checked(template: dict[str, JsonValue]) -> dict[str, JsonValue]:
        if problems := check(template):
            raise ValueError("; ".join(problems))
        return template

    return AfterValidator(checked)


PodTemplate = Annotated[
    dict[str, JsonValue], _no_problems(lambda t: check_pod_template(t, RESERVED_ENV_NAMES))
]


class ResourceTemplate(SpecModel):
    """An object made with each running version (the official ``WorkerResourceTemplate``)."""

    name: DnsLabel
    """Names the copies, with the worker's name and the build ID."""
    template: Annotated[dict[str, JsonValue], _no_problems(check_resource_template)]
    """The object's ``apiVersion``, ``kind`` and ``spec``; twc fills ``scaleTargetRef: {}``,
    ``spec.selector.matchLabels: {}``, External metric selectors and ``{{ .BuildID }}``-style
    placeholders per version."""


def _k8s(model: BaseModel | None) -> Any:
    return (model.model_dump(mode="json", exclude_none=True) or None) if model else None


class WorkerSettings(SpecModel):
    """Settings shared by ``defaults:`` and each worker; unset means "inherit"."""

    image: Image | None = None
    """Worker container image."""
    image_pull_policy: ImagePullPolicy | None = None
    """Kubernetes image pull policy (default ``IfNotPresent``)."""
    temporal_namespace: TemporalNamespace | None = None
    """Temporal namespace the worker polls (default ``default``)."""
    replicas: int | None = Field(default=None, ge=0, le=10_000)
    """Fixed replicas, ignored while autoscaled; default: the queue's partitions, else 1."""
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
    """The pods as a PodTemplateSpec; shorthand fields fill what it leaves unset."""
    rollout: Rollout | None = None
    """Drives versioned rollouts: one Deployment per build, traffic moved by strategy."""
    sunset: Sunset | None = None
    """Drives versioned rollouts: when drained versions are scaled down and deleted."""
    min_ready_seconds: int | None = Field(default=None, ge=0)
    """Seconds a new pod must be ready before it counts as available (default 0)."""
    progress_deadline_seconds: int | None = Field(default=None, ge=1)
    """Seconds a Deployment may make no progress before it is reported failed (default 600)."""
    resource_templates: tuple[ResourceTemplate, ...] | None = None
    """Versioned rollouts: objects made with each version; an autoscaler's (``scaleTargetRef``)
    owns its replicas and goes at sunset's scale-down, the others with the Deployment."""

    @model_validator(mode="after")
    def _env_and_template(self) -> WorkerSettings:
        clashes = sorted(set(self.env or {}) & RESERVED_ENV_NAMES)
        if clashes:
            raise ValueError(f"env may not set {', '.join(clashes)}: twc sets these itself")
        problems = same_level_conflicts(self.template, self.shorthand())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def shorthand(self) -> dict[str, Any]:
        """The shorthand pod fields in Kubernetes form by fleet-file name; None: sets nothing."""
        lifecycle: dict[str, Any] = {}
        if self.lifecycle and self.lifecycle.post_start_command:
            lifecycle["postStart"] = {"exec": {"command": list(self.lifecycle.post_start_command)}}
        if self.lifecycle and self.lifecycle.pre_stop_command:
            lifecycle["preStop"] = {"exec": {"command": list(self.lifecycle.pre_stop_command)}}
        return {
            "image": self.image,
            "imagePullPolicy": self.image_pull_policy,
            "resources": (self.resources.to_kubernetes() or None) if self.resources else None,
            "lifecycle": lifecycle or None,
            "env": dict(self.env) if self.env else None,
            "nodeSelector": dict(self.node_selector) if self.node_selector else None,
            "affinity": _k8s(self.affinity),
            "tolerations": [_k8s(t) for t in self.tolerations] if self.tolerations else None,
            "terminationGracePeriodSeconds": self.termination_grace_period_seconds,
        }


class Defaults(WorkerSettings):
    """Values used by derived workers and by workers that omit a field."""


class TemporalWorker(WorkerSettings):
    """A worker Deployment polling one Temporal task queue."""

    rules = (
        Rule(
            "has(self.queueRef) || has(self.taskQueueName)",
            "set queueRef or taskQueueName: the worker needs a task queue",
            lambda w: w.queue_ref is not None or w.task_queue_name is not None,
        ),
    )

    name: DnsLabel
    """Worker name (names the Deployment, ServiceAccount and pods)."""
    namespace: DnsLabel = "default"
    """Kubernetes namespace of the worker."""
    queue_ref: QueueRef | None = None
    """The kmsvc queue this worker serves."""
    task_queue_name: TaskQueueName | None = None
    """Temporal task queue; defaults to the queue's name."""


class Sharding(SpecModel):
    """How a stack is split into shards by namespace, each its own Pulumi stack."""

    by: Literal["namespace"] = "namespace"
    """What keeps workers together: each Kubernetes namespace lives in one shard."""
    max_workers_per_shard: int = Field(default=250, ge=1, le=100_000)
    """A new namespace joins the least-filled shard with room, else opens one; none moves."""
    assignment_namespace: DnsLabel = "default"
    """Namespace of the ConfigMap ``twc-shards-<stack>`` that records the assignment."""


class DeletionGuard(SpecModel):
    """How many of the stack's workers one apply may delete before a person must approve."""

    max_share: float = Field(default=0.25, ge=0, le=1)
    """Share of the stack's workers one apply may delete (at least one); ``0``: none
    without approval; ``1``: off."""
    release_after: float | None = Field(default=None, ge=0)
    """Seconds after which the daemon deletes held workers itself; unset: never."""

    def allowed(self, total: int) -> int:
        """How many of ``total`` workers one apply may delete (at least one unless ``0``)."""
        return max(1, int(self.max_share * total)) if self.max_share else 0


class StackSelector(SpecModel):
    """Which cluster objects a stack takes: those matching every field set."""

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
