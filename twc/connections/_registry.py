"""Connection providers (the protocol and the two built-in kinds) and their registry,
keyed by (apiGroup, kind)."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from twc.connections._resolved import (
    ConnectionIdentity,
    ResolvedConnection,
    SecretKeySelector,
    TLSSettings,
)
from twc.errors import Reason, SpecError, SpecIssue, TwcConnectionError, TwcError
from twc.spec import (
    API_GROUP,
    CLUSTER_CONNECTION_KIND,
    CONNECTION_KIND,
    CONNECTION_VERSION,
    ClusterConnection,
    Connection,
    ConnectionTarget,
    Fleet,
    ResolvedWorker,
)

logger = logging.getLogger(__name__)


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
    api_key, mtls = spec.api_key_secret_ref, spec.mutual_tls_secret_ref
    source = spec.secret_source if isinstance(spec, ClusterConnection) else None
    return ResolvedConnection(
        identity=ConnectionIdentity(API_GROUP, kind, spec.name, namespace),
        host_port=spec.host_port,
        tls=TLSSettings(spec.tls_enabled, spec.tls.server_name if spec.tls else None),
        auth_mode=spec.auth_mode,
        mtls_secret_name=mtls.name if mtls else None,
        api_key_secret=SecretKeySelector(api_key.name, api_key.key) if api_key else None,
        secret_source_namespace=source.namespace if source else None,
    )


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


def load_entry_point_providers(
    group: str = ENTRY_POINT_GROUP,
) -> tuple[list[ConnectionProvider], list[str]]:
    """The providers installed plugins advertise, and the errors of those that failed to
    load: a broken plugin is reported, never fatal."""
    providers: list[ConnectionProvider] = []
    errors: list[str] = []
    entry_points = importlib.metadata.entry_points(group=group)
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
    def from_entry_points(cls, group: str = ENTRY_POINT_GROUP) -> Registry:
        """The built-ins plus every plugin of ``group``; a clash goes to :attr:`load_errors`."""
        registry = cls.with_builtins()
        plugins, registry.load_errors = load_entry_point_providers(group)
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
