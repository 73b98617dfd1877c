"""Pure builders of the Kubernetes objects behind a worker.

Everything returns plain camelCase dicts, exactly as the Kubernetes API spells them, so
the Pulumi components pass them through unchanged and unit tests compare dicts. No
Pulumi here: the components call these inside an ``Output.apply`` once the connection
fingerprint is known.

The worker container comes first in ``containers``: tools that act as kubelets (the
local test bed) read the first container's env.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from twc import rollout
from twc.connections import DEFAULT_TLS_MOUNT_PATH, PodSpecOptions, ResolvedConnection
from twc.spec import ResolvedWorker, Resources, label_value, worker_container_index
from twc.spec.labels import STACK_LABEL, owner_stack

__all__ = [
    "COMPONENT_DLQ",
    "COMPONENT_WORKER",
    "DEFAULT_WAIT_IMAGE",
    "LABEL_COMPONENT",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_STACK",
    "LABEL_TASK_QUEUE",
    "LABEL_WORKER",
    "MANAGED_BY",
    "WAIT_CONTAINER",
    "WAIT_SCRIPT",
    "WORKER_CONTAINER",
    "WORKER_ENV_NAMES",
    "PodTemplateOptions",
    "deployment_spec",
    "dlq_pod_template",
    "dlq_statefulset_name",
    "dlq_statefulset_spec",
    "foreign_owner",
    "object_metadata",
    "pod_disruption_budget_spec",
    "selector_labels",
    "service_account_metadata",
    "stack_labels",
    "versioned_deployment",
    "worker_labels",
    "worker_pod_template",
]

logger = logging.getLogger(__name__)

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_TASK_QUEUE: Final = "temporal.io/task-queue"
LABEL_WORKER: Final = "twc.temporal.io/worker"
LABEL_STACK: Final = STACK_LABEL
"""On every object twc creates: the stack it belongs to. Early apply, adoption and
clean-up select on it, so one stack never touches another's objects (nor a user's, which
carry no ``managed-by: twc``). Not on pod templates: adding it must not roll pods."""
MANAGED_BY: Final = "twc"
COMPONENT_WORKER: Final = "worker"
COMPONENT_DLQ: Final = "dlq-processor"
WORKER_CONTAINER: Final = "worker"
DLQ_CONTAINER: Final = "dlq-processor"
WAIT_CONTAINER: Final = "wait-for-temporal"
DEFAULT_WAIT_IMAGE: Final = "busybox:1.37"
"""Image of the init container; any image with ``sh`` and ``nc -z`` works."""

ENV_NAMESPACE: Final = "TEMPORAL_NAMESPACE"
ENV_TASK_QUEUE: Final = "TEMPORAL_TASK_QUEUE"
WORKER_ENV_NAMES: Final = frozenset(
    {
        ENV_NAMESPACE,
        ENV_TASK_QUEUE,
        "POD_NAME",
        "POD_NAMESPACE",
        "NODE_NAME",
        rollout.ENV_DEPLOYMENT_NAME,
        rollout.ENV_BUILD_ID,
    }
)
"""Environment variables the builders set (the connection sets the rest); the last two
only on a versioned worker's pods."""

# Waits until the frontend accepts TCP connections, so workers do not crash-loop while
# Temporal starts. Reads TEMPORAL_FRONTEND_ADDRESS (host:port or [v6]:port), which the
# connection writes into every init container; POSIX sh + nc, as in busybox.
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

_RESTRICTED_CONTAINER: Final[Mapping[str, Any]] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


@dataclass(frozen=True)
class PodTemplateOptions:
    """Knobs of the pod template that do not come from the fleet file."""

    secret_keys: frozenset[str] | None = None
    """Keys present in the connection's credential secret, if known; ``ca.crt`` among
    them points the worker at that CA."""
    wait_image: str = DEFAULT_WAIT_IMAGE
    """Image of the wait-for-frontend init container."""
    tls_mount_path: str = DEFAULT_TLS_MOUNT_PATH
    """Where the mTLS secret is mounted."""


