"""The fleet as a whole: its model, its cross-object checks and worker resolution;
one pass collects every issue before failing."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from twc.errors import SpecError, SpecIssue
from twc.spec._models import (
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    Affinity,
    Autoscaling,
    ClusterConnection,
    Connection,
    ConnectionTarget,
    CustomConnection,
    Defaults,
    DeletionGuard,
    ImagePullPolicy,
    Lifecycle,
    PodSecurityKey,
    Queue,
    Resources,
    ResourceTemplate,
    Rollout,
    ServiceAccount,
    Sharding,
    SpecModel,
    StackSelector,
    Sunset,
    TemporalWorker,
    Toleration,
    WorkerSettings,
)
from twc.spec._template import PodSecurityLevel, merge_pod_template, worker_container_index

# The DLQ StatefulSet is "<worker>-dlq"; StatefulSet names feed the 63-character
# controller-revision-hash label together with an 11-character suffix.
MAX_DLQ_WORKER_NAME = 48


class Fleet(SpecModel):
    """A fleet file: every Temporal worker of one environment."""

    api_version: Literal["twc.temporal.io/v1"]
    """Schema version; ``twc.temporal.io/v1``."""
    kind: Literal["Fleet"]
    """Always ``Fleet``."""
    cluster_objects: bool = True
    """Take the cluster's labelled Queues, TemporalWorkers and connections too (``false``: no)."""
    sharding: Sharding | None = None
    """Split the stack into shards by namespace (``None``: one stack for the fleet)."""
    deletion_guard: DeletionGuard = Field(default_factory=DeletionGuard)
    """How many workers one apply may delete before a person must approve."""
    select: StackSelector | None = None
    """The cluster objects this stack takes (``None``: all); one two stacks take is refused."""
    pod_security: dict[PodSecurityKey, PodSecurityLevel] = Field(default_factory=dict)
    """Pod Security Standard of tenants' workers by ``<ns>[/<worker>]``; else restricted."""
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

    # Filled by load_fleet and resolved_workers; equality ignores it and copies drop it.
    _resolved: tuple[ResolvedWorker, ...] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _select_unsharded(self) -> Fleet:
        if self.select is not None and self.sharding is not None:
            # Each shard publishes its own selection: siblings would refuse each other.
            raise ValueError("select and sharding cannot be combined")
        return self

    def __eq__(self, other: object) -> bool:
        return self.__dict__ == other.__dict__ if isinstance(other, Fleet) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # holds dicts and lists: not hashable

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """Copy the fleet (see pydantic); the copy resolves its workers afresh."""
        copied = super().model_copy(update=update, deep=deep)
        copied._resolved = None
        return copied

    def resolved_workers(self) -> list[ResolvedWorker]:
        """Every worker with defaults applied: explicit ones in file order, then derived."""
        if self._resolved is None:
            self._resolved = resolve(self, "<fleet>")
        return list(self._resolved)

    def pod_security_level(self, namespace: str, name: str) -> PodSecurityLevel:
        """The profile a tenant's worker ``namespace/name`` is held to."""
        found = self.pod_security.get(f"{namespace}/{name}") or self.pod_security.get(namespace)
        return found or "restricted"

    def find_cluster_connection(self, name: str) -> ClusterConnection | None:
        """The ClusterConnection called ``name``, if any."""
        return next((c for c in self.cluster_connections if c.name == name), None)

    def find_connection(self, namespace: str, name: str) -> Connection | None:
        """The Connection ``namespace/name``, if any."""
        found = (c for c in self.connections if (c.namespace, c.name) == (namespace, name))
        return next(found, None)

    def find_custom_connection(
        self, kind: str, name: str, namespace: str | None = None
    ) -> CustomConnection | None:
        """The plugin kind's object ``name``; a cluster-scoped one matches any namespace."""
        found = (c for c in self.custom_connections if (c.kind, c.name) == (kind, name))
        return next((c for c in found if c.namespace in (None, namespace)), None)

    def find_queue(self, namespace: str, name: str) -> Queue | None:
        """The queue ``namespace/name``, if any."""
        return next((q for q in self.queues if (q.namespace, q.name) == (namespace, name)), None)


