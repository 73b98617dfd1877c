"""How workers reach Temporal: a :class:`Registry` of providers (plugins add kinds through
the ``twc.connection_providers`` entry points) resolves a ``connectionRef`` to a
:class:`ResolvedConnection`: pod settings, a fingerprint and cached temporalio clients."""

from twc.connections._registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from twc.connections._registry import ConnectionProvider as ConnectionProvider
from twc.connections._registry import NamespacedConnectionProvider as NamespacedConnectionProvider
from twc.connections._registry import Registry as Registry
from twc.connections._registry import WatchedKind as WatchedKind
from twc.connections._registry import default_registry as default_registry
from twc.connections._registry import load_entry_point_providers as load_entry_point_providers
from twc.connections._registry import resolve_fleet_connections as resolve_fleet_connections
from twc.connections._resolved import CONNECTION_ENV_NAMES as CONNECTION_ENV_NAMES
from twc.connections._resolved import (
    CONNECTION_SPEC_HASH_ANNOTATION as CONNECTION_SPEC_HASH_ANNOTATION,
)
from twc.connections._resolved import DEFAULT_TLS_MOUNT_PATH as DEFAULT_TLS_MOUNT_PATH
from twc.connections._resolved import ConnectionIdentity as ConnectionIdentity
from twc.connections._resolved import ConnectOptions as ConnectOptions
from twc.connections._resolved import PodSpecOptions as PodSpecOptions
from twc.connections._resolved import ResolvedConnection as ResolvedConnection
from twc.connections._resolved import SecretKeySelector as SecretKeySelector
from twc.connections._resolved import TLSSettings as TLSSettings
from twc.connections._resolved import connect as connect
from twc.connections._resolved import connect_check as connect_check
from twc.connections._resolved import fingerprint_of as fingerprint_of
from twc.connections._resolved import map_connect_error as map_connect_error
from twc.connections._resolved import poller_failure as poller_failure
from twc.connections._resolved import secret_data_digest as secret_data_digest
