"""Pure builders of the Kubernetes objects behind a worker, as plain camelCase dicts the
components and the daemon's early apply pass through unchanged; the worker container first."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from twc import rollout
from twc.connections import PodSpecOptions, ResolvedConnection
from twc.native.objects import metadata
from twc.spec import ResolvedWorker, label_value, worker_container_index
from twc.spec.labels import STACK_LABEL, owner_stack
from twc.spec.resources import render_resource, resource_name, scales

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_TASK_QUEUE: Final = "temporal.io/task-queue"
LABEL_WORKER: Final = "twc.temporal.io/worker"
LABEL_STACK: Final = STACK_LABEL
"""The stack an object belongs to: on every object twc creates, never on pod templates."""
MANAGED_BY: Final = "twc"
COMPONENT_WORKER: Final = "worker"
COMPONENT_DLQ: Final = "dlq-processor"
COMPONENT_RESOURCE: Final = "version-resource"
"""A per-version object made from a worker's ``resourceTemplates``."""
WORKER_CONTAINER: Final = "worker"
WAIT_CONTAINER: Final = "wait-for-temporal"
DEFAULT_WAIT_IMAGE: Final = "busybox:1.37"
"""Image of the init container; any image with ``sh`` and ``nc -z`` works."""
REPLICAS_SOURCE_ANNOTATION = "twc.temporal.io/replicas-source"
"""On a worker Deployment: ``autoscaling`` or ``spec``, where its replicas come from."""
AUTOSCALING_ANNOTATION = "twc.temporal.io/autoscaling"
"""On an autoscaled worker's Deployment: its ``autoscaling`` (JSON), for previews."""
CONNECTION_ANNOTATION = "twc.temporal.io/connection"
"""On a worker Deployment (not the pod template): the connection it uses, by name."""


WAIT_SCRIPT: Final = """\
addr="${TEMPORAL_FRONTEND_ADDRESS:?TEMPORAL_FRONTEND_ADDRESS is not set}"
port="${addr##*:}"
host="${addr%:*}"
host="${host#[}"
host="${host%]}"
echo "waiting for the Temporal frontend at $addr"
until nc -z -w 2 "$host" "$port"; do sleep 2; done
echo "the Temporal frontend at $addr accepts connections"
"""
"""The init container waits until the frontend accepts TCP, so workers do not crash-loop."""

_RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
_FIELD_ENV = {
    "POD_NAME": "metadata.name",
    "POD_NAMESPACE": "metadata.namespace",
    "NODE_NAME": "spec.nodeName",
}
WORKER_ENV_NAMES: Final = frozenset(
    {"TEMPORAL_NAMESPACE", "TEMPORAL_TASK_QUEUE", *_FIELD_ENV}
    | {rollout.ENV_DEPLOYMENT_NAME, rollout.ENV_BUILD_ID}
)
"""The variables the builders set (the last two only on a version's pods)."""
# Container fields of the worker program, not of the DLQ processor sharing its pod.
_PROGRAM_FIELDS = ("command", "args", "ports", "readinessProbe", "livenessProbe", "startupProbe")


def worker_labels(worker: ResolvedWorker, component: str = COMPONENT_WORKER) -> dict[str, str]:
    """Labels of a worker's (or its DLQ processor's) objects and pods."""
    dlq = worker.dlq if component == COMPONENT_DLQ else None
    task_queue = dlq.task_queue_name if dlq else worker.task_queue_name
    return {
        LABEL_NAME: worker.name,
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_TASK_QUEUE: label_value(task_queue),
        LABEL_WORKER: worker.name,
    }


def stack_labels(stack: str | None) -> dict[str, str]:
    """The ownership labels of an object of ``stack`` (none when no stack is given)."""
    if not stack:
        return {}
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_STACK: label_value(owner_stack(stack))}


def foreign_owner(obj: Mapping[str, Any], stack: str) -> str | None:
    """Why an object is not ``stack``'s to adopt (not twc's, another stack's), else ``None``."""
    labels = metadata(obj).get("labels") or {}
    other = labels.get(LABEL_MANAGED_BY)
    if other != MANAGED_BY:
        return f"not created by twc (managed-by: {other})" if other else "not created by twc"
    found = labels.get(LABEL_STACK)
    if found is not None and owner_stack(str(found)) != label_value(owner_stack(stack)):
        return "created by another twc stack"
    return None


