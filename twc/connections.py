"""How workers reach Temporal: a :class:`Registry` of providers (the protocol and the two built-in
kinds, keyed by (apiGroup, kind); plugins add kinds through the ``twc.connection_providers`` entry
points) resolves a ``connectionRef`` to a :class:`ResolvedConnection`: one Temporal connection,
ready to render into pod templates, fingerprint and connect.

Clients are cached per event loop, connection, namespace and credential: a rotated credential
replaces its slot's client; idle ones (:data:`IDLE_SECONDS`) and the least recently used beyond
:data:`MAX_CLIENTS` are dropped."""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import importlib.metadata
import json
import logging
import re
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, cast, runtime_checkable

from twc.errors import Reason, SpecError, SpecIssue, TwcConnectionError, TwcError
from twc.spec import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    CONNECTION_VERSION,
    AuthMode,
    ClusterConnection,
    Connection,
    ConnectionTarget,
    Fleet,
    ResolvedWorker,
    TwcCredentials,
    split_host_port,
)

if TYPE_CHECKING:
    from temporalio.client import Client

CONNECTION_SPEC_HASH_ANNOTATION: Final = "temporal.io/connection-spec-hash"
"""Pod annotation carrying the connection fingerprint; a change rolls the pods."""
DEFAULT_TLS_MOUNT_PATH: Final = "/etc/temporal/tls"
"""Where a kubernetes.io/tls secret (tls.crt, tls.key, optional ca.crt) is mounted."""
_TLS_CERT, _TLS_KEY, _CA_CERT, _TLS_VOLUME = "tls.crt", "tls.key", "ca.crt", "temporal-tls"

# Read by temporalio.envconfig, plus TEMPORAL_FRONTEND_ADDRESS for tools that do not read it.
_ENV = "ADDRESS FRONTEND_ADDRESS TLS TLS_CLIENT_CERT_PATH TLS_CLIENT_KEY_PATH TLS_SERVER_NAME"
CONNECTION_ENV_NAMES: Final = frozenset(
    f"TEMPORAL_{name}" for name in (*_ENV.split(), "TLS_SERVER_CA_CERT_PATH", "API_KEY")
)
"""Every environment variable :meth:`ResolvedConnection.apply_pod_spec` manages."""

_FINGERPRINT_VERSION = "1"  # a string: Pulumi turns integers into floats


@dataclass(frozen=True)
class ConnectionIdentity:
    """Who a connection is. A namespaced ``foo`` and a cluster-scoped ``foo`` differ."""

    api_group: str
    kind: str
    name: str
    namespace: str | None  # None for cluster-scoped kinds

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind}.{self.api_group} {where}"


@dataclass(frozen=True)
class SecretKeySelector:
    """One key of a Secret."""

    name: str
    key: str


@dataclass(frozen=True)
class TLSSettings:
    """TLS towards the frontend."""

    enabled: bool
    server_name: str | None = None  # SNI / verification name override


@dataclass(frozen=True)
class PodSpecOptions:
    """How :meth:`ResolvedConnection.apply_pod_spec` renders the connection: give the
    ``fingerprint`` (a ``ConnectionFingerprint`` output) or the secret's digest."""

    fingerprint: str | None = None
    secret_digest: str | None = None
    secret_keys: frozenset[str] | None = None  # with ca.crt the pod trusts that CA
    tls_mount_path: str = DEFAULT_TLS_MOUNT_PATH
    containers: frozenset[str] | None = None  # get env and mTLS mount (None: every one)
    init_containers: frozenset[str] | None = None  # get the address (None: every one)


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def secret_data_digest(data: Mapping[str, bytes | str]) -> str:
    """A stable sha256 of a secret's decoded data, length-prefixed against collisions."""
    digest = hashlib.sha256(b"twc-secret-data-v1\0")
    for key in sorted(data):
        key_bytes = key.encode("utf-8")
        value = _as_bytes(data[key])
        digest.update(len(key_bytes).to_bytes(8, "big") + key_bytes)
        digest.update(len(value).to_bytes(8, "big") + value)
    return digest.hexdigest()


