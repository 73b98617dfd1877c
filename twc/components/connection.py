"""``ClusterConnection`` and ``Connection`` components.

A connection component owns:

* ``<name>-fingerprint``: a ``ConnectionFingerprint`` per credential location (one, or
  one per namespace when each namespace holds its own copy of the secret), so a
  changed endpoint or rotated secret shows in the preview as its own step and every
  worker using the connection depends on it;
* ``<name>-secret-<ns>``: for a ClusterConnection with ``secretSource``, a copy of the
  credential secret in every namespace whose workers use it. The data stays a Pulumi
  secret (encrypted in the state, ``[secret]`` in previews).

The credential secret's data is read from the cluster once per run (``SecretReader``),
only to digest it (and to copy it); the digest is plain (a sha256 is not secret
material), so the fingerprint, and with it the pod annotation, is known at preview time
and the preview shows the real old → new fingerprint.
"""

from __future__ import annotations

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

# (namespace, secret name) -> decoded data, or None when the secret does not exist.
SecretReader = Callable[[str, str], Mapping[str, bytes] | None]


@dataclass(frozen=True)
class WorkerConnection:
    """What a worker in one namespace needs from its connection."""

    resolved: ResolvedConnection
    """The connection."""
    fingerprint: str
    """The fingerprint for this namespace's credential copy."""
    secret_keys: frozenset[str] | None
    """Keys present in the credential secret (``ca.crt`` decides the CA env var)."""
    secret_namespace: str | None
    """Where the pods' secret lives (the worker's namespace) or None without one."""
    depends_on: tuple[pulumi.Resource, ...] = field(default=())
    """Resources the worker must wait for (fingerprint, secret copy)."""


@dataclass(frozen=True)
class ConnectionArgs:
    """Inputs of a connection component."""

    resolved: ResolvedConnection
    """The connection, resolved through the provider registry."""
    namespaces: Sequence[str]
    """Namespaces of the workers that use it."""
    source: str
    """Where it is declared in the fleet file, for error messages."""
    secret_source_namespace: str | None = None
    """ClusterConnection ``secretSource.namespace``: copy the secret from there."""
    stack: str | None = None
    """The stack, labelled on the secret copies (``twc.temporal.io/stack``)."""


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
        self._by_namespace: dict[str, WorkerConnection] = {}
        resolved = args.resolved
        child = pulumi.ResourceOptions(parent=self)
        secret = resolved.secret_name
        spec = resolved.spec_document()

        if secret is None:
            fp = resolved.fingerprint(None)
            res = ConnectionFingerprint(f"{name}-fingerprint", spec=spec, opts=child)
            for ns in args.namespaces:
                self._by_namespace[ns] = WorkerConnection(resolved, fp, None, None, (res,))
        elif args.secret_source_namespace:
            src_ns = args.secret_source_namespace
            data = self._read(read_secret, src_ns, secret)
            digest = resolved.secret_digest(data)
            fp = resolved.fingerprint(digest)
            res = ConnectionFingerprint(
                f"{name}-fingerprint", spec=spec, secret_digest=digest, opts=child
            )
            keys = frozenset(data)
            for ns in args.namespaces:
                deps: tuple[pulumi.Resource, ...] = (res,)
                if ns != src_ns:
                    copy = k8s.core.v1.Secret(
                        f"{name}-secret-{ns}",
                        metadata={
                            "name": secret,
                            "namespace": ns,
                            "labels": {
                                "app.kubernetes.io/managed-by": "twc",
                                "twc.temporal.io/connection": resolved.identity.name,
                                **stack_labels(args.stack),
                            },
                            "annotations": {"twc.temporal.io/copied-from": f"{src_ns}/{secret}"},
                        },
                        type="kubernetes.io/tls" if {"tls.crt", "tls.key"} <= keys else "Opaque",
                        data=pulumi.Output.secret(_b64(data)),
                        opts=pulumi.ResourceOptions(
                            parent=self, additional_secret_outputs=["data", "stringData"]
                        ),
                    )
                    deps = (res, copy)
                self._by_namespace[ns] = WorkerConnection(resolved, fp, keys, ns, deps)
        else:
            # Each namespace holds its own copy of the secret: one fingerprint each.
            for ns in args.namespaces:
                data = self._read(read_secret, ns, secret)
                digest = resolved.secret_digest(data)
                res = ConnectionFingerprint(
                    f"{name}-fingerprint-{ns}"
                    if len(args.namespaces) > 1
                    else f"{name}-fingerprint",
                    spec=spec,
                    secret_digest=digest,
                    opts=child,
                )
                self._by_namespace[ns] = WorkerConnection(
                    resolved, resolved.fingerprint(digest), frozenset(data), ns, (res,)
                )
        self.register_outputs(
            {
                "hostPort": resolved.host_port,
                "fingerprints": {ns: wc.fingerprint for ns, wc in self._by_namespace.items()},
            }
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


def _b64(data: Mapping[str, bytes]) -> dict[str, str]:
    import base64

    return {k: base64.b64encode(v).decode() for k, v in sorted(data.items())}
