"""``ResolvedConnection``: one Temporal connection, ready to use.

Everything here is pure except :meth:`ResolvedConnection.client`, which opens (and
caches) a temporalio client; temporalio is imported only inside that call, so loading a
fleet or rendering pod templates never pays for it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from twc.errors import Reason, TwcConnectionError
from twc.spec import AuthMode, split_host_port

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = [
    "CA_CERT_KEY",
    "CONNECTION_ENV_NAMES",
    "CONNECTION_SPEC_HASH_ANNOTATION",
    "DEFAULT_TLS_MOUNT_PATH",
    "TLS_CERT_KEY",
    "TLS_KEY_KEY",
    "TLS_VOLUME_NAME",
    "ConnectOptions",
    "ConnectionIdentity",
    "PodSpecOptions",
    "ResolvedConnection",
    "SecretKeySelector",
    "TLSSettings",
    "decode_secret_data",
    "fingerprint_of",
    "secret_data_digest",
]

CONNECTION_SPEC_HASH_ANNOTATION: Final = "temporal.io/connection-spec-hash"
"""Pod annotation carrying the connection fingerprint; a change rolls the pods."""
TLS_CERT_KEY: Final = "tls.crt"
"""Client certificate key of a kubernetes.io/tls secret."""
TLS_KEY_KEY: Final = "tls.key"
"""Client private key key of a kubernetes.io/tls secret."""
CA_CERT_KEY: Final = "ca.crt"
"""Optional server CA key of a kubernetes.io/tls secret."""
TLS_VOLUME_NAME: Final = "temporal-tls"
"""Name of the pod volume holding the mTLS secret."""
DEFAULT_TLS_MOUNT_PATH: Final = "/etc/temporal/tls"
"""Where the mTLS secret is mounted in worker containers."""

# Environment names read by temporalio.envconfig (checked against the SDK's loader),
# plus TEMPORAL_FRONTEND_ADDRESS, which twc adds for tools that do not read envconfig.
ENV_ADDRESS: Final = "TEMPORAL_ADDRESS"
ENV_FRONTEND_ADDRESS: Final = "TEMPORAL_FRONTEND_ADDRESS"
ENV_TLS: Final = "TEMPORAL_TLS"
ENV_TLS_CLIENT_CERT_PATH: Final = "TEMPORAL_TLS_CLIENT_CERT_PATH"
ENV_TLS_CLIENT_KEY_PATH: Final = "TEMPORAL_TLS_CLIENT_KEY_PATH"
ENV_TLS_SERVER_CA_CERT_PATH: Final = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
ENV_TLS_SERVER_NAME: Final = "TEMPORAL_TLS_SERVER_NAME"
ENV_API_KEY: Final = "TEMPORAL_API_KEY"
CONNECTION_ENV_NAMES: Final = frozenset(
    {
        ENV_ADDRESS,
        ENV_FRONTEND_ADDRESS,
        ENV_TLS,
        ENV_TLS_CLIENT_CERT_PATH,
        ENV_TLS_CLIENT_KEY_PATH,
        ENV_TLS_SERVER_CA_CERT_PATH,
        ENV_TLS_SERVER_NAME,
        ENV_API_KEY,
    }
)
"""Every environment variable :meth:`ResolvedConnection.apply_pod_spec` manages."""

# A string, not a number: spec documents travel through Pulumi, whose wire format turns
# integers into floats, and the fingerprint must not depend on that.
_FINGERPRINT_VERSION = "1"


@dataclass(frozen=True)
class ConnectionIdentity:
    """Who a connection is. A namespaced ``foo`` and a cluster-scoped ``foo`` differ."""

    api_group: str
    """API group of the kind, e.g. ``temporal.io``."""
    kind: str
    """Kind, e.g. ``Connection`` or ``ClusterConnection``."""
    name: str
    """Object name."""
    namespace: str | None
    """Namespace for namespaced kinds; None for cluster-scoped ones."""

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind}.{self.api_group} {where}"


@dataclass(frozen=True)
class SecretKeySelector:
    """One key of a Secret."""

    name: str
    """Secret name."""
    key: str
    """Key in the Secret's data."""