def _canonical(value: object) -> object:
    """A value as it survives Pulumi: no None or empty mappings, integral floats as ints."""
    if isinstance(value, Mapping):
        items = ((str(k), _canonical(v)) for k, v in value.items())
        return {k: v for k, v in items if v is not None and v != {}}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def fingerprint_of(spec_document: Mapping[str, Any], secret_digest: str | None) -> str:
    """A sha256 of the canonical spec document and the secret's digest."""
    document = {"spec": _canonical(spec_document), "secretDigest": secret_digest or None}
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ResolvedConnection:
    """A connection with its spec resolved: what a provider returns."""

    identity: ConnectionIdentity
    host_port: str
    tls: TLSSettings
    auth_mode: AuthMode = AuthMode.NONE
    mtls_secret_name: str | None = None  # a kubernetes.io/tls secret
    api_key_secret: SecretKeySelector | None = None
    secret_source_namespace: str | None = None  # copy the credential secret from here
    # Provider-specific non-secret settings: in the fingerprint, not in the hash.
    extra: Mapping[str, str] = field(default_factory=dict, hash=False)
    twc: ResolvedConnection | None = field(default=None, compare=False)
    """The connection with ``twcCredentials``: what twc's own calls use (workers never)."""

    def __post_init__(self) -> None:
        # One auth mode with exactly the secret it needs, and TLS whenever credentials go.
        split_host_port(self.host_port)
        expected = (self.auth_mode is AuthMode.MTLS, self.auth_mode is AuthMode.API_KEY)
        if (self.mtls_secret_name is not None, self.api_key_secret is not None) != expected:
            raise ValueError(f"auth mode {self.auth_mode} does not match the secret references")
        if self.auth_mode is not AuthMode.NONE and not self.tls.enabled:
            raise ValueError("credentials require TLS")

    def for_twc(self) -> ResolvedConnection:
        """What twc's own clients connect with: ``twcCredentials`` where set, else the
        workers' credential (read from where the workers' is)."""
        return self.twc or self

    @property
    def secret_name(self) -> str | None:
        return self.api_key_secret.name if self.api_key_secret else self.mtls_secret_name

    @property
    def secret_keys(self) -> tuple[str, ...]:
        """Keys of the credential secret this connection reads."""
        if self.auth_mode is AuthMode.MTLS:
            return (_TLS_CERT, _TLS_KEY, _CA_CERT)
        return (self.api_key_secret.key,) if self.api_key_secret is not None else ()

    def spec_document(self) -> dict[str, Any]:
        """The non-secret spec that :func:`fingerprint_of` hashes (safe to show and store)."""
        secret = self.api_key_secret
        document = _canonical(
            {
                "version": _FINGERPRINT_VERSION,
                "hostPort": self.host_port,
                "tls": {"enabled": self.tls.enabled, "serverName": self.tls.server_name},
                "authMode": str(self.auth_mode),
                "mutualTLSSecretRef": {"name": self.mtls_secret_name},
                "apiKeySecretRef": {"name": secret.name, "key": secret.key} if secret else None,
                "extra": dict(self.extra),
            }
        )
        return cast("dict[str, Any]", document)

    def secret_digest(self, data: Mapping[str, bytes | str]) -> str:
        """Digest of only the keys of ``data`` this connection reads."""
        return secret_data_digest({k: v for k, v in data.items() if k in self.secret_keys})

    def fingerprint(self, secret_digest: str | None = None) -> str:
        """:func:`fingerprint_of` this spec and the secret's :meth:`secret_digest`."""
        return fingerprint_of(self.spec_document(), secret_digest)

    def apply_pod_spec(
        self, pod_template: Mapping[str, Any], opts: PodSpecOptions
    ) -> dict[str, Any]:
        """A copy of ``pod_template`` with this connection's env, mTLS volume and mounts
        and fingerprint annotation rendered in, replacing what an earlier call wrote."""
        template: dict[str, Any] = copy.deepcopy(dict(pod_template))
        fingerprint = opts.fingerprint or self.fingerprint(opts.secret_digest)
        metadata = template.setdefault("metadata", {})
        metadata.setdefault("annotations", {})[CONNECTION_SPEC_HASH_ANNOTATION] = fingerprint
        spec = template.setdefault("spec", {})
        address_env = [
            {"name": "TEMPORAL_ADDRESS", "value": self.host_port},
            {"name": "TEMPORAL_FRONTEND_ADDRESS", "value": self.host_port},
        ]
        for container in spec.get("initContainers") or []:
            if opts.init_containers is None or container.get("name") in opts.init_containers:
                _set_env(container, address_env)
        full_env = address_env + self._credential_env(opts)
        mtls = self.mtls_secret_name is not None
        mount = {"name": _TLS_VOLUME, "mountPath": opts.tls_mount_path, "readOnly": True}
        for container in spec.get("containers") or []:
            if opts.containers is None or container.get("name") in opts.containers:
                _set_env(container, full_env)
                _set_tls_item(container, "volumeMounts", dict(mount) if mtls else None)
        volume = {"name": _TLS_VOLUME, "secret": {"secretName": self.mtls_secret_name}}
        _set_tls_item(spec, "volumes", volume if mtls else None)
        return template

    def _credential_env(self, opts: PodSpecOptions) -> list[dict[str, Any]]:
        values: dict[str, str | None] = {"TLS": "true" if self.tls.enabled else None}
        if self.mtls_secret_name is not None:
            base = opts.tls_mount_path.rstrip("/")
            values["TLS_CLIENT_CERT_PATH"] = f"{base}/{_TLS_CERT}"
            values["TLS_CLIENT_KEY_PATH"] = f"{base}/{_TLS_KEY}"
            if opts.secret_keys is not None and _CA_CERT in opts.secret_keys:
                values["TLS_SERVER_CA_CERT_PATH"] = f"{base}/{_CA_CERT}"
        if self.tls.enabled:
            values["TLS_SERVER_NAME"] = self.tls.server_name
        env: list[dict[str, Any]] = [
            {"name": f"TEMPORAL_{k}", "value": v} for k, v in values.items() if v
        ]
        if self.api_key_secret is not None:
            ref = {"name": self.api_key_secret.name, "key": self.api_key_secret.key}
            env.append({"name": "TEMPORAL_API_KEY", "valueFrom": {"secretKeyRef": ref}})
        return env

    def connect_options(
        self, namespace: str, secret_data: Mapping[str, bytes | str] | None = None
    ) -> ConnectOptions:
        """Client options; missing or non-PEM credentials are ``AuthSecretInvalid``."""
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
        if self.api_key_secret is not None:
            raw = secret_data.get(self.api_key_secret.key)
            api_key = _as_bytes(raw).decode("utf-8", "replace").strip() if raw is not None else ""
            if not api_key:
                raise TwcConnectionError(
                    Reason.AUTH_SECRET_INVALID,
                    f"{where}: key {self.api_key_secret.key!r} is missing or empty",
                )
            return replace(options, api_key=api_key)
        cert = _pem(secret_data, _TLS_CERT, "CERTIFICATE", where, required=True)
        key = _pem(secret_data, _TLS_KEY, "PRIVATE KEY", where, required=True)
        ca = _pem(secret_data, _CA_CERT, "CERTIFICATE", where, required=False)
        return replace(options, client_cert=cert, client_private_key=key, server_root_ca_cert=ca)

    async def client(
        self,
        namespace: str,
        secret_data: Mapping[str, bytes | str] | None = None,
        *,
        connect_timeout: float = 10.0,
    ) -> Client:
        """A connected client, cached by fingerprint and namespace (one shared attempt, a
        failed one forgotten); raises ``AuthSecretInvalid`` or ``TemporalClientCreationFailed``."""
        options = self.connect_options(namespace, secret_data)
        digest = self.secret_digest(secret_data) if secret_data is not None else None
        key, slot = (self.fingerprint(digest), namespace), (self.identity, namespace)
        loop = asyncio.get_running_loop()
        clients = _CACHE.setdefault(loop, OrderedDict())
        now = _CLOCK()
        if (entry := clients.get(key)) is None:
            _evict(clients, now, slot)
            logger.info("connecting to Temporal at %s (ns %s)", self.host_port, namespace)
            task = loop.create_task(connect(options, self.auth_mode, connect_timeout))
            entry = clients[key] = _Entry(slot, task, now)
        entry.used = now
        clients.move_to_end(key)
        task = entry.task
        try:
            # shield: one caller being cancelled must not cancel the shared attempt.
            return await asyncio.shield(task)
        finally:
            failed = task.done() and (task.cancelled() or task.exception() is not None)
            if failed and key in clients and clients[key].task is task:
                del clients[key]


