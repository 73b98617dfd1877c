"""What one shard's loop reads: the process's shared watches, cut to its namespaces.

A daemon running several shards keeps one watch per kind for all of them (one list and
one watch stream per kind, whatever the number of shards), and gives each shard's loop
views that show only the shard's namespaces (:func:`twc.shards.slice_fleet`,
:func:`twc.shards.slice_objects`). Each shard's loop is the ordinary
:class:`~twc.loop.daemon.Daemon`: it computes, hashes and applies its own slice and
never sees another shard's workers. The namespaces come from :class:`ShardNamespaces`,
which grows when the assignment gives the shard a new namespace.

A change seen by a shared watch wakes the loops of the shards whose namespaces hold the
object (:class:`FanoutWakeup`), and a fleet-file edit those of the shards whose part of
the file it changed (:class:`FleetEditWakeup`); a cluster-scoped object's change, a
re-list and an edit outside the namespaced lists wake every shard's loop, and the shards
it does not concern find their slice unchanged and go back to sleep.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any, TypeVar, cast

from twc.desired import ObjectList
from twc.kube.watch import NativeSnapshot, NativeSource, QueueSource
from twc.shards import NamespaceGroups, namespaces_changed, slice_fleet
from twc.spec import Fleet

__all__ = [
    "FanoutWakeup",
    "FleetEditWakeup",
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

    def set_each(self, changed: Collection[str]) -> frozenset[str]:
        """Wake the subscribers holding any of ``changed``; the namespaces of
        ``changed`` that no subscriber holds (yet) are returned."""
        if not changed:
            return frozenset()
        super().set()
        with self._lock:
            subscribers = list(self._subscribers.items())
        held: set[str] = set()
        for event, namespaces in subscribers:
            mine = set(changed) if namespaces is None else set(changed) & set(namespaces())
            if mine:
                held |= mine
                event.set()
        return frozenset(changed) - held


class FleetEditWakeup:
    """What a fleet-file edit wakes in a sharded daemon: the loops of the shards whose
    part of the file changed (:func:`twc.shards.namespaces_changed`), not every loop.

    The file watch calls :meth:`set` once it has parsed the new bytes; this compares
    that parse with the one before. An edit that may concern every shard (the
    defaults, a cluster-scoped connection), an invalid file, or the first edit seen
    wakes every loop, as before. So does a version this never compared: two writes
    within one look of the watch, the first parsed by a loop woken meanwhile (``parses``
    counted more than one parse since the last edit), since that loop may have used a
    part of the file the second write set back. A namespace no shard holds yet wakes
    ``unassigned`` (the assignment's own loop), which gives it to a shard and wakes
    that one.
    """

    def __init__(
        self,
        fanout: FanoutWakeup,
        fleet: Callable[[], Fleet],
        *,
        parses: Callable[[], int],
        unassigned: Callable[[], None] | None = None,
    ) -> None:
        """Wake through ``fanout``; ``fleet`` is the loops' cached reader (already
        holding the new parse when :meth:`set` is called), ``parses`` how many parses
        it has made."""
        self._fanout = fanout
        self._fleet = fleet
        self._parses = parses
        self._unassigned = unassigned
        self._last: Fleet | None = None
        self._last_parses = -1
        self.targeted = 0
        """Edits that woke only the shards they concern (for tests)."""

    def set(self) -> None:
        """Wake the loops the last edit concerns."""
        try:
            new: Fleet | None = self._fleet()
        except Exception:  # noqa: BLE001 - every loop reads it and reports why
            new = None
        parses, self._last_parses = self._last_parses, self._parses()
        old, self._last = self._last, new
        unseen = self._last_parses - parses > 1
        changed = None if old is None or new is None or unseen else namespaces_changed(old, new)
        if changed is None:
            self._fanout.set()
            return
        self.targeted += 1
        if self._fanout.set_each(changed) and self._unassigned is not None:
            self._unassigned()


_V = TypeVar("_V")
_R = TypeVar("_R")
_C = TypeVar("_C")


def shard_keyed(
    read: Callable[[], Mapping[str, Mapping[str, _V]]],
    namespaces: Callable[[], tuple[str, ...]],
) -> Callable[[], dict[str, _V]]:
    """``read`` (a shared cache's ``<namespace>/<name>`` keyed reading per namespace:
    replicas, Deployments; :meth:`~twc.kube.caches.DeploymentCache.by_namespace`) cut to
    the shard's namespaces: the deletion guard counts the workers the shard runs, and
    another shard's are not among them. A shard takes its own namespaces' parts: a
    Deployment event elsewhere costs it its own size, not the fleet's."""

    def cut(found: Mapping[str, Mapping[str, _V]], mine: frozenset[str]) -> dict[str, _V]:
        return {k: v for ns in sorted(mine) for k, v in (found.get(ns) or {}).items()}

    return _cut(read, namespaces, cut)


