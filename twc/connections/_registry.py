"""The connection-provider registry, keyed by (apiGroup, kind)."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from twc.connections._providers import (
    ClusterConnectionProvider,
    ConnectionProvider,
    NamespacedConnectionProvider,
)
from twc.connections._resolved import ResolvedConnection
from twc.errors import Reason, SpecError, SpecIssue, TwcConnectionError, TwcError
from twc.spec import ConnectionTarget, Fleet, ResolvedWorker

__all__ = [
    "ENTRY_POINT_GROUP",
    "Registry",
    "WatchedKind",
    "default_registry",
    "load_entry_point_providers",
    "resolve_fleet_connections",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "twc.connection_providers"
"""Entry-point group through which packages add connection kinds."""


def builtin_providers() -> list[ConnectionProvider]:
    """The providers twc ships: ``Connection`` and ``ClusterConnection``."""
    return [NamespacedConnectionProvider(), ClusterConnectionProvider()]


def load_entry_point_providers(
    group: str = ENTRY_POINT_GROUP,
) -> tuple[list[ConnectionProvider], list[str]]:
    """Load providers advertised by installed distributions.

    A plugin that fails to load is logged and reported, not fatal: every other kind
    keeps working, and references to the broken kind fail with
    ``UnknownConnectionKind`` naming the load error.

    Args:
        group: Entry-point group to read.

    Returns:
        The providers, in a stable order (by entry-point name), and load errors.
    """
    providers: list[ConnectionProvider] = []
    errors: list[str] = []
    for entry_point in sorted(
        importlib.metadata.entry_points(group=group), key=lambda ep: (ep.name, ep.value)
    ):
        label = f"{entry_point.name} = {entry_point.value}"
        try:
            loaded = entry_point.load()
            found = _coerce(loaded)
        except Exception as err:  # a plugin's bug must not take twc down
            logger.exception("connection provider plugin %s failed to load", label)
            errors.append(f"{label}: {type(err).__name__}: {err}")
            continue
        logger.debug("loaded connection provider plugin %s", label)
        providers.extend(found)
    return providers, errors


def _coerce(loaded: object) -> list[ConnectionProvider]:
    if isinstance(loaded, type) or (
        not isinstance(loaded, ConnectionProvider) and callable(loaded)
    ):
        loaded = loaded()
    if isinstance(loaded, ConnectionProvider):
        return [loaded]
    providers: list[ConnectionProvider] = []
    for item in _iterable(loaded):
        if not isinstance(item, ConnectionProvider):
            raise TypeError(f"{item!r} is not a ConnectionProvider (api_group, kind, resolve)")
        providers.append(item)
    return providers


def _iterable(value: object) -> Iterable[object]:
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping):
        return value
    raise TypeError(f"{value!r} is neither a ConnectionProvider nor an iterable of them")


@dataclass(frozen=True, order=True)
class WatchedKind:
    """A connection kind whose objects the daemon reads from the cluster."""

    api_group: str
    """API group, e.g. ``temporal.io``."""
    kind: str
    """Kind, e.g. ``ClusterConnection``."""
    version: str
    """Served version to read."""
    plural: str
    """Resource name in URLs, e.g. ``clusterconnections``."""
    namespaced: bool
    """Whether objects live in namespaces (``Connection``) or not (``ClusterConnection``)."""

    def __str__(self) -> str:
        return f"{self.plural}.{self.api_group}"


class Registry:
    """Connection providers keyed by (apiGroup, kind)."""

    def __init__(self, providers: Iterable[ConnectionProvider] = ()) -> None:
        """Create a registry holding ``providers``.

        Raises:
            TwcError: If two providers serve the same (apiGroup, kind).
        """
        self._providers: dict[tuple[str, str], ConnectionProvider] = {}
        # Per fleet object, what each reference resolved to: the daemon resolves every
        # worker's connection several times an iteration (hashes, placement, backlogs),
        # and thousands of workers share a handful of connections.
        self._memo: OrderedDict[int, tuple[Fleet, dict[ConnectionTarget, ResolvedConnection]]]
        self._memo = OrderedDict()
        self._memo_lock = threading.Lock()
        self.load_errors: list[str] = []
        """Plugins that could not be loaded, as ``"name = value: error"``."""
        for provider in providers:
            self.register(provider)

    @classmethod
    def with_builtins(cls) -> Registry:
        """A registry of the built-in providers only."""
        return cls(builtin_providers())

    @classmethod
    def from_entry_points(cls, group: str = ENTRY_POINT_GROUP) -> Registry:
        """The built-in providers plus every plugin in the entry-point ``group``.

        A plugin may not replace a built-in kind, and the first of two plugins serving
        one kind wins; the loser is reported in :attr:`load_errors`.
        """
        registry = cls.with_builtins()
        plugins, errors = load_entry_point_providers(group)
        registry.load_errors.extend(errors)
        for provider in plugins:
            try:
                registry.register(provider)
            except TwcError as err:
                logger.error("ignoring connection provider %r: %s", provider, err)
                registry.load_errors.append(str(err))
        return registry

    def register(self, provider: ConnectionProvider) -> None:
        """Add ``provider``.

        Raises:
            TwcError: If its (apiGroup, kind) is already served.
        """
        key = (provider.api_group, provider.kind)
        existing = self._providers.get(key)
        if existing is not None:
            raise TwcError(
                f"{provider.kind}.{provider.api_group} is already served by {existing!r}"
            )
        self._providers[key] = provider

    def kinds(self) -> list[tuple[str, str]]:
        """The registered (apiGroup, kind) pairs, sorted."""
        return sorted(self._providers)

    def watched_kinds(self) -> list[WatchedKind]:
        """Every registered kind as the daemon watches it, sorted.

        Built from each provider's optional ``plural``/``namespaced``/``version``
        attributes, so a plugin's kind is watched without twc knowing it.
        """
        out = []
        for (group, kind), provider in sorted(self._providers.items()):
            plural = getattr(provider, "plural", None)
            namespaced = getattr(provider, "namespaced", True)
            version = getattr(provider, "version", None)
            out.append(
                WatchedKind(
                    api_group=group,
                    kind=kind,
                    version=version if isinstance(version, str) and version else "v1",
                    plural=plural if isinstance(plural, str) and plural else f"{kind.lower()}s",
                    namespaced=bool(namespaced),
                )
            )
        return out

    def get(self, api_group: str, kind: str) -> ConnectionProvider:
        """Return the provider for (``api_group``, ``kind``).

        Raises:
            TwcConnectionError: ``UnknownConnectionKind`` if none is registered.
        """
        provider = self._providers.get((api_group, kind))
        if provider is None:
            known = ", ".join(f"{k}.{g}" for g, k in self.kinds())
            message = f"no connection provider for {kind}.{api_group} (registered: {known})"
            if self.load_errors:
                message += f"; plugins that failed to load: {'; '.join(self.load_errors)}"
            raise TwcConnectionError(Reason.UNKNOWN_CONNECTION_KIND, message)
        return provider

    def resolve(self, target: ConnectionTarget, fleet: Fleet) -> ResolvedConnection:
        """Resolve a reference through its kind's provider (once per fleet object: a
        fleet is immutable, so the answer for one of its references never changes).

        Raises:
            TwcConnectionError: ``UnknownConnectionKind`` or ``ConnectionNotFound``.
        """
        with self._memo_lock:
            entry = self._memo.get(id(fleet))
            if entry is not None and entry[0] is fleet:
                found = entry[1].get(target)
                if found is not None:
                    return found
        resolved = self.get(target.api_group, target.kind).resolve(target, fleet)
        with self._memo_lock:
            entry = self._memo.get(id(fleet))
            if entry is None or entry[0] is not fleet:
                entry = (fleet, {})
                self._memo[id(fleet)] = entry
                while len(self._memo) > 64:  # the fleets of the last iterations, per shard
                    self._memo.popitem(last=False)
            entry[1][target] = resolved
        return resolved

    def resolve_worker(self, worker: ResolvedWorker, fleet: Fleet) -> ResolvedConnection:
        """Resolve the connection ``worker`` uses.

        Raises:
            TwcConnectionError: ``UnknownConnectionKind`` or ``ConnectionNotFound``.
        """
        return self.resolve(worker.connection, fleet)


@functools.cache
def default_registry() -> Registry:
    """The process-wide registry: built-ins plus entry-point plugins, built once."""
    return Registry.from_entry_points()


def resolve_fleet_connections(
    fleet: Fleet, *, file: str = "<fleet>", registry: Registry | None = None
) -> dict[tuple[str, str], ResolvedConnection]:
    """Resolve the connection of every worker of ``fleet``.

    Args:
        fleet: A loaded fleet.
        file: File name for error messages.
        registry: Registry to use (default: :func:`default_registry`).

    Returns:
        ``(namespace, worker name)`` to the worker's connection.

    Raises:
        SpecError: Listing every reference that does not resolve, at the path where
            the reference is written, with the stable reason in the message (e.g.
            ``workers[1].connectionRef.objectRef: UnknownConnectionKind: ...``).
    """
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
