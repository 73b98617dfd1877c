"""What one shard's loop reads: the process's shared watches, cut to its namespaces.

A daemon running several shards keeps one watch per kind for all of them (one list and
one watch stream per kind, whatever the number of shards), and gives each shard's loop
views that show only the shard's namespaces (:func:`twc.shards.slice_fleet`,
:func:`twc.shards.slice_objects`). Each shard's loop is the ordinary
:class:`~twc.loop.daemon.Daemon`: it computes, hashes and applies its own slice and
never sees another shard's workers. The namespaces come from :class:`ShardNamespaces`,
which grows when the assignment gives the shard a new namespace.

A change seen by a shared watch wakes the loops of the shards whose namespaces hold the
object (:class:`FanoutWakeup`); a cluster-scoped object's change, a re-list and a
fleet-file edit wake every shard's loop.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any, TypeVar, cast

from twc.desired import ObjectList
from twc.kube.watch import NativeSnapshot, NativeSource, QueueSource
from twc.shards import NamespaceGroups, slice_fleet
from twc.spec import Fleet

__all__ = [
    "FanoutWakeup",
    "ShardFleet",
    "ShardNamespaces",
    "ShardNative",
    "ShardQueues",
    "shard_keyed",
    "shard_keys",
]


class FanoutWakeup(threading.Event):
    """The wake-up event the shared watches set: it sets the subscribed loops' own.

    A change to one namespaced object (:meth:`set_for`) wakes only the loops whose
    namespaces hold it; a change that names no namespace (a cluster-scoped object, a
    re-list, a fleet-file edit: :meth:`set`) wakes every loop. A namespace no shard has
    yet wakes none: the assignment gives it to a shard, which is woken then.
    """

    def __init__(self) -> None:
        """No subscribers yet."""
        super().__init__()
        self._lock = threading.Lock()
        self._subscribers: dict[threading.Event, Callable[[], tuple[str, ...]] | None] = {}

    def subscribe(
        self, event: threading.Event, namespaces: Callable[[], tuple[str, ...]] | None = None
    ) -> None:
        """Set ``event`` whenever a shared watch sees a change (in ``namespaces``, when
        given: read at each change, so a shard's new namespace counts at once)."""
        with self._lock:
            self._subscribers[event] = namespaces

    def unsubscribe(self, event: threading.Event) -> None:
        """Stop setting ``event``."""
        with self._lock:
            self._subscribers.pop(event, None)

    def set(self) -> None:
        """Wake every subscriber."""
        self.set_for(None)

    def set_for(self, namespace: str | None) -> None:
        """Wake the subscribers a change in ``namespace`` concerns (every one for
        ``None``)."""
        super().set()
        with self._lock:
            subscribers = list(self._subscribers.items())
        for event, namespaces in subscribers:
            if namespace is None or namespaces is None or namespace in namespaces():
                event.set()


_V = TypeVar("_V")


def shard_keyed(
    read: Callable[[], Mapping[str, Mapping[str, _V]]],
    namespaces: Callable[[], tuple[str, ...]],
) -> Callable[[], dict[str, _V]]:
    """``read`` (a shared cache's ``<namespace>/<name>`` keyed reading per namespace:
    replicas, Deployments; :meth:`~twc.kube.caches.DeploymentCache.by_namespace`) cut to
    the shard's namespaces: the deletion guard counts the workers the shard runs, and
    another shard's are not among them."""

    def cut() -> dict[str, _V]:
        found = read()
        return {k: v for ns in namespaces() for k, v in (found.get(ns) or {}).items()}

    return cut


def shard_keys(
    read: Callable[[], Mapping[str, Collection[str]]],
    namespaces: Callable[[], tuple[str, ...]],
) -> Callable[[], frozenset[str]]:
    """``read`` (a shared cache's ``<namespace>/<name>`` keys per namespace: the
    autoscaled Deployments) cut to the shard's namespaces."""

    def cut() -> frozenset[str]:
        found = read()
        return frozenset(k for ns in namespaces() for k in found.get(ns, ()))

    return cut


_QUEUES = "Queue"
_WORKERS = "TemporalWorker"
"""Keys of the shared lists in a :class:`~twc.shards.NamespaceGroups` (the native
kinds' own keys are their CRD names, never these)."""


def _parts_of(
    groups: Mapping[str, tuple[Any, ...]], namespaces: tuple[str, ...]
) -> tuple[tuple[Any, ...], ...]:
    """A shard's part of a watch's groups, shaped as :meth:`NamespaceGroups.parts`."""
    return tuple(groups.get(ns, ()) for ns in (NamespaceGroups.CLUSTER, *namespaces))


class ShardNamespaces:
    """The namespaces of one shard, as the assignment currently gives them."""

    def __init__(self, initial: tuple[str, ...] = ()) -> None:
        """Start with ``initial``."""
        self._lock = threading.Lock()
        self._namespaces = tuple(sorted(initial))

    def __call__(self) -> tuple[str, ...]:
        """The namespaces now, sorted."""
        with self._lock:
            return self._namespaces

    def update(self, namespaces: tuple[str, ...]) -> bool:
        """Replace the namespaces; whether they changed."""
        ordered = tuple(sorted(namespaces))
        with self._lock:
            changed = ordered != self._namespaces
            self._namespaces = ordered
        return changed


class ShardFleet:
    """The fleet file (one shared, cached parse) sliced to the shard's namespaces."""

    def __init__(self, read: Callable[[], Fleet], namespaces: Callable[[], tuple[str, ...]]):
        """Slice what ``read`` returns to ``namespaces``."""
        self._read = read
        self._namespaces = namespaces

    def __call__(self) -> Fleet:
        """The shard's fleet.

        Raises:
            SpecError: The fleet file is invalid.
        """
        return slice_fleet(self._read(), self._namespaces())


class ShardQueues:
    """The shared Queue watch, cut to the shard's namespaces."""

    def __init__(
        self,
        shared: QueueSource,
        namespaces: Callable[[], tuple[str, ...]],
        fanout: FanoutWakeup,
        groups: NamespaceGroups | None = None,
    ) -> None:
        """View ``shared`` through ``namespaces``; wake-ups come through ``fanout``;
        ``groups`` is shared by every shard's view of ``shared``."""
        self._shared = shared
        self._namespaces = namespaces
        self._fanout = fanout
        self._groups = groups or NamespaceGroups()
        self._wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        """Subscribe the loop's wake-up (the shared watch is started once, elsewhere)."""
        self._wakeup = wakeup
        self._fanout.subscribe(wakeup, self._namespaces)

    def stop(self) -> None:
        """Unsubscribe."""
        if self._wakeup is not None:
            self._fanout.unsubscribe(self._wakeup)

    def snapshot(self) -> tuple[Mapping[str, Any], ...] | None:
        """The shard's Queue objects, or ``None`` until the shared watch listed."""
        parts = self._parts()
        return None if parts is None else tuple(itertools.chain.from_iterable(parts))

    def _parts(self) -> tuple[tuple[Any, ...], ...] | None:
        grouped = getattr(self._shared, "grouped", None)
        groups = grouped() if callable(grouped) else None
        if groups is not None:
            # The watch keeps its objects by namespace: a change cost its namespace.
            return _parts_of(groups, self._namespaces())
        found = self._shared.snapshot()
        if found is None:
            return None
        return self._groups.parts(_QUEUES, found, self._namespaces())

    def observed(self) -> ObjectList:
        """The shard's objects as the desired state's input (unknown until listed)."""
        parts = self._parts()
        if parts is None:
            return self._shared.observed()
        return ObjectList.known(itertools.chain.from_iterable(parts), trim=False)

    def failure(self) -> str | None:
        """The shared watch's last failure."""
        failure = getattr(self._shared, "failure", None)
        return failure() if callable(failure) else None


class ShardNative:
    """The shared TemporalWorker and connection watches, cut to the shard's namespaces.

    Cluster-scoped objects (ClusterConnections) are every shard's; namespaced ones
    (TemporalWorkers, Connections) belong to the shard of their namespace.
    """

    def __init__(
        self,
        shared: NativeSource,
        namespaces: Callable[[], tuple[str, ...]],
        fanout: FanoutWakeup,
        groups: NamespaceGroups | None = None,
    ) -> None:
        """View ``shared`` through ``namespaces``; wake-ups come through ``fanout``;
        ``groups`` is shared by every shard's view of ``shared``."""
        self._shared = shared
        self._namespaces = namespaces
        self._fanout = fanout
        self._groups = groups or NamespaceGroups()
        self._wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        """Subscribe the loop's wake-up."""
        self._wakeup = wakeup
        self._fanout.subscribe(wakeup, self._namespaces)

    def stop(self) -> None:
        """Unsubscribe."""
        if self._wakeup is not None:
            self._fanout.unsubscribe(self._wakeup)

    def snapshot(self) -> NativeSnapshot | None:
        """The shard's objects, or ``None`` until every kind was listed once."""
        found = self._shared.snapshot()
        if found is None:
            return None
        namespaces = self._namespaces()

        def cut(
            key: Hashable, objects: tuple[Mapping[str, Any], ...]
        ) -> tuple[Mapping[str, Any], ...]:
            return tuple(
                itertools.chain.from_iterable(self._groups.parts(key, objects, namespaces))
            )

        return NativeSnapshot(
            workers=cut(_WORKERS, found.workers),
            connections={kind: cut(kind, objects) for kind, objects in found.connections.items()},
        )

    def observed(self) -> dict[str, ObjectList]:
        """Per kind key, the shard's objects (a kind whose list failed stays unknown)."""
        namespaces = self._namespaces()
        out: dict[str, ObjectList] = {}
        for key, found in self._found().items():
            if isinstance(found, ObjectList):
                if found.objects is None:
                    out[key] = found
                    continue
                parts = self._groups.parts(key, found.objects, namespaces)
            else:
                parts = _parts_of(found, namespaces)
            out[key] = ObjectList.of_api(itertools.chain.from_iterable(parts), copy=False)
        return out

    def _found(self) -> Mapping[str, ObjectList | Mapping[str, tuple[Any, ...]]]:
        # The watches' groups by namespace where they keep them (a change then costs its
        # namespace), else their lists, grouped here once per version.
        grouped = getattr(self._shared, "grouped", None)
        if callable(grouped):
            return cast(Mapping[str, ObjectList | Mapping[str, tuple[Any, ...]]], grouped())
        return self._shared.observed()

    def failure(self) -> str | None:
        """The shared watches' last failure."""
        failure = getattr(self._shared, "failure", None)
        return failure() if callable(failure) else None