def worker_labels(worker: ResolvedWorker, component: str = COMPONENT_WORKER) -> dict[str, str]:
    """Labels of a worker's objects and pods.

    Args:
        worker: The worker.
        component: ``worker`` or ``dlq-processor``.

    Returns:
        The labels; the task queue is rendered as a valid label value.
    """
    task_queue = worker.task_queue_name
    if component == COMPONENT_DLQ and worker.dlq is not None:
        task_queue = worker.dlq.task_queue_name
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
    """Why an existing object is not ``stack``'s to adopt, or ``None`` when it is.

    twc labels everything it creates (:func:`stack_labels`), so an object without
    ``managed-by: twc`` was made by someone else (a user, Helm...), and one with another
    stack's label belongs to that stack. An object twc made before it labelled stacks
    (``managed-by: twc``, no stack label) is adopted. The reason names neither the other
    stack nor anything outside the object itself.
    """
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = (meta or {}).get("labels") or {} if isinstance(meta, Mapping) else {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        other = labels.get(LABEL_MANAGED_BY)
        return f"not created by twc (managed-by: {other})" if other else "not created by twc"
    found = labels.get(LABEL_STACK)
    if found is not None and owner_stack(str(found)) != label_value(owner_stack(stack)):
        return "created by another twc stack"
    return None


def selector_labels(worker: ResolvedWorker, component: str = COMPONENT_WORKER) -> dict[str, str]:
    """The immutable selector subset of :func:`worker_labels`.

    Excludes the task queue so renaming a task queue does not need a new Deployment,
    and includes the component so the worker's Deployment and DLQ StatefulSet never
    select each other's pods.
    """
    return {LABEL_WORKER: worker.name, LABEL_COMPONENT: component}


def object_metadata(
    worker: ResolvedWorker,
    name: str,
    component: str = COMPONENT_WORKER,
    *,
    stack: str | None = None,
) -> dict[str, Any]:
    """``metadata`` for an object owned by ``worker`` (Deployment, PDB, ...), labelled
    with ``stack`` (:data:`LABEL_STACK`) when given."""
    labels = {**worker_labels(worker, component), **stack_labels(stack)}
    return {"name": name, "namespace": worker.namespace, "labels": labels}


def service_account_metadata(worker: ResolvedWorker, *, stack: str | None = None) -> dict[str, Any]:
    """``metadata`` of the worker's ServiceAccount (named like the worker)."""
    metadata = object_metadata(worker, worker.name, stack=stack)
    if worker.service_account.annotations:
        metadata["annotations"] = dict(worker.service_account.annotations)
    return metadata


def dlq_statefulset_name(worker: ResolvedWorker) -> str:
    """Name of the worker's DLQ StatefulSet."""
    return f"{worker.name}-dlq"


def worker_pod_template(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    options: PodTemplateOptions | None = None,
) -> dict[str, Any]:
    """Build the worker's PodTemplateSpec.

    Args:
        worker: The resolved worker.
        connection: Its resolved connection.
        fingerprint: ``connection.fingerprint(secret_digest)``, e.g. the output of the
            ``ConnectionFingerprint`` resource; becomes the
            ``temporal.io/connection-spec-hash`` annotation.
        options: Extra knobs.

    Returns:
        ``{"metadata": ..., "spec": ...}`` in Kubernetes camelCase.
    """
    return _pod_template(
        worker,
        connection,
        fingerprint,
        options or PodTemplateOptions(),
        component=COMPONENT_WORKER,
        container_name=None,
        image=worker.image,
        task_queue=worker.task_queue_name,
        resources=None,
    )


def dlq_pod_template(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    options: PodTemplateOptions | None = None,
) -> dict[str, Any]:
    """Build the DLQ processor's PodTemplateSpec (see :func:`worker_pod_template`).

    Raises:
        ValueError: If the worker has no DLQ enabled.
    """
    if worker.dlq is None:
        raise ValueError(f"worker {worker.namespace}/{worker.name} has no DLQ enabled")
    return _pod_template(
        worker,
        connection,
        fingerprint,
        options or PodTemplateOptions(),
        component=COMPONENT_DLQ,
        container_name=DLQ_CONTAINER,
        image=worker.dlq.image,
        task_queue=worker.dlq.task_queue_name,
        resources=worker.dlq.resources,
    )


# Container fields that belong to the worker program, not to the DLQ processor that
# shares the worker's pod template.
_WORKER_PROGRAM_FIELDS: Final = (
    "command",
    "args",
    "ports",
    "readinessProbe",
    "livenessProbe",
    "startupProbe",
)


def _pod_template(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    options: PodTemplateOptions,
    *,
    component: str,
    container_name: str | None,
    image: str,
    task_queue: str,
    resources: Resources | None,
) -> dict[str, Any]:
    """The user's pod (``worker.pod_template``) with twc's parts merged in.

    twc owns its env (first in the worker container), its labels, the ServiceAccount,
    the wait-for-frontend init container (last) and, through the connection, the
    address/TLS env, the mTLS volume and the fingerprint annotation. Its defaults
    (restricted security contexts, no service links, the grace period) fill only what
    the template leaves unset; the rest is the user's, kept as written.
    """
    user = copy.deepcopy(worker.pod_template)
    spec: dict[str, Any] = dict(user.get("spec") or {})
    containers = list(spec.get("containers") or [])
    index = worker_container_index(containers)
    container: dict[str, Any] = dict(containers.pop(index)) if index is not None else {}
    if container_name is not None:
        # The DLQ processor: the worker's pod, another program in the worker container.
        container["name"] = container_name
        container["image"] = image
        for key in _WORKER_PROGRAM_FIELDS:
            container.pop(key, None)
    container.setdefault("name", WORKER_CONTAINER)
    container.setdefault("image", image)
    container.setdefault("imagePullPolicy", worker.image_pull_policy)
    own_env: list[dict[str, Any]] = [
        {"name": ENV_NAMESPACE, "value": worker.temporal_namespace},
        {"name": ENV_TASK_QUEUE, "value": task_queue},
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        _field_env("NODE_NAME", "spec.nodeName"),
    ]
    # twc's variables first, so the user's may refer to them as $(TEMPORAL_ADDRESS).
    container["env"] = [*own_env, *(container.get("env") or [])]
    container["securityContext"] = {
        **_RESTRICTED_CONTAINER,
        **(container.get("securityContext") or {}),
    }
    k8s_resources = resources.to_kubernetes() if resources is not None else {}
    if k8s_resources:
        container["resources"] = k8s_resources

    spec["serviceAccountName"] = worker.name
    spec.setdefault("automountServiceAccountToken", worker.service_account.automount_token)
    spec.setdefault("terminationGracePeriodSeconds", worker.termination_grace_period_seconds)
    # Service links inject one env var per Service in the namespace; workers never use
    # them and they can shadow TEMPORAL_* names.
    spec.setdefault("enableServiceLinks", False)
    spec["securityContext"] = {
        "seccompProfile": {"type": "RuntimeDefault"},
        **(spec.get("securityContext") or {}),
    }
    spec["initContainers"] = [*(spec.get("initContainers") or []), _wait_container(options)]
    # The worker container first: the preview and the test bed's kubelet read it there.
    spec["containers"] = [container, *containers]

    metadata: dict[str, Any] = dict(user.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **worker_labels(worker, component)}
    template = {"metadata": metadata, "spec": spec}
    # The connection writes address, TLS and API-key settings and the fingerprint
    # annotation in one step, so they cannot disagree; only into twc's containers.
    return connection.apply_pod_spec(
        template,
        PodSpecOptions(
            fingerprint=fingerprint,
            secret_keys=options.secret_keys,
            tls_mount_path=options.tls_mount_path,
            containers=frozenset({container["name"]}),
            init_containers=frozenset({WAIT_CONTAINER}),
        ),
    )


def _wait_container(options: PodTemplateOptions) -> dict[str, Any]:
    """The init container that waits for the Temporal frontend (:data:`WAIT_SCRIPT`)."""
    return {
        "name": WAIT_CONTAINER,
        "image": options.wait_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", WAIT_SCRIPT],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": {**_RESTRICTED_CONTAINER, "runAsNonRoot": True, "runAsUser": 65534},
    }


def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _check_selector(template: Mapping[str, Any], selector: Mapping[str, str]) -> None:
    labels = template.get("metadata", {}).get("labels", {})
    missing = {k: v for k, v in selector.items() if labels.get(k) != v}
    if missing:
        # The API server would reject the object; fail early with the reason.
        raise ValueError(f"pod template labels do not match the selector: {missing}")


def deployment_spec(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    *,
    replicas: int | None = None,
    options: PodTemplateOptions | None = None,
) -> dict[str, Any]:
    """Build the worker Deployment's ``spec``.

    Args:
        worker: The resolved worker.
        connection: Its resolved connection.
        fingerprint: The connection fingerprint (see :func:`worker_pod_template`).
        replicas: For an autoscaled worker, a replica count to write (kept within its
            bounds); ``None`` leaves ``replicas`` out of the spec, because the daemon
            owns that field through the Deployment's ``scale`` subresource and the
            program must never set it. Ignored for other workers, whose count is
            ``worker.replicas``.
        options: Extra pod template knobs.

    Returns:
        The Deployment spec.
    """
    template = worker_pod_template(worker, connection, fingerprint, options)
    selector = selector_labels(worker)
    _check_selector(template, selector)
    spec: dict[str, Any] = {}
    if worker.autoscaling is None:
        spec["replicas"] = max(worker.replicas, 0)
    elif replicas is not None:
        bounds = worker.autoscaling
        spec["replicas"] = max(min(max(replicas, bounds.min_replicas), bounds.max_replicas), 0)
    return {
        **spec,
        "selector": {"matchLabels": selector},
        "template": template,
        # Surge first: a worker pod is only capacity, never a singleton, so bring the
        # new one up before taking an old one away.
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
        },
        "revisionHistoryLimit": 5,
        "progressDeadlineSeconds": 600,
    }


