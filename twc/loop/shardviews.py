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
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, TypeVar

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
_S = TypeVar("_S", QueueSource, NativeSource)


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


def _cut(objects: Sequence[Mapping[str, Any]], namespaces: tuple[str, ...]) -> tuple[Any, ...]:
    """A shard's part of a shared list: the cluster-scoped objects (every shard's), then
    its namespaces' in order."""
    return tuple(itertools.chain.from_iterable(NamespaceGroups().parts("", objects, namespaces)))


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


class _ShardView(Generic[_S]):
    """A shared watch seen through one shard's namespaces; a change in them wakes the
    shard's loop (through ``fanout``)."""

    def __init__(
        self, shared: _S, namespaces: Callable[[], tuple[str, ...]], fanout: FanoutWakeup
    ) -> None:
        """View ``shared`` through ``namespaces``; wake-ups come through ``fanout``."""
        self._shared: _S = shared
        self._namespaces = namespaces
        self._fanout = fanout
        self._wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        """Subscribe the loop's wake-up (the shared watch is started once, elsewhere)."""
        self._wakeup = wakeup
        self._fanout.subscribe(wakeup, self._namespaces)

    def stop(self) -> None:
        """Unsubscribe."""
        if self._wakeup is not None:
            self._fanout.unsubscribe(self._wakeup)

    def failure(self) -> str | None:
        """The shared watch's last failure."""
        failure = getattr(self._shared, "failure", None)
        return failure() if callable(failure) else None


class ShardQueues(_ShardView[QueueSource]):
    """The shared Queue watch, cut to the shard's namespaces."""

    def snapshot(self) -> tuple[Mapping[str, Any], ...] | None:
        """The shard's Queue objects, or ``None`` until the shared watch listed."""
        found = self._shared.snapshot()
        return None if found is None else _cut(found, self._namespaces())

    def observed(self) -> ObjectList:
        """The shard's objects as the desired state's input (unknown until listed)."""
        found = self._shared.snapshot()
        if found is None:
            return self._shared.observed()
        return ObjectList.known(_cut(found, self._namespaces()), trim=False)


class ShardNative(_ShardView[NativeSource]):
    """The shared TemporalWorker and connection watches, cut to the shard's namespaces.

    Cluster-scoped objects (ClusterConnections) are every shard's; namespaced ones
    (TemporalWorkers, Connections) belong to the shard of their namespace.
    """

    def snapshot(self) -> NativeSnapshot | None:
        """The shard's objects, or ``None`` until every kind was listed once."""
        found = self._shared.snapshot()
        if found is None:
            return None
        namespaces = self._namespaces()
        return NativeSnapshot(
            workers=_cut(found.workers, namespaces),
            connections={k: _cut(v, namespaces) for k, v in found.connections.items()},
        )

    def observed(self) -> dict[str, ObjectList]:
        """Per kind key, the shard's objects (a kind whose list failed stays unknown)."""
        namespaces = self._namespaces()
        return {
            key: found
            if found.objects is None
            else ObjectList.of_api(_cut(found.objects, namespaces), copy=False)
            for key, found in self._shared.observed().items()
        }