def shard_keys(
    read: Callable[[], Mapping[str, Collection[str]]],
    namespaces: Callable[[], tuple[str, ...]],
) -> Callable[[], frozenset[str]]:
    """``read`` (a shared cache's ``<namespace>/<name>`` keys per namespace: the
    autoscaled Deployments) cut to the shard's namespaces."""

    def cut(found: Mapping[str, Collection[str]], mine: frozenset[str]) -> frozenset[str]:
        return frozenset(k for ns in mine for k in found.get(ns, ()))

    return _cut(read, namespaces, cut)


def _cut(
    read: Callable[[], _R],
    namespaces: Callable[[], tuple[str, ...]],
    cut: Callable[[_R, frozenset[str]], _C],
) -> Callable[[], _C]:
    last: list[tuple[_R, tuple[str, ...], _C]] = []

    def cached() -> _C:
        found, wanted = read(), namespaces()
        if last and last[0][0] is found and last[0][1] == wanted:
            # The shared cache hands out the same reading until its watch sees a change:
            # cutting 5000 workers' keys on every iteration of every shard grew a
            # shard's iteration with the fleet.
            return last[0][2]
        value = cut(found, frozenset(wanted))
        last[:] = [(found, wanted, value)]
        return value

    return cached


_QUEUES = "Queue"
_WORKERS = "TemporalWorker"
"""Keys of the shared lists in a :class:`~twc.shards.NamespaceGroups` (the native
kinds' own keys are their CRD names, never these)."""


def _parts_of(
    groups: Mapping[str, tuple[Any, ...]], namespaces: tuple[str, ...]
) -> tuple[tuple[Any, ...], ...]:
    """A shard's part of a watch's groups, shaped as :meth:`NamespaceGroups.parts`."""
    return tuple(groups.get(ns, ()) for ns in (NamespaceGroups.CLUSTER, *namespaces))


def _same_parts(a: tuple[tuple[Any, ...], ...], b: tuple[tuple[Any, ...], ...]) -> bool:
    """Whether two cuts are of the same groups, by identity (group by group)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


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
        self._key: tuple[int, tuple[str, ...]] | None = None
        self._sliced: Fleet | None = None

    def __call__(self) -> Fleet:
        """The shard's fleet.

        Raises:
            SpecError: The fleet file is invalid.
        """
        fleet = self._read()
        key = (id(fleet), self._namespaces())
        if key != self._key or self._sliced is None:
            # The cached reader returns the same object until the file changes; slice
            # again only then, or when the shard got a namespace.
            sliced = slice_fleet(fleet, key[1])
            if self._sliced is None or sliced != self._sliced:
                self._sliced = sliced
            # else: an edit elsewhere in the file left this shard's part as it was. The
            # same object tells the loop its desired state is unchanged, so the shard
            # does not compute it again (one edit wakes every shard's loop).
            self._key = key
        return self._sliced


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
        self._last: tuple[tuple[tuple[Any, ...], ...], ObjectList] | None = None

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
        """The shard's objects as the desired state's input (unknown until listed).

        The same value, by identity, while the shard's Queues are the same (see
        :meth:`ShardNative.observed`).
        """
        parts = self._parts()
        if parts is None:
            return self._shared.observed()
        if self._last is not None and _same_parts(self._last[0], parts):
            return self._last[1]
        sliced = ObjectList.known(itertools.chain.from_iterable(parts), trim=False)
        if self._last is not None and self._last[1] == sliced:
            sliced = self._last[1]
        self._last = (parts, sliced)
        return sliced

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
        self._slices: dict[str, tuple[tuple[tuple[Any, ...], ...], ObjectList]] = {}
        """Per kind key: the groups the slice was made of, and the slice."""

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
        """Per kind key, the shard's objects (a kind whose list failed stays unknown).

        A kind's slice is made again only when the objects of the shard's namespaces
        (or its namespaces) changed: the same value, by identity, is what lets the loop
        see at once that its desired state is unchanged. Another shard's status write
        changes only that shard's group (:class:`~twc.shards.NamespaceGroups`), so this
        costs the shard's namespaces, not the fleet.
        """
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
            cached = self._slices.get(key)
            if cached is not None and _same_parts(cached[0], parts):
                out[key] = cached[1]
                continue
            sliced = ObjectList.of_api(itertools.chain.from_iterable(parts), copy=False)
            if cached is not None and cached[1] == sliced:
                # Written again but equal (a status the same as before): the same value.
                sliced = cached[1]
            self._slices[key] = (parts, sliced)
            out[key] = sliced
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