def selector_labels(worker: ResolvedWorker, component: str = COMPONENT_WORKER) -> dict[str, str]:
    """The immutable selector: the worker and the component, never the task queue."""
    return {LABEL_WORKER: worker.name, LABEL_COMPONENT: component}


def object_metadata(
    worker: ResolvedWorker,
    name: str,
    component: str = COMPONENT_WORKER,
    *,
    stack: str | None = None,
) -> dict[str, Any]:
    """``metadata`` of an object owned by ``worker``, labelled with ``stack`` when given."""
    labels = {**worker_labels(worker, component), **stack_labels(stack)}
    return {"name": name, "namespace": worker.namespace, "labels": labels}


def dlq_statefulset_name(worker: ResolvedWorker) -> str:
    return f"{worker.name}-dlq"


def worker_pod_template(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    options: PodSpecOptions | None = None,
    *,
    component: str = COMPONENT_WORKER,
) -> dict[str, Any]:
    """The worker's (or its DLQ processor's) PodTemplateSpec: the user's template with twc's
    env (first), labels, ServiceAccount, wait init container (last) and the connection's
    settings merged in; ValueError for the DLQ processor of a worker without a DLQ."""
    task_queue, image = worker.task_queue_name, worker.image
    user = copy.deepcopy(worker.pod_template)
    spec: dict[str, Any] = dict(user.get("spec") or {})
    containers = list(spec.get("containers") or [])
    index = worker_container_index(containers)
    container: dict[str, Any] = dict(containers.pop(index)) if index is not None else {}
    if component == COMPONENT_DLQ:
        if worker.dlq is None:
            raise ValueError(f"worker {worker.namespace}/{worker.name} has no DLQ enabled")
        # The worker's pod, another program in the worker container.
        task_queue, image = worker.dlq.task_queue_name, worker.dlq.image
        container = {k: v for k, v in container.items() if k not in _PROGRAM_FIELDS}
        container.update(name=COMPONENT_DLQ, image=image)
        if worker.dlq.resources is not None and worker.dlq.resources.to_kubernetes():
            container["resources"] = worker.dlq.resources.to_kubernetes()
    container.setdefault("name", WORKER_CONTAINER)
    container.setdefault("image", image)
    container.setdefault("imagePullPolicy", worker.image_pull_policy)
    own_env = [
        {"name": "TEMPORAL_NAMESPACE", "value": worker.temporal_namespace},
        {"name": "TEMPORAL_TASK_QUEUE", "value": task_queue},
        *({"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in _FIELD_ENV.items()),
    ]
    # twc's variables first, so the user's may refer to them as $(TEMPORAL_ADDRESS).
    container["env"] = [*own_env, *(container.get("env") or [])]
    container["securityContext"] = {**_RESTRICTED, **(container.get("securityContext") or {})}
    spec["serviceAccountName"] = worker.name
    spec.setdefault("automountServiceAccountToken", worker.service_account.automount_token)
    spec.setdefault("terminationGracePeriodSeconds", worker.termination_grace_period_seconds)
    # Service links add an env var per Service, which may shadow TEMPORAL_* names.
    spec.setdefault("enableServiceLinks", False)
    seccomp = {"seccompProfile": {"type": "RuntimeDefault"}}
    spec["securityContext"] = {**seccomp, **(spec.get("securityContext") or {})}
    spec["initContainers"] = [*(spec.get("initContainers") or []), _wait_container()]
    spec["containers"] = [container, *containers]
    metadata: dict[str, Any] = dict(user.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **worker_labels(worker, component)}
    # The connection writes address, TLS and API-key settings and the fingerprint
    # annotation in one step, so they cannot disagree; only into twc's containers.
    return connection.apply_pod_spec(
        {"metadata": metadata, "spec": spec},
        replace(
            options or PodSpecOptions(),
            fingerprint=fingerprint,
            containers=frozenset({container["name"]}),
            init_containers=frozenset({WAIT_CONTAINER}),
        ),
    )


def _wait_container() -> dict[str, Any]:
    return {
        "name": WAIT_CONTAINER,
        "image": DEFAULT_WAIT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", WAIT_SCRIPT],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": {**_RESTRICTED, "runAsNonRoot": True, "runAsUser": 65534},
    }


def deployment_spec(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    *,
    replicas: int | None = None,
    options: PodSpecOptions | None = None,
) -> dict[str, Any]:
    """The Deployment ``spec``; ``replicas``: an autoscaled count to write, clamped, or None."""
    spec: dict[str, Any] = {}
    if worker.autoscaling is None:
        spec["replicas"] = max(worker.replicas, 0)
    elif replicas is not None:
        low, high = worker.autoscaling.widest()  # a version's status may narrow them
        spec["replicas"] = max(min(max(replicas, low), high), 0)
    return {
        **spec,
        "selector": {"matchLabels": selector_labels(worker)},
        "template": worker_pod_template(worker, connection, fingerprint, options),
        # Surge first: a worker pod is only capacity, never a singleton.
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
        },
        "revisionHistoryLimit": 5,
        "progressDeadlineSeconds": worker.progress_deadline_seconds or 600,
        **({"minReadySeconds": worker.min_ready_seconds} if worker.min_ready_seconds else {}),
    }


def connection_name(connection: ResolvedConnection) -> str:
    """``<namespace>/<name>`` of a Connection, ``<name>`` of a ClusterConnection."""
    ident = connection.identity
    return f"{ident.namespace}/{ident.name}" if ident.namespace else ident.name


def worker_service_account(worker: ResolvedWorker, *, stack: str | None = None) -> dict[str, Any]:
    """The worker's ServiceAccount, named like the worker."""
    account = worker.service_account
    metadata = object_metadata(worker, worker.name, stack=stack)
    if account.annotations:
        metadata["annotations"] = dict(account.annotations)
    body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}
    return {**body, "automountServiceAccountToken": account.automount_token}


