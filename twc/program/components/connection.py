"""``ClusterConnection`` and ``Connection`` components: a ``ConnectionFingerprint`` per
credential location and, with ``secretSource``, a copy of the secret per namespace."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from providers.fingerprint import ConnectionFingerprint
from twc.builders import stack_labels
from twc.connections import ResolvedConnection
from twc.errors import Reason, TwcConnectionError

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
    secret_source_namespace: str | None = None
    stack: str | None = None


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
        source = args.secret_source_namespace
        child = pulumi.ResourceOptions(parent=self)
        spec = resolved.spec_document()
        self._by_namespace: dict[str, WorkerConnection] = {}
        if secret is None or source:
            # One fingerprint: no secret, or one secret copied from ``source``.
            data = self._read(read_secret, source, secret) if secret and source else None
            digest = resolved.secret_digest(data) if data is not None else None
            fp = ConnectionFingerprint(
                f"{name}-fingerprint", spec=spec, secret_digest=digest, opts=child
            )
            keys = frozenset(data) if data is not None else None
            for ns in args.namespaces:
                deps: tuple[pulumi.Resource, ...] = (fp,)
                if data is not None and ns != source:
                    deps = (fp, self._copy(name, ns, data))
                where = ns if data is not None else None
                self._by_namespace[ns] = WorkerConnection(
                    resolved, resolved.fingerprint(digest), keys, where, deps
                )
        else:
            # Each namespace holds its own copy of the secret: one fingerprint each.
            many = len(args.namespaces) > 1
            for ns in args.namespaces:
                data = self._read(read_secret, ns, secret)
                digest = resolved.secret_digest(data)
                fp_name = f"{name}-fingerprint" + (f"-{ns}" if many else "")
                fp = ConnectionFingerprint(fp_name, spec=spec, secret_digest=digest, opts=child)
                self._by_namespace[ns] = WorkerConnection(
                    resolved, resolved.fingerprint(digest), frozenset(data), ns, (fp,)
                )
        fingerprints = {ns: wc.fingerprint for ns, wc in self._by_namespace.items()}
        self.register_outputs({"hostPort": resolved.host_port, "fingerprints": fingerprints})

    def _copy(self, name: str, ns: str, data: Mapping[str, bytes]) -> k8s.core.v1.Secret:
        """The credential secret copied into ``ns``, its data a Pulumi secret."""
        resolved, source = self._args.resolved, self._args.secret_source_namespace
        secret = resolved.secret_name
        labels = {
            "app.kubernetes.io/managed-by": "twc",
            "twc.temporal.io/connection": resolved.identity.name,
            **stack_labels(self._args.stack),
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
                parent=self, additional_secret_outputs=["data", "stringData"]
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

    def for_namespace(self, namespace: str) -> WorkerConnection:
        """The connection as seen from a worker in ``namespace``."""
        return self._by_namespace[namespace]