class ResolvedDLQ(BaseModel):
    """A worker's DLQ processor with every default applied."""

    model_config = ConfigDict(frozen=True)

    image: str
    replicas: int
    task_queue_name: str
    resources: Resources


class ResolvedWorker(BaseModel):
    """A worker with defaults applied and references followed: what gets deployed."""

    model_config = ConfigDict(frozen=True)

    name: str
    namespace: str
    derived: bool
    """True when derived from a queue's ``workerEnabled``."""
    source: str
    """Where the worker is declared, e.g. ``workers[2]`` or ``queues[0]``."""
    queue: Queue | None
    task_queue_name: str
    temporal_namespace: str
    connection: ConnectionTarget
    connection_source: str
    """Field path of the reference in use, e.g. ``defaults.connectionRef.objectRef``."""
    image: str
    image_pull_policy: ImagePullPolicy
    replicas: int
    """Replica count to start from (``minReplicas`` when autoscaling)."""
    autoscaling: Autoscaling | None
    resources: Resources
    node_selector: dict[str, str]
    affinity: Affinity | None
    tolerations: tuple[Toleration, ...]
    lifecycle: Lifecycle
    dlq: ResolvedDLQ | None
    service_account: ServiceAccount
    env: dict[str, str]
    termination_grace_period_seconds: int
    pod_template: dict[str, Any]
    """The user's side of the pods, shorthand merged in; the builders add twc's parts."""
    template_source: str | None
    """Field path of the ``template`` in effect, None without one."""
    rollout: Rollout | None
    sunset: Sunset | None
    """With the defaults applied; set exactly when ``rollout`` is."""
    resource_templates: tuple[ResourceTemplate, ...] = ()
    """Objects made with each version (versioned workers only)."""
    min_ready_seconds: int | None = None
    progress_deadline_seconds: int | None = None
    """``None``: Kubernetes' default and twc's (0; 600)."""

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``, unique within a fleet."""
        return (self.namespace, self.name)

    @property
    def stack_key(self) -> str:
        """``<namespace>/<name>``: the worker's name in the stack, metrics and decisions."""
        return f"{self.namespace}/{self.name}"


class _Checker:
    """Accumulates issues for one fleet file."""

    def __init__(self, fleet: Fleet, file: str) -> None:
        self.fleet, self.file = fleet, file
        self.issues: list[SpecIssue] = []

    def add(self, path: str, reason: str) -> None:
        self.issues.append(SpecIssue(self.file, path, reason))

    def unique(self, section: str, keys: Iterable[Hashable], describe: str) -> None:
        first: dict[Hashable, int] = {}
        for index, key in enumerate(keys):
            if first.setdefault(key, index) == index:
                continue
            shown = "/".join(p for p in key if p is not None) if isinstance(key, tuple) else key
            self.add(
                f"{section}[{index}].name",
                f"duplicate {describe} {shown} (first defined at {section}[{first[key]}])",
            )


def resolve(fleet: Fleet, file: str) -> tuple[ResolvedWorker, ...]:
    """Every worker resolved, explicit first, then derived; else a SpecError with every issue."""
    c = _Checker(fleet, file)
    c.unique("clusterConnections", (x.name for x in fleet.cluster_connections), "ClusterConnection")
    c.unique("connections", ((x.namespace, x.name) for x in fleet.connections), "Connection")
    c.unique(
        "customConnections",
        ((x.kind, x.namespace, x.name) for x in fleet.custom_connections),
        "connection object",
    )
    c.unique("queues", ((x.namespace, x.name) for x in fleet.queues), "queue")
    c.unique("workers", ((x.namespace, x.name) for x in fleet.workers), "worker")

    resolved: list[ResolvedWorker | None] = []
    served: set[tuple[str, str]] = set()
    for index, worker in enumerate(fleet.workers):
        queue = _worker_queue(c, index, worker)
        if queue is not None:
            served.add((queue.namespace, queue.name))
        resolved.append(_resolve(c, f"workers[{index}]", worker, queue, worker.name))

    explicit = {(w.namespace, w.name): i for i, w in enumerate(fleet.workers)}
    for index, queue in enumerate(fleet.queues):
        if not queue.worker_enabled or (queue.namespace, queue.name) in served:
            continue
        path, name = f"queues[{index}]", f"worker-{queue.name}"
        clash = explicit.get((queue.namespace, name))
        if len(name) > 63:
            c.add(
                f"{path}.name",
                f"the derived worker name {name!r} exceeds 63 characters: shorten the "
                "queue name or declare the worker explicitly",
            )
        elif clash is not None:
            c.add(
                f"{path}.workerEnabled",
                f"the derived worker {queue.namespace}/{name} clashes with workers[{clash}], "
                "which serves another queue: rename that worker or set its queueRef to "
                "this queue",
            )
        else:
            resolved.append(_resolve(c, path, None, queue, name))
    if c.issues:
        raise SpecError(c.issues)
    return tuple(w for w in resolved if w is not None)