def worker_deployment(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    *,
    replicas: int | None = None,
    options: PodSpecOptions | None = None,
    connection_name: str | None = None,
    stack: str | None = None,
) -> dict[str, Any]:
    """The worker's Deployment, naming its connection and stack on it, never on its pods."""
    spec = deployment_spec(worker, connection, fingerprint, replicas=replicas, options=options)
    metadata = object_metadata(worker, worker.name, stack=stack)
    source = "autoscaling" if worker.autoscaling else "spec"
    metadata["annotations"] = {REPLICAS_SOURCE_ANNOTATION: source}
    if worker.autoscaling:  # what the daemon scales it by, for previews to show
        dumped = worker.autoscaling.model_dump_json(by_alias=True, exclude_defaults=True)
        metadata["annotations"][AUTOSCALING_ANNOTATION] = dumped
    if connection_name:
        metadata["annotations"][CONNECTION_ANNOTATION] = connection_name
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec}


def versioned_deployment(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    *,
    build_id: str,
    version_spec: str,
    policy: str,
    target: bool,
    replicas: int | None = None,
    options: PodSpecOptions | None = None,
    connection_name: str | None = None,
    stack: str | None = None,
) -> dict[str, Any]:
    """One version's Deployment ``<worker>-<buildID>`` of a versioned worker, selecting only
    its own pods, which poll as that version; ``target`` marks the version the spec asks for
    now, ``replicas`` 0 is a sunset (even below minReplicas)."""
    named = {"connection_name": connection_name, "stack": stack}
    manifest = worker_deployment(
        worker, connection, fingerprint, replicas=replicas, options=options, **named
    )
    spec, metadata = manifest["spec"], manifest["metadata"]
    if replicas == 0:
        spec["replicas"] = 0
    elif any(scales(t.template) for t in worker.resource_templates):
        spec.pop("replicas", None)  # its autoscaler's (kept out of the applied config)
        metadata["annotations"][REPLICAS_SOURCE_ANNOTATION] = "resourceTemplate"
        metadata["annotations"].pop(AUTOSCALING_ANNOTATION, None)
    version_labels = {rollout.BUILD_ID_LABEL: build_id, rollout.DEPLOYMENT_NAME_LABEL: worker.name}
    metadata["name"] = rollout.version_deployment_name(worker.name, build_id)
    metadata["labels"].update(version_labels)
    annotations = metadata["annotations"]
    annotations |= {rollout.VERSION_ANNOTATION: version_spec, rollout.POLICY_ANNOTATION: policy}
    if target:
        annotations[rollout.TARGET_ANNOTATION] = "true"
    spec["selector"]["matchLabels"][rollout.BUILD_ID_LABEL] = build_id
    template = spec["template"]
    template["metadata"]["labels"].update(version_labels)
    container = template["spec"]["containers"][0]
    deployment_name = rollout.temporal_deployment_name(worker.namespace, worker.name)
    own = {rollout.ENV_DEPLOYMENT_NAME: deployment_name, rollout.ENV_BUILD_ID: build_id}
    container["env"] = [
        *({"name": k, "value": v} for k, v in own.items()),
        *(e for e in container.get("env") or [] if e.get("name") not in own),
    ]
    return manifest


