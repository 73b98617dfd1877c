"""Whole-fleet checks and worker resolution.

Resolution and cross-object validation are one pass on purpose: resolving a worker is
exactly the act of following its references and defaults, so whatever cannot be
followed is, by definition, a validation issue. The pass collects every issue before
failing, so a user sees all problems in one run.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from twc.errors import SpecError, SpecIssue
from twc.spec._models import (
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    Affinity,
    Autoscaling,
    ConnectionTarget,
    Defaults,
    Fleet,
    ImagePullPolicy,
    Lifecycle,
    Queue,
    Resources,
    Rollout,
    ServiceAccount,
    Sunset,
    TemporalWorker,
    Toleration,
    WorkerSettings,
)
from twc.spec._template import Level, merge_pod_template, worker_container_index

__all__ = ["ResolvedDLQ", "ResolvedWorker", "check_fleet", "resolve_or_raise"]

logger = logging.getLogger(__name__)

DEFAULT_TEMPORAL_NAMESPACE = "default"
DEFAULT_IMAGE_PULL_POLICY: ImagePullPolicy = "IfNotPresent"
DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS = 60
DERIVED_WORKER_PREFIX = "worker-"
# The DLQ StatefulSet is "<worker>-dlq"; StatefulSet names feed the 63-character
# controller-revision-hash label together with an 11-character suffix.
MAX_DLQ_WORKER_NAME = 48


class ResolvedDLQ(BaseModel):
    """A worker's DLQ processor with every default applied."""

    model_config = ConfigDict(frozen=True)

    image: str
    """Processor image."""
    replicas: int
    """Processor replicas."""
    task_queue_name: str
    """Task queue the processor polls."""
    resources: Resources
    """Processor resources."""


class ResolvedWorker(BaseModel):
    """A worker with defaults applied and references followed: what gets deployed."""

    model_config = ConfigDict(frozen=True)

    name: str
    """Worker name."""
    namespace: str
    """Kubernetes namespace."""
    derived: bool
    """True when derived from a queue's ``workerEnabled``."""
    source: str
    """Where the worker is declared, e.g. ``workers[2]`` or ``queues[0]``."""
    queue: Queue | None
    """The kmsvc queue served, if any."""
    task_queue_name: str
    """Temporal task queue polled."""
    temporal_namespace: str
    """Temporal namespace."""
    connection: ConnectionTarget
    """The connection reference made absolute."""
    connection_source: str
    """Field path of the connection reference in use, e.g.
    ``workers[2].connectionRef.name`` or ``defaults.connectionRef.objectRef``."""
    image: str
    """Container image."""
    image_pull_policy: ImagePullPolicy
    """Image pull policy."""
    replicas: int
    """Replica count to start from (``minReplicas`` when autoscaling)."""
    autoscaling: Autoscaling | None
    """Scaling bounds, if autoscaled."""
    resources: Resources
    """Container resources."""
    node_selector: dict[str, str]
    """Node selector."""
    affinity: Affinity | None
    """Affinity rules."""
    tolerations: tuple[Toleration, ...]
    """Tolerations."""
    lifecycle: Lifecycle
    """Lifecycle hooks."""
    dlq: ResolvedDLQ | None
    """DLQ processor, when enabled."""
    service_account: ServiceAccount
    """ServiceAccount settings."""
    env: dict[str, str]
    """Extra environment variables."""
    termination_grace_period_seconds: int
    """Termination grace period."""
    pod_template: dict[str, Any]
    """The user's side of the worker's pods: ``template`` (the worker's, else the
    defaults') with the shorthand fields merged in by the rules of
    :mod:`twc.spec._template`; its ``spec.containers`` always holds the worker
    container. The fields above are the shorthand values as resolved; the pods are
    built from this. twc's own env, labels, volumes and init container are added by
    the builders."""
    template_source: str | None
    """Field path of the ``template`` in effect (``workers[2].template`` or
    ``defaults.template``), None without one; errors about pod fields point here."""
    rollout: Rollout | None
    """Versioned rollout settings (drive versioned Deployments and Worker Versioning
    routing); None keeps in-place rolls."""
    sunset: Sunset | None
    """When drained versions are scaled down and deleted, with the defaults applied
    (``1h``, ``24h``); set exactly when ``rollout`` is."""

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``, unique within a fleet."""
        return (self.namespace, self.name)

    @property
    def stack_key(self) -> str:
        """``<namespace>/<name>``: the worker's name in the stack (its component's
        resource name), in metrics and in the daemon's decisions."""
        return f"{self.namespace}/{self.name}"