def _worker_queue(c: _Checker, index: int, worker: TemporalWorker) -> Queue | None:
    ref = worker.queue_ref
    if ref is None:
        return None
    namespace = ref.namespace or worker.namespace
    queue = c.fleet.find_queue(namespace, ref.name)
    if queue is None:
        elsewhere = sorted(q.namespace for q in c.fleet.queues if q.name == ref.name)
        hint = ""
        if elsewhere and ref.namespace is None:
            hint = (
                f" (a queue of that name exists in namespace {elsewhere[0]!r}: "
                "set queueRef.namespace)"
            )
        c.add(
            f"workers[{index}].queueRef", f"no queue {ref.name!r} in namespace {namespace!r}{hint}"
        )
    return queue


def _resolve(
    c: _Checker, path: str, worker: TemporalWorker | None, queue: Queue | None, name: str
) -> ResolvedWorker | None:
    """Resolve one worker; ``worker`` is None for a worker derived from ``queue``."""
    defaults = c.fleet.defaults
    s = _merged(worker, defaults)
    namespace = worker.namespace if worker is not None else (queue.namespace if queue else "")
    explicit, before = worker is not None, len(c.issues)
    # A derived worker's issues point at its queue and name the setting for defaults.
    subject = "" if explicit else f"derived worker {name!r}: "
    fix = "set it here or in defaults" if explicit else "set it in defaults"
    pod_template, template_source = _pod_template(worker, defaults, path)
    containers = pod_template["spec"]["containers"]
    image = containers[worker_container_index(containers) or 0].get("image") or None
    if not isinstance(image, str):
        image = None
        c.add(
            f"{path}.image" if explicit else path,
            f"{subject}no image: {fix}.image (or in the template's worker container)",
        )
    target, ref_source = _connection(c, path, worker, s, namespace, subject, fix)
    task_queue = (worker.task_queue_name if worker else None) or (queue.name if queue else None)
    resources = s.resources or Resources()
    dlq: ResolvedDLQ | None = None
    if s.dlq is not None and s.dlq.enabled and len(name) > MAX_DLQ_WORKER_NAME:
        c.add(
            f"{path}.name" if explicit else path,
            f"{subject}with dlq enabled the worker name must be at most "
            f"{MAX_DLQ_WORKER_NAME} characters (its StatefulSet is '<name>-dlq')",
        )
    elif s.dlq is not None and s.dlq.enabled and image is not None and task_queue is not None:
        dlq = ResolvedDLQ(
            image=s.dlq.image or image,
            replicas=s.dlq.replicas,
            task_queue_name=s.dlq.task_queue_name or f"{task_queue}-dlq",
            resources=s.dlq.resources or resources,
        )
    for field, wire in (("sunset", "sunset"), ("resource_templates", "resourceTemplates")):
        if s.rollout is None and worker is not None and getattr(worker, field) is not None:
            c.add(
                f"{path}.{wire}",
                f"{wire} applies only to versioned rollouts: set rollout here or in defaults",
            )
    if len(c.issues) > before or image is None or target is None or task_queue is None:
        return None
    grace = s.termination_grace_period_seconds
    return ResolvedWorker(
        name=name,
        namespace=namespace,
        derived=not explicit,
        source=path,
        queue=queue,
        task_queue_name=task_queue,
        temporal_namespace=s.temporal_namespace or "default",
        connection=target,
        connection_source=ref_source,
        image=image,
        image_pull_policy=s.image_pull_policy or "IfNotPresent",
        replicas=_replicas(worker, queue, s),
        autoscaling=s.autoscaling,
        resources=resources,
        node_selector=dict(s.node_selector or {}),
        affinity=s.affinity,
        tolerations=tuple(s.tolerations or ()),
        lifecycle=s.lifecycle or Lifecycle(),
        dlq=dlq,
        service_account=s.service_account or ServiceAccount(),
        env=dict(s.env or {}),
        termination_grace_period_seconds=60 if grace is None else grace,
        pod_template=pod_template,
        template_source=template_source,
        rollout=s.rollout,
        sunset=(s.sunset or Sunset()) if s.rollout is not None else None,
        resource_templates=(s.resource_templates or ()) if s.rollout is not None else (),
        min_ready_seconds=s.min_ready_seconds,
        progress_deadline_seconds=s.progress_deadline_seconds,
    )