REPLICAS_SOURCE_ANNOTATION = "twc.temporal.io/replicas-source"
"""On a worker Deployment: ``autoscaling`` or ``spec``, where its replicas come from."""
CONNECTION_ANNOTATION = "twc.temporal.io/connection"
"""On a worker Deployment (not the pod template): the connection it uses, by name."""


def connection_name(connection: ResolvedConnection) -> str:
    """The connection's name in the stack: ``<namespace>/<name>`` for a namespaced
    Connection, ``<name>`` for a ClusterConnection."""
    ident = connection.identity
    return f"{ident.namespace}/{ident.name}" if ident.namespace else ident.name


def worker_service_account(worker: ResolvedWorker, *, stack: str | None = None) -> dict[str, Any]:
    """The worker's ServiceAccount, as the program applies it."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": service_account_metadata(worker, stack=stack),
        "automountServiceAccountToken": worker.service_account.automount_token,
    }


def worker_deployment(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    *,
    replicas: int | None = None,
    options: PodTemplateOptions | None = None,
    connection_name: str | None = None,
    stack: str | None = None,
) -> dict[str, Any]:
    """The worker's Deployment, as the program applies it (one definition for the
    Pulumi component and the daemon's early apply of a new worker).

    Args:
        worker: The resolved worker.
        connection: Its resolved connection.
        fingerprint: The connection fingerprint.
        replicas: An autoscaled worker's count to write; ``None`` leaves it out (see
            :func:`deployment_spec`).
        options: Extra pod template knobs.
        connection_name: The connection's name in the stack, recorded on the Deployment
            (not the pod template: naming it must not roll pods).
        stack: The stack, labelled on the Deployment (not on its pods).

    Returns:
        The whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``).
    """
    spec = deployment_spec(worker, connection, fingerprint, replicas=replicas, options=options)
    spec["template"]["spec"]["serviceAccountName"] = worker.name
    metadata = object_metadata(worker, worker.name, stack=stack)
    metadata["annotations"] = {
        REPLICAS_SOURCE_ANNOTATION: "autoscaling" if worker.autoscaling else "spec",
    }
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
    options: PodTemplateOptions | None = None,
    connection_name: str | None = None,
    stack: str | None = None,
) -> dict[str, Any]:
    """One version's Deployment of a versioned worker: ``<worker>-<buildID>``, selecting
    only its own pods, whose worker container gets ``TEMPORAL_DEPLOYMENT_NAME`` and
    ``TEMPORAL_WORKER_BUILD_ID``.

    Args:
        worker: The worker as it is at this version (for an older version: its
            recorded version spec over the current worker).
        connection: Its resolved connection (the current one, for every version).
        fingerprint: The connection fingerprint.
        build_id: The version's build ID.
        version_spec: The version spec as JSON, recorded on the Deployment.
        policy: The rollout policy as JSON, recorded for previews.
        target: Whether this is the version the spec asks for now.
        replicas: Exactly this many (0 in sunset), else the worker's own count; other
            counts are kept within the autoscaling bounds.
        options: Extra pod template knobs.
        connection_name: The connection's name in the stack.
        stack: The stack, labelled on the Deployment (not on its pods).

    Returns:
        The whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``).
    """
    manifest = worker_deployment(
        worker,
        connection,
        fingerprint,
        replicas=replicas,
        options=options,
        connection_name=connection_name,
        stack=stack,
    )
    spec, metadata = manifest["spec"], manifest["metadata"]
    if replicas == 0:
        # Sunset: zero even below minReplicas.
        spec["replicas"] = 0
    version_labels = {
        rollout.BUILD_ID_LABEL: build_id,
        rollout.DEPLOYMENT_NAME_LABEL: worker.name,
    }
    metadata["name"] = rollout.version_deployment_name(worker.name, build_id)
    metadata["labels"] = {**metadata["labels"], **version_labels}
    metadata["annotations"] = {
        **metadata["annotations"],
        rollout.VERSION_ANNOTATION: version_spec,
        rollout.POLICY_ANNOTATION: policy,
        **({rollout.TARGET_ANNOTATION: "true"} if target else {}),
    }
    spec["selector"]["matchLabels"] = {
        **spec["selector"]["matchLabels"],
        rollout.BUILD_ID_LABEL: build_id,
    }
    template = spec["template"]
    template["metadata"]["labels"] = {**template["metadata"]["labels"], **version_labels}
    container = template["spec"]["containers"][0]
    names = {rollout.ENV_DEPLOYMENT_NAME, rollout.ENV_BUILD_ID}
    container["env"] = [
        {
            "name": rollout.ENV_DEPLOYMENT_NAME,
            "value": rollout.temporal_deployment_name(worker.namespace, worker.name),
        },
        {"name": rollout.ENV_BUILD_ID, "value": build_id},
        *(e for e in container.get("env") or [] if e.get("name") not in names),
    ]
    _check_selector(template, spec["selector"]["matchLabels"])
    return manifest


def dlq_statefulset_spec(
    worker: ResolvedWorker,
    connection: ResolvedConnection,
    fingerprint: str,
    options: PodTemplateOptions | None = None,
) -> dict[str, Any] | None:
    """Build the DLQ processor StatefulSet's ``spec``, or None when DLQ is disabled.

    The StatefulSet is named :func:`dlq_statefulset_name`; ``serviceName`` names a
    headless Service of the same name, which the API requires but nothing dials.
    """
    if worker.dlq is None:
        return None
    template = dlq_pod_template(worker, connection, fingerprint, options)
    selector = selector_labels(worker, COMPONENT_DLQ)
    _check_selector(template, selector)
    return {
        "serviceName": dlq_statefulset_name(worker),
        "replicas": worker.dlq.replicas,
        "selector": {"matchLabels": selector},
        "template": template,
        # Processors are interchangeable; start and stop them together.
        "podManagementPolicy": "Parallel",
        "updateStrategy": {"type": "RollingUpdate"},
        "revisionHistoryLimit": 5,
    }


def pod_disruption_budget_spec(worker: ResolvedWorker) -> dict[str, Any] | None:
    """Build the worker PodDisruptionBudget's ``spec``, or None for a single replica.

    With more than one replica possible, voluntary disruptions (node drains) take one
    pod at a time; with one, a budget would only block drains.
    """
    most = worker.autoscaling.max_replicas if worker.autoscaling else worker.replicas
    if most <= 1:
        return None
    return {
        "maxUnavailable": 1,
        "selector": {"matchLabels": selector_labels(worker)},
        # A crash-looping pod must not block a node drain.
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