def version_resources(
    worker: ResolvedWorker, deployment: Mapping[str, Any], *, stack: str | None = None
) -> dict[str, dict[str, Any]]:
    """Per template name, its copy for the version whose Deployment is ``deployment``
    (labelled like it); none of an autoscaler's while the version is scaled to 0 (sunset)."""
    labels = deployment["metadata"]["labels"]
    build = labels[rollout.BUILD_ID_LABEL]
    scaled_down = deployment["spec"].get("replicas") == 0
    out = {}
    for entry in worker.resource_templates:
        if scaled_down and scales(entry.template):
            continue
        body = render_resource(
            entry.template,
            deployment=deployment,
            build_id=build,
            temporal_namespace=worker.temporal_namespace,
            worker_deployment=rollout.temporal_deployment_name(worker.namespace, worker.name),
        )
        name = resource_name(worker.name, entry.name, build)
        meta = object_metadata(worker, name, COMPONENT_RESOURCE, stack=stack)
        meta["labels"] |= {
            k: labels[k] for k in (rollout.BUILD_ID_LABEL, rollout.DEPLOYMENT_NAME_LABEL)
        }
        out[entry.name] = {**body, "metadata": meta}
    return out


def dlq_statefulset_spec(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    options: PodSpecOptions | None = None,
) -> dict[str, Any] | None:
    """The DLQ processor StatefulSet's ``spec``, or None without a DLQ."""
    if worker.dlq is None:
        return None
    return {
        "serviceName": dlq_statefulset_name(worker),
        "replicas": worker.dlq.replicas,
        "selector": {"matchLabels": selector_labels(worker, COMPONENT_DLQ)},
        "template": worker_pod_template(
            worker, connection, fingerprint, options, component=COMPONENT_DLQ
        ),
        "podManagementPolicy": "Parallel",  # interchangeable processors
        "updateStrategy": {"type": "RollingUpdate"},
        "revisionHistoryLimit": 5,
    }


def worker_objects(worker: ResolvedWorker, builds: Iterable[str] = ()) -> set[str]:
    """The objects a worker's component creates, as ``Kind namespace/name`` (``builds``: a
    versioned worker's versions besides the one its spec asks for), each version's
    resource-template copies among them."""
    ns, name = worker.namespace, worker.name
    found = {f"ServiceAccount {ns}/{name}"}
    if worker.rollout is None:
        found.add(f"Deployment {ns}/{name}")
    else:
        every = {rollout.build_id_of(worker), *builds}
        found |= {f"Deployment {ns}/{rollout.version_deployment_name(name, b)}" for b in every}
        for t in worker.resource_templates:
            kind = t.template["kind"]
            found |= {f"{kind} {ns}/{resource_name(name, t.name, b)}" for b in every}
    if pod_disruption_budget_spec(worker) is not None:
        found.add(f"PodDisruptionBudget {ns}/{name}")
    if worker.dlq is not None:
        dlq = dlq_statefulset_name(worker)
        found |= {f"Service {ns}/{dlq}", f"StatefulSet {ns}/{dlq}"}
    return found


def fleet_worker_objects(
    workers: Mapping[str, ResolvedWorker], versions: Mapping[str, rollout.WorkerVersions]
) -> tuple[dict[str, list[str]], list[str]]:
    """Each worker's objects (:func:`worker_objects`) with the versions it declares, and the
    objects of versions that drained (retired by their sunset, not counted as deletions)."""
    found: dict[str, list[str]] = {}
    retiring: set[str] = set()
    for key, worker in workers.items():
        given = versions.get(key)
        found[key] = sorted(worker_objects(worker, given.versions if given else ()))
        deprecated = (given.status or {}).get("deprecatedVersions") if given else None
        drained = [
            str(v["buildID"])
            for v in (deprecated if isinstance(deprecated, list) else ())
            if isinstance(v, dict) and v.get("status") == "Drained"
        ]
        retiring |= worker_objects(worker, drained) - worker_objects(worker)
    return found, sorted(retiring)


def pod_disruption_budget_spec(worker: ResolvedWorker) -> dict[str, Any] | None:
    """The worker PodDisruptionBudget's ``spec`` (one pod at a time), or None for one replica."""
    most = worker.autoscaling.widest()[1] if worker.autoscaling else worker.replicas
    if most <= 1:
        return None
    return {
        "maxUnavailable": 1,
        "selector": {"matchLabels": selector_labels(worker)},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",  # a crash-looping pod must not block
    }