@dataclass(frozen=True)
class TLSSettings:
    """TLS towards the frontend."""

    enabled: bool
    """Whether the client uses TLS."""
    server_name: str | None = None
    """SNI / verification name override."""


@dataclass(frozen=True)
class PodSpecOptions:
    """How :meth:`ResolvedConnection.apply_pod_spec` renders the connection.

    Exactly one of ``fingerprint`` and ``secret_digest`` is normally given: pass the
    output of a ``ConnectionFingerprint`` resource as ``fingerprint``, or the secret's
    digest and let the connection compute it.
    """

    fingerprint: str | None = None
    """Precomputed :meth:`ResolvedConnection.fingerprint`."""
    secret_digest: str | None = None
    """:func:`secret_data_digest` of the credential secret, when ``fingerprint`` is
    not given."""
    secret_keys: frozenset[str] | None = None
    """Keys known to exist in the credential secret; ``ca.crt`` among them makes the
    pod trust that CA. None means unknown (system roots are used)."""
    tls_mount_path: str = DEFAULT_TLS_MOUNT_PATH
    """Mount path of the mTLS secret."""
    containers: frozenset[str] | None = None
    """Names of the containers that talk to Temporal (the worker container): they get
    the full connection env and the mTLS mount. None: every container. A user's sidecar
    is left as written."""
    init_containers: frozenset[str] | None = None
    """Names of the init containers that get the frontend address (twc's wait
    container). None: every init container."""


@dataclass(frozen=True)
class ConnectOptions:
    """Everything ``temporalio.client.Client.connect`` needs, without temporalio types.

    Holds secret material: never log or persist it.
    """

    target_host: str
    """``host:port``."""
    namespace: str
    """Temporal namespace."""
    tls: bool
    """Whether to use TLS."""
    server_name: str | None = None
    """TLS domain override."""
    server_root_ca_cert: bytes | None = field(default=None, repr=False)
    """Server CA (PEM)."""
    client_cert: bytes | None = field(default=None, repr=False)
    """Client certificate (PEM)."""
    client_private_key: bytes | None = field(default=None, repr=False)
    """Client key (PEM)."""
    api_key: str | None = field(default=None, repr=False)
    """API key."""


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def secret_data_digest(data: Mapping[str, bytes | str]) -> str:
    """Return a stable sha256 digest of a secret's data.

    Values are taken as raw bytes (``str`` is encoded as UTF-8, i.e. ``stringData``
    form; decode a Secret's base64 ``data`` with :func:`decode_secret_data` first).
    Keys and values are length-prefixed so no two different secrets collide by
    concatenation. The digest reveals nothing useful about the data.

    Args:
        data: Key to value.

    Returns:
        64 hex digits.
    """
    digest = hashlib.sha256(b"twc-secret-data-v1\0")
    for key in sorted(data):
        key_bytes = key.encode("utf-8")
        value = _as_bytes(data[key])
        digest.update(len(key_bytes).to_bytes(8, "big") + key_bytes)
        digest.update(len(value).to_bytes(8, "big") + value)
    return digest.hexdigest()


def _canonical(value: object) -> object:
    """Normalise a JSON-like value so equal specs hash equally after any round trip.

    Drops None and empty mappings (Pulumi may omit them) and turns integral floats
    back into ints (Pulumi's wire format has only doubles).
    """
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            normalised = _canonical(item)
            if normalised is None or (isinstance(normalised, dict) and not normalised):
                continue
            out[str(key)] = normalised
        return out
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def fingerprint_of(spec_document: Mapping[str, Any], secret_digest: str | None) -> str:
    """Fingerprint a connection from its spec document and its secret's digest.

    A sha256 over canonical JSON (sorted keys, no whitespace, None/empty values
    dropped): stable across dict order, processes and a trip through Pulumi's state;
    changed by any change of host/port, TLS server name, auth mode, secret name or
    secret data. It never contains secret material, only a digest of it.

    Args:
        spec_document: :meth:`ResolvedConnection.spec_document`.
        secret_digest: :func:`secret_data_digest` of the credential secret, or None.

    Returns:
        64 hex digits.
    """
    document = {"spec": _canonical(spec_document), "secretDigest": secret_digest or None}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def decode_secret_data(data: Mapping[str, str]) -> dict[str, bytes]:
    """Decode a Kubernetes Secret's base64 ``data`` map.

    Raises:
        TwcConnectionError: ``AuthSecretInvalid`` if a value is not base64.
    """
    out: dict[str, bytes] = {}
    for key, value in data.items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise TwcConnectionError(
                Reason.AUTH_SECRET_INVALID, f"secret key {key!r} is not valid base64"
            ) from None
    return out


