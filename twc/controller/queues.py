"""kmsvc Queue objects from the cluster: the watch that wakes the loop, and their merge.

Platform teams create ``kmsvc.io/v1`` ``Queue`` objects; those labelled
``temporal.io/worker-enabled: "true"`` each derive a worker. :class:`QueueWatcher` keeps
the current set in memory from a list + watch in a background thread and sets the loop's
wake-up event on every change, so a new Queue is reconciled at once; a periodic re-list
is the safety net under the watch.

:func:`merge_queue_objects` adds the objects to the fleet one at a time, so an invalid
object (bad name, a derived worker clashing with the file's workers) is reported and
skipped without blocking the others, and the program, given only the accepted objects,
can never fail because of one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from twc.errors import SpecError
from twc.spec import (
    QUEUE_API_VERSION,
    QUEUE_KIND,
    WORKER_ENABLED_LABEL,
    Fleet,
    Queue,
    load_fleet,
    load_queue_object,
)

__all__ = [
    "LABEL_SELECTOR",
    "QUEUE_GROUP",
    "QUEUE_PLURAL",
    "QUEUE_VERSION",
    "MergedFleet",
    "ObjectWatcher",
    "QueueSource",
    "QueueWatcher",
    "RejectedQueue",
    "StaticQueues",
    "merge_queue_objects",
    "object_key",
]

logger = logging.getLogger(__name__)

QUEUE_GROUP = "kmsvc.io"
QUEUE_VERSION = "v1"
QUEUE_PLURAL = "queues"
LABEL_SELECTOR = f"{WORKER_ENABLED_LABEL}=true"


def object_key(obj: Mapping[str, Any]) -> str:
    """``<namespace>/<name>`` of a Queue object, tolerating malformed metadata."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "?/?"
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


@dataclass(frozen=True, slots=True)
class RejectedQueue:
    """A Queue object left out of the desired state, and why."""

    key: str
    """``<namespace>/<name>`` of the object."""
    reason: str
    """What is wrong with it, in words."""


@dataclass(frozen=True, slots=True)
class MergedFleet:
    """The fleet file plus the usable Queue objects."""

    fleet: Fleet
    """The merged, validated fleet."""
    accepted: tuple[Mapping[str, Any], ...]
    """The objects merged in, trimmed to what the program reads, sorted by key."""
    rejected: tuple[RejectedQueue, ...]
    """The objects skipped as invalid."""


def _trimmed(obj: Mapping[str, Any], queue: Queue) -> dict[str, Any]:
    # Only what load_queue_object reads: managedFields and status would make the
    # overlay large and its content churn without meaning anything.
    spec: dict[str, Any] = {"fifo": queue.fifo}
    if queue.partitions is not None:
        spec["partitions"] = queue.partitions
    return {
        "apiVersion": QUEUE_API_VERSION,
        "kind": QUEUE_KIND,
        "metadata": {
            "name": queue.name,
            "namespace": queue.namespace,
            "labels": dict(queue.labels),
        },
        "spec": spec,
    }


def _with_queues(fleet: Fleet, queues: Sequence[Queue], file: str) -> Fleet:
    # The same merge the program does (twc.components.program), so both sides agree.
    data = fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["queues"] = [
        *data.get("queues", []),
        *(q.model_dump(mode="json", by_alias=True, exclude_none=True) for q in queues),
    ]
    return load_fleet(data, file)


def merge_queue_objects(
    fleet: Fleet, objects: Iterable[Mapping[str, Any]], *, file: str
) -> MergedFleet:
    """Merge labelled Queue objects into the fleet, skipping the invalid ones.

    Objects whose queue the fleet file declares are left out (the file wins), and so
    are objects without the label. Each remaining object must convert to a
    :class:`~twc.spec.Queue` and keep the fleet valid when added; one that does not is
    rejected alone.

    Args:
        fleet: The fleet file, already validated.
        objects: Queue objects as the API returns them.
        file: The fleet file's name, for error messages.

    Returns:
        The merged fleet, the accepted objects and the rejected ones.
    """
    declared = {(q.namespace, q.name) for q in fleet.queues}
    rejected: list[RejectedQueue] = []
    candidates: dict[str, tuple[Queue, Mapping[str, Any]]] = {}
    for obj in objects:
        key = object_key(obj)
        try:
            queue = load_queue_object(obj)
        except SpecError as exc:
            rejected.append(RejectedQueue(key, "; ".join(exc.lines())))
            continue
        if not queue.worker_enabled or (queue.namespace, queue.name) in declared:
            continue
        candidates[f"{queue.namespace}/{queue.name}"] = (queue, obj)
    ordered = [candidates[k] for k in sorted(candidates)]

    accepted: list[tuple[Queue, Mapping[str, Any]]] = []
    merged = fleet
    try:
        # The common case: everything fits at once.
        merged = _with_queues(fleet, [q for q, _ in ordered], file) if ordered else fleet
        accepted = ordered
    except SpecError:
        # Find the culprits one by one; each accepted object keeps the fleet valid.
        for queue, obj in ordered:
            try:
                trial = _with_queues(fleet, [q for q, _ in accepted] + [queue], file)
            except SpecError as exc:
                reason = "; ".join(exc.lines())
                rejected.append(RejectedQueue(f"{queue.namespace}/{queue.name}", reason))
                continue
            accepted.append((queue, obj))
            merged = trial
    return MergedFleet(
        fleet=merged,
        accepted=tuple(_trimmed(obj, queue) for queue, obj in accepted),
        rejected=tuple(sorted(rejected, key=lambda r: r.key)),
    )