def _pem(
    data: Mapping[str, bytes | str], key: str, label: str, where: str, *, required: bool
) -> bytes | None:
    raw = data.get(key)
    if raw is None or not _as_bytes(raw).strip():
        if required:
            raise TwcConnectionError(Reason.AUTH_SECRET_INVALID, f"{where}: key {key!r} is missing")
        return None
    value = _as_bytes(raw)
    # Names the key where the SDK's parse error would not; TLS still validates.
    if b"-----BEGIN " not in value or f"{label}-----".encode() not in value:
        raise TwcConnectionError(
            Reason.AUTH_SECRET_INVALID, f"{where}: key {key!r} does not hold a PEM {label.lower()}"
        )
    return value


def _set_env(container: dict[str, Any], managed: list[dict[str, Any]]) -> None:
    kept = [e for e in container.get("env") or [] if e.get("name") not in CONNECTION_ENV_NAMES]
    container["env"] = [*managed, *kept]


def _set_tls_item(obj: dict[str, Any], key: str, item: dict[str, Any] | None) -> None:
    items = [i for i in obj.get(key) or [] if i.get("name") != _TLS_VOLUME]
    items.extend([item] if item else [])
    if items:
        obj[key] = items
    else:
        obj.pop(key, None)


logger = logging.getLogger(__name__)

