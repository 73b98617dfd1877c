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
    wait_for_pollers_seconds: float = 0
    """How long the TaskQueueCheck waits for a poller."""
    connection_name: str | None = None
    """The connection component's name, recorded on the Deployment for previews."""
    replicas: int | None = None
    """A versioned autoscaled worker's target-version replicas (the autoscaler's, through
    the engine: a version's count is the rollout's). An unversioned worker's replicas
    are never the program's: the daemon scales it."""
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
            # One Deployment per version; the target's is the one the status reads. The
            # versions' replicas are the rollout's (ramps, drains): the engine sets them.
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
            # An autoscaled worker's replicas belong to the daemon (the Deployment's
            # `scale` subresource, under its own field manager): the spec leaves them
            # out, so the server-side apply never claims the field, and `ignore_changes`
            # keeps the engine from diffing it or sending it back (the provider then
            # sends the live value only where it owned the field before). Scaling never
            # runs the engine, and an `up` never undoes a scale.
            manifest = builders.worker_deployment(
                worker,
                conn.resolved,
                conn.fingerprint,
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
                    parent=self,
                    depends_on=[sa, *conn.depends_on, *args.depends_on],
                    ignore_changes=["spec.replicas"] if worker.autoscaling else None,
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
        fixed = spec.get("replicas")
        extra = versioned.outputs if versioned is not None else {}
        self.status = pulumi.Output.all(
            deployment.status,
            check.condition,
            check.pollers,
            check.approximateBacklog,
            deployment.spec,
        ).apply(
            lambda parts: {
                **worker_status(
                    desired=int(fixed) if fixed is not None else _live_replicas(parts[4]),
                    autoscaled=worker.autoscaling is not None and versioned is None,
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


def _live_replicas(spec: Any) -> int:
    # What the Deployment runs with after the apply (the daemon's count, or the API
    # server's default of 1 before the daemon scaled it).
    value = spec.get("replicas") if isinstance(spec, dict) else getattr(spec, "replicas", None)
    return int(value) if value is not None else 1


def _template_hash(template: dict[str, Any]) -> str:
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