class QueueSource(Protocol):
    """Where the loop gets Queue objects from."""

    def start(self, wakeup: threading.Event) -> None:
        """Begin tracking; set ``wakeup`` whenever the set of objects changes."""
        ...

    def stop(self) -> None:
        """Stop tracking."""
        ...

    def snapshot(self) -> tuple[Mapping[str, Any], ...] | None:
        """The current objects, or ``None`` until the first list succeeded."""
        ...


class StaticQueues:
    """A fixed set of Queue objects (no cluster, or tests)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        """Hold ``objects``; :meth:`replace` changes them and wakes the loop."""
        self._objects = tuple(objects)
        self._wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        """Remember the event to set on :meth:`replace`."""
        self._wakeup = wakeup

    def stop(self) -> None:
        """Nothing to stop."""

    def snapshot(self) -> tuple[Mapping[str, Any], ...]:
        """The objects."""
        return self._objects

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Swap the objects, as a watch event would, and wake the loop."""
        self._objects = tuple(objects)
        if self._wakeup is not None:
            self._wakeup.set()


def _gone(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 410


def _not_found(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 404


class ObjectWatcher:
    """List + watch the objects of one custom resource in a background thread.

    Namespaced resources are listed across all namespaces; cluster-scoped ones the same
    way (``list_cluster_custom_object`` serves both).
    """

    def __init__(
        self,
        custom_api: Any,
        *,
        group: str,
        version: str,
        plural: str,
        resync_interval: float,
        label_selector: str = "",
        watch_timeout: int = 60,
        retry_delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        content: Callable[[Mapping[str, Any]], object] | None = None,
        request_timeout: float = 30.0,
    ) -> None:
        """Prepare the watcher.

        Args:
            custom_api: A ``kubernetes.client.CustomObjectsApi``.
            group: API group of the resource.
            version: Served version to read.
            plural: The resource's plural name.
            resync_interval: Seconds between full re-lists.
            label_selector: Which objects to track (all when empty).
            watch_timeout: Server-side timeout of one watch request, in seconds; it
                also bounds how long :meth:`stop` may take to be noticed.
            retry_delay: Seconds to wait after a failed list or watch.
            clock: Monotonic time.
            content: What of an object matters to the loop; a change of anything else
                (its status, bookkeeping) does not wake it. Labels and spec by default.
            request_timeout: Client-side read timeout of a list, in seconds; a watch
                waits this much longer than its server-side timeout. A hung API server
                (connections accepted, no answer) then fails the list or watch, which
                is reported and retried, instead of stalling the thread for good.
        """
        self._api = custom_api
        self.group = group
        self.version = version
        self.plural = plural
        self._resync = resync_interval
        self._selector = label_selector
        self._watch_timeout = watch_timeout
        self._retry_delay = retry_delay
        self._clock = clock
        self._content_of = content or _labels_and_spec
        self._request_timeout = request_timeout
        self._lock = threading.Lock()
        self._objects: dict[str, Mapping[str, Any]] | None = None
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self._failure: str | None = None

    def start(self, wakeup: threading.Event) -> None:
        """Start the background thread; ``wakeup`` is set on every change."""
        self._wakeup = wakeup
        self._thread = threading.Thread(
            target=self._run, name=f"twc-watch-{self.plural}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; it is a daemon thread, so this never blocks exit."""
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def snapshot(self) -> tuple[Mapping[str, Any], ...] | None:
        """The current objects sorted by key, or ``None`` before the first list."""
        with self._lock:
            if self._objects is None:
                return None
            return tuple(self._objects[k] for k in sorted(self._objects))

    def failure(self) -> str | None:
        """Why the last list or watch failed, until a list succeeds again; else ``None``.

        The snapshot keeps the last objects listed meanwhile (it may be stale).
        """
        return self._failure

    def list_now(self) -> str:
        """List the objects, replace the snapshot and return the list's resourceVersion.

        A missing CRD means there are no objects at all.
        """
        try:
            result = self._api.list_cluster_custom_object(
                self.group,
                self.version,
                self.plural,
                label_selector=self._selector,
                _request_timeout=(_CONNECT_TIMEOUT, self._request_timeout),
            )
        except Exception as exc:
            if not _not_found(exc):
                raise
            logger.warning(
                "the %s.%s CRD is not installed: no such objects", self.plural, self.group
            )
            self._replace({})
            return ""
        items = {_watch_key(o): o for o in result.get("items", [])}
        self._replace(items)
        return str((result.get("metadata") or {}).get("resourceVersion", ""))

    def _replace(self, items: dict[str, Mapping[str, Any]]) -> None:
        with self._lock:
            changed = self._objects is None or self._content(self._objects) != self._content(items)
            self._objects = items
        if changed:
            self._wakeup.set()

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        key = _watch_key(obj)
        with self._lock:
            current = dict(self._objects or {})
            before = current.get(key)
            if kind == "DELETED":
                current.pop(key, None)
            else:
                current[key] = obj
            self._objects = current
        if (
            kind == "DELETED"
            or before is None
            or self._content({key: before}) != self._content({key: obj})
        ):
            logger.info("%s.%s %s %s", self.plural, self.group, key, kind.lower())
            self._wakeup.set()

    def _run(self) -> None:
        from kubernetes import watch

        version = ""
        listed_at: float | None = None
        while not self._stop.is_set():
            try:
                if listed_at is None or self._clock() - listed_at >= self._resync or not version:
                    version = self.list_now()
                    listed_at = self._clock()
                    if self._failure is not None:
                        logger.info("%s.%s: listed again after a failure", self.plural, self.group)
                    self._failure = None
                    if not version:
                        # No CRD: nothing to watch; look again at the next resync.
                        self._stop.wait(min(self._resync, 30.0))
                        continue
                self._watch = watch.Watch()
                server_timeout = int(min(self._watch_timeout, max(1.0, self._resync)))
                stream = self._watch.stream(
                    self._api.list_cluster_custom_object,
                    self.group,
                    self.version,
                    self.plural,
                    label_selector=self._selector,
                    resource_version=version,
                    timeout_seconds=server_timeout,
                    allow_watch_bookmarks=True,
                    # Bookmarks and events keep a healthy stream talking; silence longer
                    # than the server's own timeout means the server hangs.
                    _request_timeout=(_CONNECT_TIMEOUT, server_timeout + self._request_timeout),
                )
                for event in stream:
                    if self._stop.is_set():
                        break
                    kind = event.get("type", "")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            version = ""  # expired: list again
                            break
                        raise RuntimeError(f"watch error: {obj.get('message', obj)}")
                    meta = obj.get("metadata") or {}
                    version = str(meta.get("resourceVersion") or version)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(kind, obj)
            except Exception as exc:
                if _gone(exc):
                    version = ""
                    continue
                if self._stop.is_set():
                    break
                logger.warning("%s.%s watch failed (retrying): %s", self.plural, self.group, exc)
                self._failure = str(exc) or type(exc).__name__
                self._stop.wait(self._retry_delay)
                version = ""
            finally:
                self._watch = None

    def _content(self, items: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        return {key: repr(self._content_of(obj)) for key, obj in items.items()}


class QueueWatcher(ObjectWatcher):
    """List + watch labelled kmsvc Queue objects across namespaces."""

    def __init__(
        self,
        custom_api: Any,
        *,
        resync_interval: float,
        label_selector: str = LABEL_SELECTOR,
        watch_timeout: int = 60,
        retry_delay: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Prepare the watcher (see :class:`ObjectWatcher`)."""
        super().__init__(
            custom_api,
            group=QUEUE_GROUP,
            version=QUEUE_VERSION,
            plural=QUEUE_PLURAL,
            resync_interval=resync_interval,
            label_selector=label_selector,
            watch_timeout=watch_timeout,
            retry_delay=retry_delay,
            clock=clock,
        )


_CONNECT_TIMEOUT = 5.0
"""Seconds to establish a connection to the API server."""


def _watch_key(obj: Mapping[str, Any]) -> str:
    # Cluster-scoped objects have no namespace: their name alone is the key.
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if isinstance(meta, Mapping) and not meta.get("namespace") and meta.get("name"):
        return str(meta["name"])
    return object_key(obj)


def _labels_and_spec(obj: Mapping[str, Any]) -> object:
    # What the daemon reads of a Queue; status and bookkeeping changes are ignored.
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    return (meta.get("labels"), obj.get("spec") if isinstance(obj, Mapping) else None)