MAX_CLIENTS = 256  # per event loop
IDLE_SECONDS = 900.0


@dataclass(frozen=True)
class ConnectOptions:
    """Everything ``Client.connect`` needs; holds secrets: never log or persist it."""

    target_host: str
    namespace: str
    tls: bool
    server_name: str | None = None
    server_root_ca_cert: bytes | None = field(default=None, repr=False)
    client_cert: bytes | None = field(default=None, repr=False)
    client_private_key: bytes | None = field(default=None, repr=False)
    api_key: str | None = field(default=None, repr=False)


@dataclass
class _Entry:
    slot: Hashable  # the connection and namespace: one credential's client per slot
    task: asyncio.Task[Client]
    used: float


# A client's tasks belong to its loop; a closed loop takes its clients with it.
_CACHE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OrderedDict[Hashable, _Entry]] = (
    weakref.WeakKeyDictionary()
)
_CLOCK: Callable[[], float] = time.monotonic

# Connect errors that blame the client's credentials or CA, not the network or server.
_CREDENTIAL_ERROR = re.compile(
    r"privatekeyparseerror|certificateparseerror|invalidcertificate|unknownissuer"
    r"|bad certificate|certificate required|private key|pem",
    re.IGNORECASE,
)


def map_connect_error(error: BaseException, auth_mode: AuthMode, target: str) -> TwcConnectionError:
    """A connect failure as ``AuthSecretInvalid`` or ``TemporalClientCreationFailed``."""
    from temporalio.service import RPCError, RPCStatusCode

    auth = False
    if isinstance(error, RPCError):
        text = f"{error.status.name}: {error.message}"
        auth = error.status in (RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED)
    elif isinstance(error, TimeoutError):
        text = "timed out connecting"
    else:
        text = str(error)
        auth = auth_mode is not AuthMode.NONE and bool(_CREDENTIAL_ERROR.search(text))
    reason = Reason.AUTH_SECRET_INVALID if auth else Reason.TEMPORAL_CLIENT_CREATION_FAILED
    return TwcConnectionError(reason, f"{target}: {text}")