@dataclass
class _Checker:
    """Accumulates issues for one fleet file."""

    fleet: Fleet
    file: str
    issues: list[SpecIssue] = field(default_factory=list)

    def add(self, path: str, reason: str) -> None:
        self.issues.append(SpecIssue(self.file, path, reason))

    def unique(self, section: str, keys: Iterable[Hashable], describe: str) -> None:
        first: dict[Hashable, int] = {}
        for index, key in enumerate(keys):
            if key in first:
                self.add(
                    f"{section}[{index}].name",
                    f"duplicate {describe} {_show(key)} (first defined at {section}[{first[key]}])",
                )
            else:
                first[key] = index


def _show(key: Hashable) -> str:
    if isinstance(key, tuple):
        return "/".join(f"{part}" for part in key if part is not None)
    return f"{key}"


def check_fleet(fleet: Fleet, file: str) -> tuple[list[ResolvedWorker], list[SpecIssue]]:
    """Check cross-object rules and resolve every worker.

    Args:
        fleet: A structurally valid fleet.
        file: File name used in issues.

    Returns:
        The resolved workers (explicit first, then derived) and every issue found.
        Workers with issues are left out of the list.
    """
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

    resolved: list[ResolvedWorker] = []
    served: set[tuple[str, str]] = set()
    for index, worker in enumerate(fleet.workers):
        queue = _worker_queue(c, index, worker)
        if queue is not None:
            served.add((queue.namespace, queue.name))
        path = f"workers[{index}]"
        result = _resolve(c, path, worker, queue, worker.name, worker.namespace)
        if result is not None:
            resolved.append(result)

    explicit = {(w.namespace, w.name): i for i, w in enumerate(fleet.workers)}
    for index, queue in enumerate(fleet.queues):
        if not queue.worker_enabled or (queue.namespace, queue.name) in served:
            continue
        path = f"queues[{index}]"
        name = f"{DERIVED_WORKER_PREFIX}{queue.name}"
        if len(name) > 63:
            c.add(
                f"{path}.name",
                f"the derived worker name {name!r} exceeds 63 characters: shorten the "
                "queue name or declare the worker explicitly",
            )
            continue
        clash = explicit.get((queue.namespace, name))
        if clash is not None:
            c.add(
                f"{path}.workerEnabled",
                f"the derived worker {queue.namespace}/{name} clashes with workers[{clash}], "
                "which serves another queue: rename that worker or set its queueRef to "
                "this queue",
            )
            continue
        result = _resolve(c, path, None, queue, name, queue.namespace)
        if result is not None:
            resolved.append(result)
    return resolved, c.issues


def resolve_or_raise(fleet: Fleet, file: str) -> tuple[ResolvedWorker, ...]:
    """Resolve every worker, raising one :class:`SpecError` listing all issues."""
    workers, issues = check_fleet(fleet, file)
    if issues:
        raise SpecError(issues)
    return tuple(workers)


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
            f"workers[{index}].queueRef",
            f"no queue {ref.name!r} in namespace {namespace!r}{hint}",
        )
    return queue


