"""twc's Pulumi components.

``ClusterConnection`` and ``Connection``: a ``ConnectionFingerprint`` per credential location and,
with ``secretSource``, a copy of the secret per namespace. The kmsvc ``Queue``: the ``Queue`` object
(``createObject``) and its derived worker. The ``TemporalWorker``: ServiceAccount, Deployment(s),
PDB, DLQ processor and a ``TaskQueueCheck``; output ``status``: phase, replicas, conditions."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from providers.fingerprint import ConnectionFingerprint
from providers.taskqueue import TaskQueueCheck
from twc import builders, rollout
from twc.connections import PodSpecOptions, ResolvedConnection
from twc.errors import Reason, TwcConnectionError
from twc.rollout import WorkerVersions
from twc.rollout._spec import build_id_of, policy_of, version_spec, with_version_spec
from twc.spec import (
    QUEUE_API_VERSION,
    QUEUE_KIND,
    WORKER_ENABLED_LABEL,
    Queue,
    ResolvedWorker,
)
from twc.status import worker_status

CLUSTER_CONNECTION_TYPE = "twc:temporal:ClusterConnection"
CONNECTION_TYPE = "twc:temporal:Connection"

SecretReader = Callable[[str, str], Mapping[str, bytes] | None]
"""(namespace, secret name) -> decoded data, or None when the secret does not exist."""


@dataclass(frozen=True)
class WorkerConnection:
    """What a worker in one namespace needs from its connection."""

    resolved: ResolvedConnection
    fingerprint: str
    secret_keys: frozenset[str] | None
    secret_namespace: str | None
    depends_on: tuple[pulumi.Resource, ...] = field(default=())


@dataclass(frozen=True)
class ConnectionArgs:
    """Inputs of a connection component."""

    resolved: ResolvedConnection
    namespaces: Sequence[str]
    source: str
    stack: str | None = None
    depends_on: tuple[pulumi.Resource, ...] = ()
    """What the secret copies wait for (the stack's ownership check)."""


class ConnectionComponent(pulumi.ComponentResource):
    """A Temporal connection (cluster-scoped or namespaced)."""

    def __init__(
        self,
        name: str,
        args: ConnectionArgs,
        read_secret: SecretReader,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        token = CONNECTION_TYPE if args.resolved.identity.namespace else CLUSTER_CONNECTION_TYPE
        super().__init__(token, name, {}, opts)
        self._args = args
        resolved, secret = args.resolved, args.resolved.secret_name
        source = resolved.secret_source_namespace
        child = pulumi.ResourceOptions(parent=self)
        spec = resolved.spec_document()
        twc_secret = resolved.twc.secret_name if resolved.twc else None
        self.by_namespace: dict[str, WorkerConnection] = {}
        """The connection as seen from a worker in each namespace."""
        # The secret is read where it lives: in ``source`` (copied from there into every
        # other namespace), else in each namespace; one fingerprint per place it is read.
        places = {ns: (source or ns) if secret else None for ns in args.namespaces}
        for at in dict.fromkeys(places.values()):
            data = self._read(read_secret, at, secret) if at and secret else None
            digest = resolved.secret_digest(data) if data is not None else None
            own = at is not None and not source and len(args.namespaces) > 1
            fp_name = f"{name}-fingerprint" + (f"-{at}" if own else "")
            fp = ConnectionFingerprint(
                fp_name, spec=spec, secret_digest=digest, twc_credential=twc_secret, opts=child
            )
            keys = frozenset(data) if data is not None else None
            for ns in [n for n, place in places.items() if place == at]:
                deps: tuple[pulumi.Resource, ...] = (fp,)
                if data is not None and source and ns != source:
                    deps = (fp, self._copy(name, ns, data))
                self.by_namespace[ns] = WorkerConnection(
                    resolved, resolved.fingerprint(digest), keys, ns if at else None, deps
                )
        fingerprints = {ns: wc.fingerprint for ns, wc in self.by_namespace.items()}
        self.register_outputs({"hostPort": resolved.host_port, "fingerprints": fingerprints})

    def _copy(self, name: str, ns: str, data: Mapping[str, bytes]) -> k8s.core.v1.Secret:
        """The credential secret copied into ``ns``, its data a Pulumi secret."""
        resolved = self._args.resolved
        source, secret = resolved.secret_source_namespace, resolved.secret_name
        labels = {
            "app.kubernetes.io/managed-by": "twc",
            "twc.temporal.io/connection": resolved.identity.name,
            **builders.stack_labels(self._args.stack),
        }
        encoded = {k: base64.b64encode(v).decode() for k, v in sorted(data.items())}
        return k8s.core.v1.Secret(
            f"{name}-secret-{ns}",
            metadata={
                "name": secret,
                "namespace": ns,
                "labels": labels,
                "annotations": {"twc.temporal.io/copied-from": f"{source}/{secret}"},
            },
            type="kubernetes.io/tls" if {"tls.crt", "tls.key"} <= set(data) else "Opaque",
            data=pulumi.Output.secret(encoded),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(self._args.depends_on),
                additional_secret_outputs=["data", "stringData"],
            ),
        )

    def _read(self, read_secret: SecretReader, namespace: str, secret: str) -> Mapping[str, bytes]:
        data = read_secret(namespace, secret)
        where = f"{self._args.source}: secret {namespace}/{secret}"
        if data is None:
            raise TwcConnectionError(Reason.AUTH_SECRET_INVALID, f"{where} not found")
        missing = [k for k in self._args.resolved.secret_keys if k not in data and k != "ca.crt"]
        if missing:
            raise TwcConnectionError(
                Reason.AUTH_SECRET_INVALID, f"{where} lacks key(s) {', '.join(missing)}"
            )
        return data


QUEUE_TYPE = "twc:kmsvc:Queue"


class QueueComponent(pulumi.ComponentResource):
    """One kmsvc queue."""

    def __init__(
        self,
        name: str,
        queue: Queue,
        opts: pulumi.ResourceOptions | None = None,
        *,
        stack: str | None = None,
        depends_on: tuple[pulumi.Resource, ...] = (),
    ) -> None:
        super().__init__(QUEUE_TYPE, name, {}, opts)
        if queue.create_object:
            labels = {**dict(queue.labels), **builders.stack_labels(stack)}
            if queue.worker_enabled:
                labels[WORKER_ENABLED_LABEL] = "true"
            spec: dict[str, object] = {"fifo": queue.fifo}
            if queue.partitions is not None:
                spec["partitions"] = queue.partitions
            k8s.apiextensions.CustomResource(
                f"{name}-queue",
                api_version=QUEUE_API_VERSION,
                kind=QUEUE_KIND,
                metadata={"name": queue.name, "namespace": queue.namespace, "labels": labels},
                spec=spec,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
            )
        self.register_outputs({"name": queue.name, "namespace": queue.namespace})


TEMPORAL_WORKER_TYPE = "twc:temporal:TemporalWorker"

_Built = tuple[list[pulumi.Resource], k8s.apps.v1.Deployment, dict[str, Any], dict[str, Any]]
"""Every Deployment, the one the status reads, its spec, and what the status adds."""


@dataclass(frozen=True)
class WorkerArgs:
    """Inputs of a worker component (the worker has its defaults applied)."""

    worker: ResolvedWorker
    connection: WorkerConnection
    wait_for_pollers_seconds: float = 0
    connection_name: str | None = None
    replicas: int | None = None
    versions: WorkerVersions | None = None
    stack: str | None = None
    depends_on: tuple[pulumi.Resource, ...] = ()


class TemporalWorkerComponent(pulumi.ComponentResource):
    """One Temporal worker fleet member: its Deployment and everything around it."""

    status: pulumi.Output[dict[str, Any]]

    def __init__(
        self, name: str, args: WorkerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TEMPORAL_WORKER_TYPE, name, {}, opts)
        worker, conn, stack = args.worker, args.connection, args.stack
        self._name, self._args = name, args
        self._options = PodSpecOptions(secret_keys=conn.secret_keys)
        sa_object = builders.worker_service_account(worker, stack=stack)
        sa = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata=sa_object["metadata"],
            automount_service_account_token=sa_object["automountServiceAccountToken"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        after_sa = [sa, *conn.depends_on, *args.depends_on]
        build = self._deployment if worker.rollout is None else self._versions
        made, deployment, spec, extra = build(after_sa)
        pdb_spec = builders.pod_disruption_budget_spec(worker)
        if pdb_spec is not None:
            k8s.policy.v1.PodDisruptionBudget(
                f"{name}-pdb",
                metadata=builders.object_metadata(worker, worker.name, stack=stack),
                spec=pdb_spec,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self._dlq(sa)
        check = self._check(spec["template"], made)
        fixed = spec.get("replicas")
        autoscaled = worker.autoscaling is not None and worker.rollout is None
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
                    autoscaled=autoscaled,
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

    def _deployment(self, depends_on: list[pulumi.Resource]) -> _Built:
        """An unversioned worker's Deployment; an autoscaled one's replicas are the daemon's."""
        name, args, options = self._name, self._args, self._options
        worker, conn = args.worker, args.connection
        manifest = builders.worker_deployment(
            worker,
            conn.resolved,
            conn.fingerprint,
            options=options,
            connection_name=args.connection_name,
            stack=args.stack,
        )
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=manifest["metadata"],
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=depends_on,
                ignore_changes=["spec.replicas"] if worker.autoscaling else None,
            ),
        )
        return [deployment], deployment, manifest["spec"], {}

    def _versions(self, depends_on: list[pulumi.Resource]) -> _Built:
        """A versioned worker's Deployments: the target, and each other version from its spec."""
        name, args, options = self._name, self._args, self._options
        worker, conn = args.worker, args.connection
        policy = policy_of(worker)
        assert policy is not None, "only versioned workers have versions"
        target = build_id_of(worker)
        given = dict(args.versions.versions) if args.versions is not None else {}
        given.setdefault(target, rollout.VersionInput())
        autoscaled = worker.autoscaling is not None
        made: dict[str, tuple[k8s.apps.v1.Deployment, dict[str, Any]]] = {}
        for build, version in sorted(given.items()):
            at_version, spec_json = worker, _canonical(version_spec(worker))
            if build != target:
                if version.spec is None:
                    raise ValueError(
                        f"{worker.stack_key}: version {build} has no version spec on its "
                        f"Deployment (annotation {rollout.VERSION_ANNOTATION}); cannot rebuild it"
                    )
                at_version = with_version_spec(worker, dict(version.spec))
                spec_json = _canonical(version.spec)
            count = version.replicas if autoscaled or version.replicas == 0 else None
            if build == target and count is None and autoscaled:
                count = args.replicas
            manifest = builders.versioned_deployment(
                at_version,
                conn.resolved,
                conn.fingerprint,
                build_id=build,
                version_spec=spec_json,
                policy=_canonical(policy.to_json()),
                target=build == target,
                replicas=count,
                options=options,
                connection_name=args.connection_name,
                stack=args.stack,
            )
            resource = k8s.apps.v1.Deployment(
                f"{name}-version-{build}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
            )
            made[build] = (resource, manifest)
            for entry, obj in builders.version_resources(
                worker, manifest, stack=args.stack
            ).items():
                k8s.apiextensions.CustomResource(
                    f"{name}-version-{build}-{entry}",
                    api_version=obj["apiVersion"],
                    kind=obj["kind"],
                    metadata=obj["metadata"],
                    spec=obj["spec"],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[resource]),
                )
        outputs: dict[str, Any] = {
            "targetBuildID": target,
            "versions": {
                build: {"deployment": m["metadata"]["name"], "replicas": m["spec"].get("replicas")}
                for build, (_, m) in sorted(made.items())
            },
        }
        if args.versions is not None and args.versions.status is not None:
            outputs["rollout"] = dict(args.versions.status)
        deployment, manifest = made[target]
        return [r for r, _ in made.values()], deployment, manifest["spec"], outputs

    def _dlq(self, sa: pulumi.Resource) -> None:
        """The DLQ processor's StatefulSet and headless Service, when it is enabled."""
        name, args, options = self._name, self._args, self._options
        worker, conn = args.worker, args.connection
        spec = builders.dlq_statefulset_spec(worker, conn.resolved, conn.fingerprint, options)
        if spec is None:
            return
        dlq_name = builders.dlq_statefulset_name(worker)
        meta = builders.object_metadata(worker, dlq_name, builders.COMPONENT_DLQ, stack=args.stack)
        svc = k8s.core.v1.Service(
            f"{name}-dlq-svc",
            metadata=meta,
            spec={
                "clusterIP": "None",
                "selector": spec["selector"]["matchLabels"],
                "ports": [{"name": "none", "port": 80}],
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        k8s.apps.v1.StatefulSet(
            f"{name}-dlq",
            metadata=meta,
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[sa, svc, *conn.depends_on]),
        )

    def _check(self, template: dict[str, Any], after: list[pulumi.Resource]) -> TaskQueueCheck:
        """The task queue check, run again whenever the pods change."""
        name, args = self._name, self._args
        worker, conn = args.worker, args.connection
        resolved = conn.resolved.for_twc()  # twc's own credential, where it has one
        at = conn.secret_namespace
        if resolved is not conn.resolved:  # read where the workers' original is, never copied
            at = resolved.secret_source_namespace or worker.namespace
        secret = at and resolved.secret_name
        inputs = {
            "address": resolved.host_port,
            "namespace": worker.temporal_namespace,
            "taskQueue": worker.task_queue_name,
            "tls": resolved.tls.enabled,
            "serverName": resolved.tls.server_name,
            "authMode": str(resolved.auth_mode),
            "secretRef": {"namespace": at, "name": secret} if secret else None,
            "apiKeyKey": resolved.api_key_secret.key if resolved.api_key_secret else None,
            "trigger": hashlib.sha256(_canonical(template).encode()).hexdigest()[:16],
            "waitForPollersSeconds": args.wait_for_pollers_seconds,
        }
        opts = pulumi.ResourceOptions(parent=self, depends_on=after)
        return TaskQueueCheck(f"{name}-check", inputs, opts)


def _live_replicas(spec: Any) -> int:
    # The daemon's count, or the API server's default of 1 before the daemon scaled it.
    value = spec.get("replicas") if isinstance(spec, dict) else getattr(spec, "replicas", None)
    return int(value) if value is not None else 1


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