async def connect_check(props: Mapping[str, Any], creds: Mapping[str, bytes]) -> Client:
    """A client (5 s to connect) for a ``TaskQueueCheck``'s inputs ``props``, with ``creds``
    the data of the Secret its ``secretRef`` names (``ca.crt``, ``tls.*``, the API key)."""
    api_key = (creds.get(props.get("apiKeyKey") or "") or b"").decode().strip()
    options = ConnectOptions(
        target_host=str(props["address"]),
        namespace=str(props["namespace"]),
        tls=bool(props.get("tls")),
        server_name=props.get("serverName") or None,
        server_root_ca_cert=creds.get("ca.crt") or None,
        client_cert=creds.get("tls.crt") or None,
        client_private_key=creds.get("tls.key") or None,
        api_key=api_key or None,
    )
    return await connect(options, AuthMode(props.get("authMode") or "none"), timeout=5.0)


async def connect(options: ConnectOptions, auth_mode: AuthMode, timeout: float) -> Client:
    """Open a temporalio client (uncached); raises :func:`map_connect_error`'s error."""
    from temporalio.client import Client
    from temporalio.service import RPCError, TLSConfig

    tls: bool | TLSConfig = options.tls
    if options.tls and (options.client_cert or options.server_root_ca_cert or options.server_name):
        tls = TLSConfig(
            server_root_ca_cert=options.server_root_ca_cert,
            domain=options.server_name,
            client_cert=options.client_cert,
            client_private_key=options.client_private_key,
        )
    try:
        # wait_for also bounds the handshake and first RPC, which the SDK does not.
        return await asyncio.wait_for(
            Client.connect(
                options.target_host,
                namespace=options.namespace,
                api_key=options.api_key,
                tls=tls,
                connect_timeout=timedelta(seconds=timeout),
            ),
            timeout=timeout * 2,
        )
    except (RPCError, RuntimeError, TimeoutError, OSError) as err:
        raise map_connect_error(err, auth_mode, options.target_host) from err


def _evict(clients: OrderedDict[Hashable, _Entry], now: float, slot: Hashable) -> None:
    """Drop the slot's older clients, the idle ones, and the LRU ones beyond the bound."""
    stale = [k for k, e in clients.items() if e.slot == slot or now - e.used >= IDLE_SECONDS]
    for key in stale:
        del clients[key]
    while len(clients) >= MAX_CLIENTS:
        clients.popitem(last=False)
    if stale:
        logger.info("dropped %d Temporal client(s) of rotated credentials or unused", len(stale))


def poller_failure(error: BaseException) -> tuple[str, str]:
    """``(reason, message)`` of a failed task-queue describe."""
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(error, LookupError):
        return "AuthSecretInvalid", str(error)
    if isinstance(error, TwcConnectionError):
        named = error.reason in (Reason.AUTH_SECRET_INVALID, Reason.TWC_CREDENTIAL_INVALID)
        return (error.reason.value if named else "TemporalUnavailable"), str(error)
    if isinstance(error, RPCError):
        reason = {
            RPCStatusCode.NOT_FOUND: "NamespaceNotFound",
            RPCStatusCode.UNAUTHENTICATED: "AuthSecretInvalid",
            RPCStatusCode.PERMISSION_DENIED: "AuthSecretInvalid",
        }.get(error.status, "TemporalUnavailable")
        return reason, f"{error.status.name}: {error.message}"
    return "TemporalUnavailable", f"{type(error).__name__}: {error}"


@runtime_checkable
class ConnectionProvider(Protocol):
    """Resolves references to one connection kind; plugins add kinds through the
    ``twc.connection_providers`` entry points. Optional ``plural``, ``namespaced`` and
    ``version`` attributes say how the daemon watches the kind."""

    api_group: str
    kind: str

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        """Resolve ``target`` (in the worker's namespace); raises ``ConnectionNotFound``."""
        ...