@dataclass(frozen=True)
class ResolvedConnection:
    """A connection with its spec resolved: what a provider returns.

    Providers of new kinds build one of these; everything downstream (pod templates,
    fingerprints, clients) works from it alone.
    """

    identity: ConnectionIdentity
    """Who the connection is."""
    host_port: str
    """Frontend ``host:port``."""
    tls: TLSSettings
    """TLS settings."""
    auth_mode: AuthMode = AuthMode.NONE
    """How the client authenticates."""
    mtls_secret_name: str | None = None
    """kubernetes.io/tls secret for mTLS (``tls.crt``, ``tls.key``, optional ``ca.crt``)."""
    api_key_secret: SecretKeySelector | None = None
    """Secret key holding the API key."""
    secret_source_namespace: str | None = None
    """Namespace to copy the credential secret from, if twc should copy it."""
    extra: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Provider-specific non-secret settings; part of the fingerprint (not of the hash,
    so a connection can still key a dict)."""

    def __post_init__(self) -> None:
        # Keep the invariants providers might otherwise break: one auth mode, with
        # exactly the secret it needs, and TLS whenever credentials are sent.
        split_host_port(self.host_port)
        expected = {
            AuthMode.NONE: (False, False),
            AuthMode.MTLS: (True, False),
            AuthMode.API_KEY: (False, True),
        }[self.auth_mode]
        actual = (self.mtls_secret_name is not None, self.api_key_secret is not None)
        if actual != expected:
            raise ValueError(f"auth mode {self.auth_mode} does not match the secret references")
        if self.auth_mode is not AuthMode.NONE and not self.tls.enabled:
            raise ValueError("credentials require TLS")

    @property
    def host(self) -> str:
        """Frontend host (without IPv6 brackets)."""
        return split_host_port(self.host_port)[0]

    @property
    def port(self) -> int:
        """Frontend port."""
        return split_host_port(self.host_port)[1]

    @property
    def secret_name(self) -> str | None:
        """Name of the credential secret, if any."""
        if self.mtls_secret_name is not None:
            return self.mtls_secret_name
        if self.api_key_secret is not None:
            return self.api_key_secret.name
        return None

    @property
    def secret_keys(self) -> tuple[str, ...]:
        """Keys of the credential secret this connection reads."""
        if self.auth_mode is AuthMode.MTLS:
            return (TLS_CERT_KEY, TLS_KEY_KEY, CA_CERT_KEY)
        if self.api_key_secret is not None:
            return (self.api_key_secret.key,)
        return ()

    def spec_document(self) -> dict[str, Any]:
        """The non-secret connection spec, as a JSON-able dict of strings and booleans.

        This is what :func:`fingerprint_of` hashes; it is safe to show in previews and
        to store in state. Unset values are omitted.
        """
        document: dict[str, Any] = {
            "version": _FINGERPRINT_VERSION,
            "hostPort": self.host_port,
            "tls": {"enabled": self.tls.enabled, "serverName": self.tls.server_name},
            "authMode": str(self.auth_mode),
        }
        if self.mtls_secret_name is not None:
            document["mutualTLSSecretRef"] = {"name": self.mtls_secret_name}
        if self.api_key_secret is not None:
            document["apiKeySecretRef"] = {
                "name": self.api_key_secret.name,
                "key": self.api_key_secret.key,
            }
        if self.extra:
            document["extra"] = dict(self.extra)
        canonical = _canonical(document)
        assert isinstance(canonical, dict)
        return canonical

    def secret_digest(self, data: Mapping[str, bytes | str]) -> str:
        """Digest of the keys of ``data`` this connection reads (others are ignored,
        so unrelated edits to a shared secret do not roll workers)."""
        wanted = set(self.secret_keys)
        return secret_data_digest({k: v for k, v in data.items() if k in wanted})

    def fingerprint(self, secret_digest: str | None = None) -> str:
        """Return the connection fingerprint: :func:`fingerprint_of` of
        :meth:`spec_document` and ``secret_digest``.

        Args:
            secret_digest: :meth:`secret_digest` of the credential secret; None when
                there is no secret (or it is unknown).

        Returns:
            64 hex digits.
        """
        return fingerprint_of(self.spec_document(), secret_digest)

    def apply_pod_spec(
        self, pod_template: Mapping[str, Any], opts: PodSpecOptions
    ) -> dict[str, Any]:
        """Render this connection into a pod template (a PodTemplateSpec dict).

        Sets, on every container (or those ``opts.containers`` names), the frontend
        address and TLS/API-key environment; on init containers (or those
        ``opts.init_containers`` names) only the address (they just wait for the
        frontend); adds
        the mTLS secret volume and mounts; and writes the fingerprint annotation, so
        settings and annotation always come from the same call. Settings a previous
        call wrote are replaced, so re-applying (even another connection) is safe.

        Args:
            pod_template: ``{"metadata": ..., "spec": ...}``; not modified.
            opts: Rendering options.

        Returns:
            A new pod template.
        """
        template: dict[str, Any] = copy.deepcopy(dict(pod_template))
        fingerprint = opts.fingerprint or self.fingerprint(opts.secret_digest)
        metadata = template.setdefault("metadata", {})
        metadata.setdefault("annotations", {})[CONNECTION_SPEC_HASH_ANNOTATION] = fingerprint

        spec = template.setdefault("spec", {})
        address_env = [
            {"name": ENV_ADDRESS, "value": self.host_port},
            {"name": ENV_FRONTEND_ADDRESS, "value": self.host_port},
        ]
        for container in spec.get("initContainers") or []:
            if opts.init_containers is None or container.get("name") in opts.init_containers:
                _set_env(container, address_env)
        full_env = address_env + self._credential_env(opts)
        mount = {"name": TLS_VOLUME_NAME, "mountPath": opts.tls_mount_path, "readOnly": True}
        for container in spec.get("containers") or []:
            if opts.containers is not None and container.get("name") not in opts.containers:
                continue
            _set_env(container, full_env)
            mounts = [
                m for m in container.get("volumeMounts") or [] if m.get("name") != TLS_VOLUME_NAME
            ]
            if self.mtls_secret_name is not None:
                mounts.append(dict(mount))
            _set_or_drop(container, "volumeMounts", mounts)

        volumes = [v for v in spec.get("volumes") or [] if v.get("name") != TLS_VOLUME_NAME]
        if self.mtls_secret_name is not None:
            volumes.append(
                {"name": TLS_VOLUME_NAME, "secret": {"secretName": self.mtls_secret_name}}
            )
        _set_or_drop(spec, "volumes", volumes)
        return template

    def _credential_env(self, opts: PodSpecOptions) -> list[dict[str, Any]]:
        env: list[dict[str, Any]] = []
        if self.tls.enabled:
            env.append({"name": ENV_TLS, "value": "true"})
        if self.mtls_secret_name is not None:
            base = opts.tls_mount_path.rstrip("/")
            env.append({"name": ENV_TLS_CLIENT_CERT_PATH, "value": f"{base}/{TLS_CERT_KEY}"})
            env.append({"name": ENV_TLS_CLIENT_KEY_PATH, "value": f"{base}/{TLS_KEY_KEY}"})
            if opts.secret_keys is not None and CA_CERT_KEY in opts.secret_keys:
                env.append({"name": ENV_TLS_SERVER_CA_CERT_PATH, "value": f"{base}/{CA_CERT_KEY}"})
        if self.tls.enabled and self.tls.server_name:
            env.append({"name": ENV_TLS_SERVER_NAME, "value": self.tls.server_name})
        if self.api_key_secret is not None:
            env.append(
                {
                    "name": ENV_API_KEY,
                    "valueFrom": {
                        "secretKeyRef": {
                            "name": self.api_key_secret.name,
                            "key": self.api_key_secret.key,
                        }
                    },
                }
            )
        return env

    def connect_options(
        self, namespace: str, secret_data: Mapping[str, bytes | str] | None = None
    ) -> ConnectOptions:
        """Build client connect options from this connection and its secret's data.

        Args:
            namespace: Temporal namespace.
            secret_data: The credential secret's decoded data (see
                :func:`decode_secret_data`); required unless auth mode is ``none``.

        Returns:
            The options.

        Raises:
            TwcConnectionError: ``AuthSecretInvalid`` if required keys are missing or
                hold no PEM data.
        """
        options = ConnectOptions(
            target_host=self.host_port,
            namespace=namespace,
            tls=self.tls.enabled,
            server_name=self.tls.server_name,
        )
        if self.auth_mode is AuthMode.NONE:
            return options
        where = f"secret {self.secret_name!r} of {self.identity}"
        if secret_data is None:
            raise TwcConnectionError(Reason.AUTH_SECRET_INVALID, f"{where}: no secret data given")
        if self.auth_mode is AuthMode.API_KEY:
            assert self.api_key_secret is not None  # guaranteed by __post_init__
            raw = secret_data.get(self.api_key_secret.key)
            api_key = _as_bytes(raw).decode("utf-8", "replace").strip() if raw is not None else ""
            if not api_key:
                raise TwcConnectionError(
                    Reason.AUTH_SECRET_INVALID,
                    f"{where}: key {self.api_key_secret.key!r} is missing or empty",
                )
            return replace(options, api_key=api_key)
        cert = _pem(secret_data, TLS_CERT_KEY, "CERTIFICATE", where, required=True)
        key = _pem(secret_data, TLS_KEY_KEY, "PRIVATE KEY", where, required=True)
        ca = _pem(secret_data, CA_CERT_KEY, "CERTIFICATE", where, required=False)
        return replace(options, client_cert=cert, client_private_key=key, server_root_ca_cert=ca)

    async def client(
        self,
        namespace: str,
        secret_data: Mapping[str, bytes | str] | None = None,
        *,
        connect_timeout: float = 10.0,
    ) -> Client:
        """Return a connected temporalio client, cached per event loop.

        The cache key is the fingerprint (including the secret's digest) and the
        namespace, so a rotated secret yields a fresh client (and drops the old one)
        while repeated calls share one connection.

        Args:
            namespace: Temporal namespace.
            secret_data: Decoded credential secret data, if the connection has one.
            connect_timeout: Seconds to wait for the frontend.

        Returns:
            The client.

        Raises:
            TwcConnectionError: ``AuthSecretInvalid`` for unusable credentials,
                ``TemporalClientCreationFailed`` when the frontend cannot be reached.
        """
        from twc.connections._client import cached_client

        options = self.connect_options(namespace, secret_data)
        digest = self.secret_digest(secret_data) if secret_data is not None else None
        return await cached_client(
            (self.fingerprint(digest), namespace),
            options,
            self.auth_mode,
            connect_timeout,
            slot=(self.identity, namespace),  # a rotated credential drops the older client
        )


def _pem(
    data: Mapping[str, bytes | str], key: str, label: str, where: str, *, required: bool
) -> bytes | None:
    raw = data.get(key)
    if raw is None or not _as_bytes(raw).strip():
        if required:
            raise TwcConnectionError(Reason.AUTH_SECRET_INVALID, f"{where}: key {key!r} is missing")
        return None
    value = _as_bytes(raw)
    # A cheap structural check that turns the SDK's opaque parse error into a message
    # naming the key; the TLS stack still does the real validation.
    if b"-----BEGIN " not in value or f"{label}-----".encode() not in value:
        raise TwcConnectionError(
            Reason.AUTH_SECRET_INVALID, f"{where}: key {key!r} does not hold a PEM {label.lower()}"
        )
    return value


def _set_env(container: dict[str, Any], managed: list[dict[str, Any]]) -> None:
    names = {e["name"] for e in managed}
    kept = [
        e
        for e in container.get("env") or []
        if e.get("name") not in names and e.get("name") not in CONNECTION_ENV_NAMES
    ]
    container["env"] = [*managed, *kept]


def _set_or_drop(obj: dict[str, Any], key: str, items: list[dict[str, Any]]) -> None:
    if items:
        obj[key] = items
    else:
        obj.pop(key, None)