def _resolve(
    c: _Checker,
    path: str,
    worker: TemporalWorker | None,
    queue: Queue | None,
    name: str,
    namespace: str,
) -> ResolvedWorker | None:
    """Resolve one worker; ``worker`` is None for a worker derived from ``queue``."""
    s = _merged(worker, c.fleet.defaults)
    explicit, before = worker is not None, len(c.issues)
    # A derived worker's issues point at its queue and name the setting for defaults.
    subject = "" if explicit else f"derived worker {name!r}: "
    fix = "set it here or in defaults" if explicit else "set it in defaults"
    pod_template, template_source = _pod_template(worker, c.fleet.defaults, path)
    image = _worker_image(pod_template)
    if image is None:
        c.add(
            f"{path}.image" if explicit else path,
            f"{subject}no image: {fix}.image (or in the template's worker container)",
        )
    target, ref_source = _connection(c, path, worker, s, namespace, subject, fix)
    task_queue = (worker.task_queue_name if worker is not None else None) or (
        queue.name if queue is not None else None
    )
    resources = s.resources or Resources.model_validate({})
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
    sunset = s.sunset or Sunset.model_validate({}) if s.rollout is not None else None
    if s.rollout is None and worker is not None and worker.sunset is not None:
        c.add(
            f"{path}.sunset",
            "sunset applies only to versioned rollouts: set rollout here or in defaults",
        )
    if len(c.issues) > before or image is None or target is None or task_queue is None:
        return None
    return ResolvedWorker(
        name=name,
        namespace=namespace,
        derived=not explicit,
        source=path,
        queue=queue,
        task_queue_name=task_queue,
        temporal_namespace=s.temporal_namespace or DEFAULT_TEMPORAL_NAMESPACE,
        connection=target,
        connection_source=ref_source,
        image=image,
        image_pull_policy=s.image_pull_policy or DEFAULT_IMAGE_PULL_POLICY,
        replicas=_replicas(worker, queue, c.fleet.defaults, s),
        autoscaling=s.autoscaling,
        resources=resources,
        node_selector=dict(s.node_selector or {}),
        affinity=s.affinity,
        tolerations=tuple(s.tolerations or ()),
        lifecycle=s.lifecycle or Lifecycle.model_validate({}),
        dlq=dlq,
        service_account=s.service_account or ServiceAccount.model_validate({}),
        env=dict(s.env or {}),
        termination_grace_period_seconds=(
            s.termination_grace_period_seconds
            if s.termination_grace_period_seconds is not None
            else DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
        ),
        pod_template=pod_template,
        template_source=template_source,
        rollout=s.rollout,
        sunset=sunset,
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
    inherited = "" if own_ref else f"connectionRef (from {ref_source}): "
    _check_connection_exists(c, ref_source if own_ref else path, f"{subject}{inherited}", target)
    return target, ref_source


def _replicas(
    worker: TemporalWorker | None, queue: Queue | None, defaults: Defaults, s: WorkerSettings
) -> int:
    """The worker's own count, else one per queue partition, else the default; the
    autoscaler's floor while autoscaled (until the daemon has sampled the backlog)."""
    if s.autoscaling is not None:
        return s.autoscaling.min_replicas
    if worker is not None and worker.replicas is not None:
        return worker.replicas
    if queue is not None and queue.partitions is not None:
        return queue.partitions
    return defaults.replicas if defaults.replicas is not None else 1


def _pod_template(
    worker: TemporalWorker | None, defaults: Defaults, path: str
) -> tuple[dict[str, Any], str | None]:
    """The user's pod template with the shorthand merged in, and where it comes from.

    The template and every shorthand field are taken from the most specific level that
    sets them (the worker, else ``defaults``); :func:`merge_pod_template` then lets the
    more specific of the two win where both speak, and fills gaps either way.
    """
    own = worker.template if worker is not None else None
    if own is not None:
        template, level, source = own, Level.WORKER, f"{path}.template"
    elif defaults.template is not None:
        template, level, source = defaults.template, Level.DEFAULTS, "defaults.template"
    else:
        template, level, source = None, Level.NONE, None
    mine = worker.shorthand() if worker is not None else {}
    inherited = defaults.shorthand()
    shorthand: dict[str, tuple[Level, Any]] = {}
    for name, value in inherited.items():
        if mine.get(name) is not None:
            shorthand[name] = (Level.WORKER, mine[name])
        elif value is not None:
            shorthand[name] = (Level.DEFAULTS, value)
    return merge_pod_template(template, level, shorthand), source


def _worker_image(pod_template: dict[str, Any]) -> str | None:
    containers = pod_template["spec"]["containers"]
    index = worker_container_index(containers)
    image = containers[index].get("image") if index is not None else None
    return image if isinstance(image, str) and image else None


def _merged(worker: TemporalWorker | None, defaults: Defaults) -> WorkerSettings:
    """The worker's settings over the defaults.

    Whole values are taken, never merged: a worker's ``resources`` replaces the
    default's, which keeps the result predictable from the file alone.
    """
    if worker is None:
        return defaults
    overrides = {
        field_name: value
        for field_name in WorkerSettings.model_fields
        if (value := getattr(worker, field_name)) is not None
    }
    return defaults.model_copy(update=overrides)


def _check_connection_exists(
    c: _Checker, where: str, prefix: str, target: ConnectionTarget
) -> None:
    """Report a reference to a built-in connection kind that names nothing.

    Other kinds belong to provider plugins; the connection registry reports those
    (``UnknownConnectionKind`` / ``ConnectionNotFound``), since only it knows them.
    """
    if target.kind == CONNECTION_KIND:
        if c.fleet.find_connection(target.namespace, target.name) is not None:
            return
        elsewhere = sorted(x.namespace for x in c.fleet.connections if x.name == target.name)
        if elsewhere:
            c.add(
                where,
                f"{prefix}Connection {target.name!r} is in namespace {elsewhere[0]!r}, but a "
                "namespaced Connection can only be used by workers in its own namespace "
                f"(this worker is in {target.namespace!r}); use a ClusterConnection to share it",
            )
        else:
            c.add(where, f"{prefix}no Connection {target.name!r} in namespace {target.namespace!r}")
    elif (
        target.kind == CLUSTER_CONNECTION_KIND
        and c.fleet.find_cluster_connection(target.name) is None
    ):
        c.add(where, f"{prefix}no ClusterConnection {target.name!r}")