def _resolved(
    spec: Connection | ClusterConnection, kind: str, namespace: str | None
) -> ResolvedConnection:
    source = spec.secret_source if isinstance(spec, ClusterConnection) else None
    found = ResolvedConnection(
        identity=ConnectionIdentity(API_GROUP, kind, spec.name, namespace),
        host_port=spec.host_port,
        tls=TLSSettings(spec.tls_enabled, spec.tls.server_name if spec.tls else None),
        secret_source_namespace=source.namespace if source else None,
        **_credential(spec),
    )
    twc = spec.twc_credentials
    return replace(found, twc=replace(found, **_credential(twc))) if twc else found


def _credential(spec: Connection | ClusterConnection | TwcCredentials) -> dict[str, Any]:
    api_key, mtls = spec.api_key_secret_ref, spec.mutual_tls_secret_ref
    return {
        "auth_mode": spec.auth_mode,
        "mtls_secret_name": mtls.name if mtls else None,
        "api_key_secret": SecretKeySelector(api_key.name, api_key.key) if api_key else None,
    }


class NamespacedConnectionProvider:
    """``Connection``: looked up in the referencing worker's namespace only."""

    api_group = API_GROUP
    kind = CONNECTION_KIND
    plural = "connections"
    namespaced = True
    version = CONNECTION_VERSION

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        found = fleet.find_connection(target.namespace, target.name)
        if found is None:
            raise TwcConnectionError(
                Reason.CONNECTION_NOT_FOUND,
                f"no Connection {target.name!r} in namespace {target.namespace!r}",
            )
        return _resolved(found, CONNECTION_KIND, found.namespace)


class ClusterConnectionProvider:
    """``ClusterConnection``: cluster-scoped, usable from any namespace it allows."""

    api_group = API_GROUP
    kind = CLUSTER_CONNECTION_KIND
    plural = "clusterconnections"
    namespaced = False
    version = CONNECTION_VERSION

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        found = fleet.find_cluster_connection(target.name)
        if found is None:
            raise TwcConnectionError(
                Reason.CONNECTION_NOT_FOUND, f"no ClusterConnection {target.name!r}"
            )
        allowed = found.allowed_namespaces
        if allowed is not None and target.namespace not in allowed:
            # Tells a tenant nothing about which other namespaces may use it.
            raise TwcConnectionError(
                Reason.NAMESPACE_NOT_ALLOWED,
                f"ClusterConnection {found.name!r} does not allow workers in namespace "
                f"{target.namespace!r}",
            )
        return _resolved(found, CLUSTER_CONNECTION_KIND, None)


ENTRY_POINT_GROUP = "twc.connection_providers"


def load_entry_point_providers() -> tuple[list[ConnectionProvider], list[str]]:
    """The providers installed plugins advertise, and the errors of those that failed to
    load: a broken plugin is reported, never fatal."""
    providers: list[ConnectionProvider] = []
    errors: list[str] = []
    entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    for entry_point in sorted(entry_points, key=lambda ep: (ep.name, ep.value)):
        label = f"{entry_point.name} = {entry_point.value}"
        try:
            providers.extend(_coerce(entry_point.load()))
        except Exception as err:  # a plugin's bug must not take twc down
            logger.exception("connection provider plugin %s failed to load", label)
            errors.append(f"{label}: {type(err).__name__}: {err}")
    return providers, errors


def _coerce(loaded: object) -> list[ConnectionProvider]:
    """An entry point's provider instance, class, function, or list of providers."""
    if isinstance(loaded, type) or (
        not isinstance(loaded, ConnectionProvider) and callable(loaded)
    ):
        loaded = loaded()
    items = [loaded] if isinstance(loaded, ConnectionProvider) else loaded
    if not isinstance(items, list | tuple):
        raise TypeError(f"{loaded!r} is neither a ConnectionProvider nor a list of them")
    for item in items:
        if not isinstance(item, ConnectionProvider):
            raise TypeError(f"{item!r} is not a ConnectionProvider (api_group, kind, resolve)")
    return list(items)