def _connection(
    c: _Checker,
    path: str,
    worker: TemporalWorker | None,
    s: WorkerSettings,
    namespace: str,
    subject: str,
    fix: str,
) -> tuple[ConnectionTarget | None, str]:
    """The worker's connection, checked, and the field path it is set at."""
    own_ref = worker is not None and worker.connection_ref is not None
    ref_source = f"{path}.connectionRef" if own_ref else "defaults.connectionRef"
    if s.connection_ref is None:
        where = f"{path}.connectionRef" if worker is not None else path
        c.add(where, f"{subject}no connectionRef: {fix}.connectionRef")
        return None, ref_source
    ref_source += ".name" if s.connection_ref.name is not None else ".objectRef"
    target = s.connection_ref.target(namespace)
    where = ref_source if own_ref else path
    prefix = subject + ("" if own_ref else f"connectionRef (from {ref_source}): ")
    # Other kinds belong to provider plugins: the connection registry reports those.
    missing_cc = c.fleet.find_cluster_connection(target.name) is None
    if target.kind == CONNECTION_KIND and c.fleet.find_connection(namespace, target.name) is None:
        elsewhere = sorted(x.namespace for x in c.fleet.connections if x.name == target.name)
        if elsewhere:
            c.add(
                where,
                f"{prefix}Connection {target.name!r} is in namespace {elsewhere[0]!r}, but a "
                "namespaced Connection can only be used by workers in its own namespace "
                f"(this worker is in {namespace!r}); use a ClusterConnection to share it",
            )
        else:
            c.add(where, f"{prefix}no Connection {target.name!r} in namespace {namespace!r}")
    elif target.kind == CLUSTER_CONNECTION_KIND and missing_cc:
        c.add(where, f"{prefix}no ClusterConnection {target.name!r}")
    return target, ref_source


def _replicas(worker: TemporalWorker | None, queue: Queue | None, s: WorkerSettings) -> int:
    """The autoscaler's floor, else the worker's count, else the queue's partitions, else 1."""
    if s.autoscaling is not None:
        return s.autoscaling.min_replicas
    if worker is not None and worker.replicas is not None:
        return worker.replicas
    if queue is not None and queue.partitions is not None:
        return queue.partitions
    return s.replicas if s.replicas is not None else 1  # the worker set none: the defaults'


def _pod_template(
    worker: TemporalWorker | None, defaults: Defaults, path: str
) -> tuple[dict[str, Any], str | None]:
    """The pod template in effect with the shorthand merged in, and where it is set."""
    own = worker.template if worker is not None else None
    if own is not None:
        template, source = own, f"{path}.template"
    elif defaults.template is not None:
        template, source = defaults.template, "defaults.template"
    else:
        template, source = None, None
    mine = worker.shorthand() if worker is not None else {}
    given = {name: value for name, value in mine.items() if value is not None}
    # The more specific level wins: the worker's shorthand over a template from the defaults.
    wins = set(given) if own is None else set()
    return merge_pod_template(template, defaults.shorthand() | given, wins), source


def _merged(worker: TemporalWorker | None, defaults: Defaults) -> WorkerSettings:
    """The worker's settings over the defaults, whole values taken, never merged."""
    if worker is None:
        return defaults
    overrides = {
        name: value
        for name in WorkerSettings.model_fields
        if (value := getattr(worker, name)) is not None
    }
    return defaults.model_copy(update=overrides)
