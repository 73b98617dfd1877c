"""The ``ConnectionProvider`` protocol and the two built-in providers."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from twc.connections._resolved import (
    ConnectionIdentity,
    ResolvedConnection,
    SecretKeySelector,
    TLSSettings,
)
from twc.errors import Reason, TwcConnectionError
from twc.spec import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    CONNECTION_VERSION,
    ClusterConnection,
    Connection,
    ConnectionTarget,
    Fleet,
)

__all__ = [
    "ClusterConnectionProvider",
    "ConnectionProvider",
    "NamespacedConnectionProvider",
    "resolved_from_spec",
]


@runtime_checkable
class ConnectionProvider(Protocol):
    """Resolves references to one connection kind.

    Register extra kinds through the ``twc.connection_providers`` entry-point group;
    the entry point may name a provider instance, a provider class (instantiated with
    no arguments) or a function returning one provider or a list of them.

    The daemon also watches the kind's objects in the cluster. A provider may say how
    with optional attributes: ``plural`` (default: the kind lower-cased plus ``s``),
    ``namespaced`` (default ``True``) and ``version`` (default ``v1``).
    """

    @property
    def api_group(self) -> str:
        """API group served (``temporal.io``)."""
        ...

    @property
    def kind(self) -> str:
        """Kind served, e.g. ``ClusterConnection``."""
        ...

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        """Resolve ``target`` against ``fleet``.

        Args:
            target: The absolute reference (``namespace`` is the worker's).
            fleet: The fleet being deployed (custom kinds read
                ``fleet.custom_connections``).

        Returns:
            The resolved connection.

        Raises:
            TwcConnectionError: ``ConnectionNotFound`` when nothing matches.
        """
        ...


def resolved_from_spec(
    spec: Connection | ClusterConnection, identity: ConnectionIdentity
) -> ResolvedConnection:
    """Build a :class:`ResolvedConnection` from a built-in connection model."""
    api_key = spec.api_key_secret_ref
    source = spec.secret_source if isinstance(spec, ClusterConnection) else None
    return ResolvedConnection(
        identity=identity,
        host_port=spec.host_port,
        tls=TLSSettings(
            enabled=spec.tls_enabled,
            server_name=spec.tls.server_name if spec.tls is not None else None,
        ),
        auth_mode=spec.auth_mode,
        mtls_secret_name=(
            spec.mutual_tls_secret_ref.name if spec.mutual_tls_secret_ref is not None else None
        ),
        api_key_secret=(
            SecretKeySelector(name=api_key.name, key=api_key.key) if api_key is not None else None
        ),
        secret_source_namespace=source.namespace if source is not None else None,
    )


class NamespacedConnectionProvider:
    """``Connection``: looked up in the referencing worker's namespace only."""

    api_group = API_GROUP
    kind = CONNECTION_KIND
    plural = "connections"
    namespaced = True
    version = CONNECTION_VERSION

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        """Resolve a Connection in ``target.namespace``.

        Raises:
            TwcConnectionError: ``ConnectionNotFound`` if there is none there.
        """
        found = fleet.find_connection(target.namespace, target.name)
        if found is None:
            raise TwcConnectionError(
                Reason.CONNECTION_NOT_FOUND,
                f"no Connection {target.name!r} in namespace {target.namespace!r}",
            )
        identity = ConnectionIdentity(API_GROUP, CONNECTION_KIND, found.name, found.namespace)
        return resolved_from_spec(found, identity)


class ClusterConnectionProvider:
    """``ClusterConnection``: cluster-scoped, usable from any namespace it allows."""

    api_group = API_GROUP
    kind = CLUSTER_CONNECTION_KIND
    plural = "clusterconnections"
    namespaced = False
    version = CONNECTION_VERSION

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        """Resolve a ClusterConnection by name.

        Raises:
            TwcConnectionError: ``ConnectionNotFound`` if there is none;
                ``NamespaceNotAllowed`` if its ``allowedNamespaces`` leave out the
                worker's namespace.
        """
        found = fleet.find_cluster_connection(target.name)
        if found is None:
            raise TwcConnectionError(
                Reason.CONNECTION_NOT_FOUND, f"no ClusterConnection {target.name!r}"
            )
        allowed = found.allowed_namespaces
        if allowed is not None and target.namespace not in allowed:
            # Names only the connection and the worker's own namespace: a tenant learns
            # nothing about which other namespaces may use it.
            raise TwcConnectionError(
                Reason.NAMESPACE_NOT_ALLOWED,
                f"ClusterConnection {found.name!r} does not allow workers in namespace "
                f"{target.namespace!r}",
            )
        identity = ConnectionIdentity(API_GROUP, CLUSTER_CONNECTION_KIND, found.name, None)
        return resolved_from_spec(found, identity)
