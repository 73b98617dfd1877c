"""The ``TemporalWorker`` component.

Children (named from the component): ``<name>-sa`` ServiceAccount, ``<name>-deployment``
Deployment, ``<name>-pdb`` PodDisruptionBudget when more than one replica is possible,
``<name>-dlq`` StatefulSet (with its headless Service ``<name>-dlq-svc``) when the DLQ
processor is enabled, and ``<name>-check``, a ``TaskQueueCheck`` that runs after the
Deployment is applied. Its outputs are the worker status (phase, replicas, conditions).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from providers.taskqueue import TaskQueueCheck
from twc import builders
from twc.components.connection import WorkerConnection
from twc.components.versions import version_deployments
from twc.rollout import WorkerVersions
from twc.spec import AuthMode, ResolvedWorker
from twc.status import worker_status

TEMPORAL_WORKER_TYPE = "twc:temporal:TemporalWorker"
REPLICAS_SOURCE_ANNOTATION = builders.REPLICAS_SOURCE_ANNOTATION
CONNECTION_ANNOTATION = builders.CONNECTION_ANNOTATION


@dataclass(frozen=True)
class WorkerArgs:
    """Inputs of a worker component."""

    worker: ResolvedWorker
    """The worker, with defaults applied."""
    connection: WorkerConnection
    """Its connection as seen from its namespace."""
    replicas: int | None = None
    """Replicas chosen by the autoscaler (None: the worker's own count)."""
    wait_for_pollers_seconds: float = 0
    """How long the TaskQueueCheck waits for a poller."""
    connection_name: str | None = None
    """The connection component's name, recorded on the Deployment for previews."""
    versions: WorkerVersions | None = None
    """For a worker with ``rollout``: its versions besides the target (from the
    desired state's inputs)."""
    stack: str | None = None
    """The stack, labelled on every object (``twc.temporal.io/stack``)."""
    depends_on: tuple[pulumi.Resource, ...] = ()
    """What the ServiceAccount and Deployment wait for (the stack's ownership check)."""


class TemporalWorkerComponent(pulumi.ComponentResource):
    """One Temporal worker fleet member: its Deployment and everything around it."""

    status: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: WorkerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TEMPORAL_WORKER_TYPE, name, {}, opts)
        worker, conn = args.worker, args.connection
        child = pulumi.ResourceOptions(parent=self)
        options = builders.PodTemplateOptions(secret_keys=conn.secret_keys)

        stack = args.stack
        sa_object = builders.worker_service_account(worker, stack=stack)
        sa = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata=sa_object["metadata"],
            automount_service_account_token=sa_object["automountServiceAccountToken"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        versioned = None
        if worker.rollout is not None:
            # One Deployment per version; the target's is the one the status reads.
            versioned = version_deployments(
                name,
                args,
                options,
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[sa, *conn.depends_on, *args.depends_on]
                ),
            )
            deployment, spec = versioned.target, versioned.target_spec
        else:
            manifest = builders.worker_deployment(
                worker,
                conn.resolved,
                conn.fingerprint,
                replicas=args.replicas,
                options=options,
                connection_name=args.connection_name,
                stack=stack,
            )
            spec, metadata = manifest["spec"], manifest["metadata"]
            deployment = k8s.apps.v1.Deployment(
                f"{name}-deployment",
                metadata=metadata,
                spec=spec,
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[sa, *conn.depends_on, *args.depends_on]
                ),
            )
        pdb_spec = builders.pod_disruption_budget_spec(worker)
        if pdb_spec is not None:
            k8s.policy.v1.PodDisruptionBudget(
                f"{name}-pdb",
                metadata=builders.object_metadata(worker, worker.name, stack=stack),
                spec=pdb_spec,
                opts=child,
            )
        dlq_spec = builders.dlq_statefulset_spec(worker, conn.resolved, conn.fingerprint, options)
        if dlq_spec is not None:
            dlq_name = builders.dlq_statefulset_name(worker)
            dlq_meta = builders.object_metadata(
                worker, dlq_name, builders.COMPONENT_DLQ, stack=stack
            )
            svc = k8s.core.v1.Service(
                f"{name}-dlq-svc",
                metadata=dlq_meta,
                spec={
                    "clusterIP": "None",
                    "selector": dlq_spec["selector"]["matchLabels"],
                    "ports": [{"name": "none", "port": 80}],
                },
                opts=child,
            )
            dlq_spec["template"]["spec"]["serviceAccountName"] = worker.name
            k8s.apps.v1.StatefulSet(
                f"{name}-dlq",
                metadata=dlq_meta,
                spec=dlq_spec,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[sa, svc, *conn.depends_on]),
            )

        resolved = conn.resolved
        check = TaskQueueCheck(
            f"{name}-check",
            address=resolved.host_port,
            namespace=worker.temporal_namespace,
            task_queue=worker.task_queue_name,
            tls=resolved.tls.enabled,
            server_name=resolved.tls.server_name,
            auth_mode=str(resolved.auth_mode),
            secret_ref=(
                {"namespace": conn.secret_namespace, "name": resolved.secret_name}
                if conn.secret_namespace and resolved.secret_name
                else None
            ),
            api_key_key=(
                resolved.api_key_secret.key
                if resolved.auth_mode is AuthMode.API_KEY and resolved.api_key_secret
                else None
            ),
            # Re-check whenever the pods change (image, env, connection fingerprint...).
            trigger=_template_hash(spec["template"]),
            wait_for_pollers_seconds=args.wait_for_pollers_seconds,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=versioned.all if versioned else [deployment]
            ),
        )
        desired = int(spec["replicas"])
        extra = versioned.outputs if versioned is not None else {}
        self.status = pulumi.Output.all(
            deployment.status, check.condition, check.pollers, check.approximateBacklog
        ).apply(
            lambda parts: {
                **worker_status(
                    desired=desired,
                    deployment_status=parts[0],
                    queue_condition=parts[1],
                    pollers=parts[2],
                    backlog=parts[3],
                    task_queue=worker.task_queue_name,
                ),
                **extra,
            }
        )
        self.register_outputs({"status": self.status})


def _template_hash(template: dict[str, Any]) -> str:
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
