"""The connection seam: how workers reach Temporal.

A :class:`Registry` of :class:`ConnectionProvider`\\ s keyed by (apiGroup, kind)
resolves a worker's ``connectionRef`` to a :class:`ResolvedConnection`, which renders
itself into pod templates (:meth:`~ResolvedConnection.apply_pod_spec`), fingerprints
itself (:meth:`~ResolvedConnection.fingerprint`) and opens cached temporalio clients
(:meth:`~ResolvedConnection.client`). Packages add kinds through the entry-point group
``twc.connection_providers``.

Imports only :mod:`twc.spec` and :mod:`twc.errors` (temporalio lazily, inside calls).
"""

from twc.connections._client import (
    clear_client_cache,
    connect,
    map_connect_error,
    poller_failure,
)
from twc.connections._providers import (
    ClusterConnectionProvider,
    ConnectionProvider,
    NamespacedConnectionProvider,
    resolved_from_spec,
)
from twc.connections._registry import (
    ENTRY_POINT_GROUP,
    Registry,
    WatchedKind,
    builtin_providers,
    default_registry,
    load_entry_point_providers,
    resolve_fleet_connections,
)
from twc.connections._resolved import (
    CA_CERT_KEY,
    CONNECTION_ENV_NAMES,
    CONNECTION_SPEC_HASH_ANNOTATION,
    DEFAULT_TLS_MOUNT_PATH,
    TLS_CERT_KEY,
    TLS_KEY_KEY,
    TLS_VOLUME_NAME,
    ConnectionIdentity,
    ConnectOptions,
    PodSpecOptions,
    ResolvedConnection,
    SecretKeySelector,
    TLSSettings,
    decode_secret_data,
    fingerprint_of,
    secret_data_digest,
)

__all__ = [
    "CA_CERT_KEY",
    "CONNECTION_ENV_NAMES",
    "CONNECTION_SPEC_HASH_ANNOTATION",
    "DEFAULT_TLS_MOUNT_PATH",
    "ENTRY_POINT_GROUP",
    "TLS_CERT_KEY",
    "TLS_KEY_KEY",
    "TLS_VOLUME_NAME",
    "ClusterConnectionProvider",
    "ConnectOptions",
    "ConnectionIdentity",
    "ConnectionProvider",
    "NamespacedConnectionProvider",
    "PodSpecOptions",
    "Registry",
    "ResolvedConnection",
    "SecretKeySelector",
    "TLSSettings",
    "WatchedKind",
    "builtin_providers",
    "clear_client_cache",
    "connect",
    "decode_secret_data",
    "default_registry",
    "fingerprint_of",
    "load_entry_point_providers",
    "map_connect_error",
    "poller_failure",
    "resolve_fleet_connections",
    "resolved_from_spec",
    "secret_data_digest",
]