@dataclass(frozen=True, order=True)
class WatchedKind:
    """A connection kind whose objects the daemon reads from the cluster."""

    api_group: str
    kind: str
    version: str
    plural: str
    namespaced: bool

    def __str__(self) -> str:
        return f"{self.plural}.{self.api_group}"


class Registry:
    """Connection providers keyed by (apiGroup, kind)."""

    def __init__(self, providers: Iterable[ConnectionProvider] = ()) -> None:
        self._providers: dict[tuple[str, str], ConnectionProvider] = {}
        self.load_errors: list[str] = []  # "name = value: error" of plugins not loaded
        for provider in providers:
            self.register(provider)

    @classmethod
    def with_builtins(cls) -> Registry:
        return cls([NamespacedConnectionProvider(), ClusterConnectionProvider()])

    @classmethod
    def from_entry_points(cls) -> Registry:
        """The built-ins plus every installed plugin; a clash goes to :attr:`load_errors`."""
        registry = cls.with_builtins()
        plugins, registry.load_errors = load_entry_point_providers()
        for provider in plugins:
            try:
                registry.register(provider)
            except TwcError as err:
                logger.error("ignoring connection provider %r: %s", provider, err)
                registry.load_errors.append(str(err))
        return registry

    def register(self, provider: ConnectionProvider) -> None:
        """Add ``provider``; raises :class:`TwcError` if its kind is already served."""
        key = (provider.api_group, provider.kind)
        if (served := self._providers.get(key)) is not None:
            raise TwcError(f"{provider.kind}.{provider.api_group} is already served by {served!r}")
        self._providers[key] = provider

    def kinds(self) -> list[tuple[str, str]]:
        return sorted(self._providers)

    def watched_kinds(self) -> list[WatchedKind]:
        """Every registered kind as the daemon watches it (default: kind + s, namespaced, v1)."""
        return [
            WatchedKind(
                group,
                kind,
                getattr(provider, "version", None) or "v1",
                getattr(provider, "plural", None) or f"{kind.lower()}s",
                bool(getattr(provider, "namespaced", True)),
            )
            for (group, kind), provider in sorted(self._providers.items())
        ]

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        """Resolve through the kind's provider; raises ``UnknownConnectionKind`` or its error."""
        provider = self._providers.get((target.api_group, target.kind))
        if provider is None:
            known = ", ".join(f"{k}.{g}" for g, k in self.kinds())
            message = (
                f"no connection provider for {target.kind}.{target.api_group} (registered: {known})"
            )
            if self.load_errors:
                message += f"; plugins that failed to load: {'; '.join(self.load_errors)}"
            raise TwcConnectionError(Reason.UNKNOWN_CONNECTION_KIND, message)
        return provider.resolve(target, fleet)

    def resolve_worker(self, worker: ResolvedWorker, fleet: Fleet) -> ResolvedConnection:
        return self.resolve(worker.connection, fleet)


@functools.cache
def default_registry() -> Registry:
    """The process-wide registry: built-ins plus entry-point plugins."""
    return Registry.from_entry_points()


def resolve_fleet_connections(
    fleet: Fleet, *, file: str = "<fleet>", registry: Registry | None = None
) -> dict[tuple[str, str], ResolvedConnection]:
    """Every worker's connection, by ``(namespace, worker name)``; raises SpecError with
    every reference that does not resolve, at the path where it is written."""
    registry = registry or default_registry()
    resolved: dict[tuple[str, str], ResolvedConnection] = {}
    issues: dict[tuple[str, str], SpecIssue] = {}
    for worker in fleet.resolved_workers():
        try:
            resolved[worker.key] = registry.resolve_worker(worker, fleet)
        except TwcConnectionError as err:
            path = worker.connection_source
            # Workers sharing defaults.connectionRef share one message.
            issues.setdefault((path, err.message), SpecIssue(file, path, str(err)))
    if issues:
        raise SpecError(issues.values())
    return resolved
