"""Watches: the cluster's objects kept in memory, one list + watch per kind.

:class:`ObjectWatcher` keeps one kind's objects from a list + watch in a background
thread and wakes the loop on every change that matters (spec, labels; not status); a
periodic re-list is the safety net. Every request has a client-side timeout. Because the
desired state deletes whatever a successful observation no longer holds:

* a failed list makes the kind *unknown* until a list succeeds again;
* a list answering 404 means "no objects" only when the CRD itself is gone;
* an object leaves only when observed deleted: a ``DELETED`` event, or a re-list without
  it *and* a GET that answers 404 (or shows it no longer matches the selector).

:class:`QueueWatcher` tracks labelled kmsvc Queues; :class:`NativeWatch` TemporalWorkers
and every connection kind the registry knows. ``Static*`` sources hold fixed objects.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from twc.connections import WatchedKind
from twc.desired import QUEUE_PLURAL, ObjectList, kind_key, object_key
from twc.kube.client import status_of
from twc.spec import WORKER_ENABLED_LABEL
from twc.spec.crds import CRD_VERSION, WORKER_GROUP

__all__ = [
    "LABEL_SELECTOR",
    "LIST_PAGE_SIZE",
    "QUEUE_GROUP",
    "QUEUE_VERSION",
    "CrdLookup",
    "ListFailed",
    "NativeSnapshot",
    "NativeSource",
    "NativeWatch",
    "ObjectWatcher",
    "QueueSource",
    "QueueWatcher",
    "StaticNative",
    "StaticQueues",
    "builtin_lister",
    "crd_lookup",
    "custom_lister",
    "list_failure",
]

logger = logging.getLogger(__name__)

QUEUE_GROUP = "kmsvc.io"
QUEUE_VERSION = "v1"
LABEL_SELECTOR = f"{WORKER_ENABLED_LABEL}=true"
WORKER_PLURAL = "temporalworkers"


@dataclass(frozen=True, slots=True)
class NativeSnapshot:
    """The TemporalWorker and connection objects read from the cluster."""

    workers: tuple[Mapping[str, Any], ...] = ()
    """TemporalWorker objects."""
    connections: Mapping[WatchedKind, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    """Objects of each watched connection kind."""

    def observed(self) -> dict[str, ObjectList]:
        """Per kind key, the objects as the desired state's input."""
        out = {kind_key("TemporalWorker", WORKER_GROUP): ObjectList.known(self.workers, trim=False)}
        for kind, objects in self.connections.items():
            out[kind_key(kind.kind, kind.api_group)] = ObjectList.known(objects, trim=False)
        return out


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

    def observed(self) -> ObjectList:
        """The current objects as the desired state's input (unknown until listed)."""
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

    def observed(self) -> ObjectList:
        """The objects, known."""
        return ObjectList.known(self._objects, trim=False)

    def replace(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Swap the objects, as a watch event would, and wake the loop."""
        self._objects = tuple(objects)
        if self._wakeup is not None:
            self._wakeup.set()


def wake(event: threading.Event, namespace: str | None) -> None:
    """Set ``event`` for a change to one object in ``namespace`` (``None``: a
    cluster-scoped object); an event with ``set_for`` (a sharded daemon's fanout) wakes
    only the shards that own the namespace."""
    set_for = getattr(event, "set_for", None)
    if callable(set_for):
        set_for(namespace)
    else:
        event.set()


def _gone(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 410


def _not_found(exc: BaseException) -> bool:
    return getattr(exc, "status", None) == 404


def list_failure(exc: BaseException) -> str:
    """A failed list in words: the HTTP status and reason, else the error's text."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if isinstance(status, int):
        return f"{status} {reason or ''}".strip()
    return str(exc) or type(exc).__name__


class ListFailed(RuntimeError):
    """A list whose answer cannot be taken as the kind's objects (the kind is unknown)."""


CrdLookup = Callable[[str], bool]
"""``crd_exists(name)``: whether the CustomResourceDefinition ``<plural>.<group>`` is
installed; raises when that cannot be told (the API server fails, access denied)."""


def crd_lookup(custom_api: Any) -> CrdLookup:
    """The CRD check over the same client as ``custom_api`` (apiextensions ``get``)."""

    def exists(name: str) -> bool:
        from kubernetes import client

        api = client.ApiextensionsV1Api(custom_api.api_client)
        try:
            api.read_custom_resource_definition(
                name, _request_timeout=(_CONNECT_TIMEOUT, _CRD_TIMEOUT)
            )
        except Exception as exc:
            if _not_found(exc):
                return False
            raise
        return True

    return exists


def _selector_matches(selector: str, obj: Mapping[str, Any]) -> bool:
    # The watches use equality selectors only (``key=value,...``).
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = (meta or {}).get("labels") or {} if isinstance(meta, Mapping) else {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


LIST_PAGE_SIZE = 500
"""Objects per page of a watcher's list (client-go's reflector pages by 500 too)."""

Lister = Callable[..., Any]
"""Lists one kind across namespaces: called with the list's keyword arguments it returns
the list as plain JSON data; with ``watch=True`` and ``_preload_content=False`` it returns
the streaming response (what ``kubernetes.watch.Watch.stream`` reads)."""


def custom_lister(custom_api: Any, group: str, version: str, plural: str) -> Lister:
    """The lister of a custom resource (or any kind under ``/apis/<group>``)."""

    def list_objects(**kwargs: Any) -> Any:
        return custom_api.list_cluster_custom_object(group, version, plural, **kwargs)

    return list_objects


def builtin_lister(list_for_all_namespaces: Callable[..., Any]) -> Lister:
    """The lister of a built-in kind from its typed ``list_*_for_all_namespaces`` call
    (read as raw JSON, not the client's models)."""

    def list_objects(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return list_for_all_namespaces(**kwargs)
        response = list_for_all_namespaces(_preload_content=False, **kwargs)
        return json.loads(response.data)

    return list_objects


class ObjectWatcher:
    """List + watch the objects of one kind in a background thread.

    Namespaced resources are listed across all namespaces; cluster-scoped ones the same
    way (``list_cluster_custom_object`` serves both). Built-in kinds (Deployments,
    Secrets) are watched the same way through a ``lister``; ``keep`` trims what is held
    of each object, so a cache of thousands stays small.
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
        crd_exists: CrdLookup | None = None,
        lister: Lister | None = None,
        keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
        field_selector: str = "",
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        """Prepare the watcher.

        Args:
            custom_api: A ``kubernetes.client.CustomObjectsApi`` (unused with
                ``lister``).
            group: API group of the resource.
            version: Served version to read.
            plural: The resource's plural name.
            resync_interval: Seconds between full re-lists.
            label_selector: Which objects to track (all when empty).
            watch_timeout: Server-side timeout of one watch request, in seconds; it
                also bounds how long :meth:`stop` may take to be noticed.
            retry_delay: Seconds to wait after a failed list or watch.
            clock: Monotonic time.
            content: What of an object wakes the loop when it changes (labels and spec
                by default).
            request_timeout: Client-side read timeout of a list, in seconds (a watch
                waits this much longer than its server-side timeout), so a hung API
                server fails the request instead of stalling the thread.
            crd_exists: Whether the resource's CRD is installed, asked when a list
                answers 404 (a GET of the CRD over the same client by default).
            lister: Lists (and watches) the kind; the custom resource
                ``group/version/plural`` by default.
            keep: What of each object to hold (the whole object by default).
            field_selector: Which objects to track by field (all when empty).
            page_size: Objects per page of a list (:data:`LIST_PAGE_SIZE`).
        """
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size}")
        self._page_size = page_size
        self._api = custom_api
        self._custom = lister is None
        self._list = lister or custom_lister(custom_api, group, version, plural)
        self._keep = keep
        self._fields = field_selector
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
        self._unknown: str | None = None
        self._crd_exists = crd_exists or crd_lookup(custom_api)
        self._answered = clock()

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
            objects = self._objects
        return None if objects is None else tuple(objects[k] for k in sorted(objects))

    def by_key(self) -> Mapping[str, Mapping[str, Any]] | None:
        """The current objects by key as a read-only view, or ``None`` before the first
        list. Every change publishes a new mapping, so a view never changes under its
        reader."""
        with self._lock:
            found = self._objects
        return None if found is None else MappingProxyType(found)

    def observed(self) -> ObjectList:
        """The objects as the desired state's input: unknown until the first list, and
        from a failed list until one succeeds again."""
        with self._lock:
            objects, unknown = self._objects, self._unknown
        if objects is None or unknown is not None:
            return ObjectList.unknown(f"{self.plural}.{self.group}: {unknown or 'not listed yet'}")
        return ObjectList.of_api(objects[k] for k in sorted(objects))

    @property
    def crd(self) -> str:
        """The CustomResourceDefinition's name, ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def quiet_window(self) -> float:
        """The longest a healthy watcher goes without an answer from the API server, in
        seconds: a watch request ends on the server's own timeout (at most the resync
        interval), and the next one starts at once."""
        return float(min(self._watch_timeout, max(1.0, self._resync)))

    def last_answer(self) -> float:
        """When (``clock``) the API server last answered: a list, a watch event or
        bookmark, a watch ending on its own timeout, or a client-error status. Before the
        first request: when the watcher was made."""
        with self._lock:
            return self._answered

    def _heard(self) -> None:
        now = self._clock()
        with self._lock:
            self._answered = now

    def failure(self) -> str | None:
        """Why the last list or watch failed, until a list succeeds again; else ``None``.

        The snapshot keeps the last objects listed meanwhile (it may be stale).
        """
        return self._failure

    def list_now(self) -> str:
        """List the objects, replace the snapshot and return the list's resourceVersion.

        A 404 means no objects only when the CRD is gone too. Objects the list no longer
        holds are confirmed gone with a GET each before they leave the snapshot.

        Raises:
            Exception: The list failed; the kind is unknown until a list succeeds.
        """
        try:
            items, version = self._pages()
        except Exception as exc:
            if self._custom and _not_found(exc) and self._crd_gone(exc):
                logger.warning("the %s CRD is not installed: no such objects", self.crd)
                self._replace({})
                self._unknown = None
                self._heard()
                return ""
            self._unknown = list_failure(exc)
            raise
        if self._custom:
            # A built-in kind's list is complete or fails: nothing to confirm by GET.
            items = self._confirm_missing(items)
        self._replace(items)
        self._unknown = None
        self._heard()
        return version

    def _pages(self) -> tuple[dict[str, Mapping[str, Any]], str]:
        """List page by page (the API server's ``continue``), trimming each page as it
        arrives, as client-go's reflector does; the objects and the list's
        resourceVersion."""
        items: dict[str, Mapping[str, Any]] = {}
        token = ""
        while True:
            result = self._list(
                label_selector=self._selector,
                limit=self._page_size,
                _request_timeout=(_CONNECT_TIMEOUT, self._request_timeout),
                **({"field_selector": self._fields} if self._fields else {}),
                **({"_continue": token} if token else {}),
            )
            for obj in result.get("items") or []:
                items[_watch_key(obj)] = self._kept(obj)
            meta = result.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return items, str(meta.get("resourceVersion", ""))
            del result  # the page's untrimmed objects go before the next one arrives

    def _crd_gone(self, listed: BaseException) -> bool:
        try:
            exists = self._crd_exists(self.crd)
        except Exception as exc:  # noqa: BLE001 - cannot tell: the kind stays unknown
            self._unknown = f"list answered 404 and the CRD cannot be read ({list_failure(exc)})"
            raise ListFailed(self._unknown) from listed
        if exists:
            self._unknown = "list answered 404 while the CRD exists"
            raise ListFailed(f"{self.crd}: {self._unknown}") from listed
        return True

    def _confirm_missing(self, items: dict[str, Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        """Objects known before and missing from this list are gone only if a GET says so.

        A GET that finds the object still matching the selector keeps it (the list was
        short); one that cannot answer keeps the object as it was last seen.
        """
        with self._lock:
            before = dict(self._objects or {})
        missing = sorted(set(before) - set(items))
        if not missing:
            return items
        out = dict(items)
        for key in missing:
            try:
                found = self._get(before[key])
            except Exception as exc:  # noqa: BLE001 - unconfirmed: keep it as last seen
                logger.warning(
                    "%s %s: not in the list and not readable (%s); kept until confirmed",
                    self.crd,
                    key,
                    list_failure(exc),
                )
                out[key] = before[key]
                continue
            if found is not None and _selector_matches(self._selector, found):
                logger.info("%s %s: missing from the list but still there", self.crd, key)
                out[key] = self._kept(found)
        return out

    def _get(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The object read again by name, or ``None`` when it is gone (404)."""
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), meta.get("namespace")
        timeout = (_CONNECT_TIMEOUT, self._request_timeout)
        try:
            if namespace:
                found = self._api.get_namespaced_custom_object(
                    self.group,
                    self.version,
                    namespace,
                    self.plural,
                    name,
                    _request_timeout=timeout,
                )
            else:
                found = self._api.get_cluster_custom_object(
                    self.group, self.version, self.plural, name, _request_timeout=timeout
                )
        except Exception as exc:
            if _not_found(exc):
                return None
            raise
        return found if isinstance(found, Mapping) else None

    def _replace(self, items: dict[str, Mapping[str, Any]]) -> None:
        with self._lock:
            changed = self._objects is None or self._content(self._objects) != self._content(items)
            self._objects = items
        if changed:
            self._wakeup.set()

    def _kept(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return self._keep(obj) if self._keep is not None else obj

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        key = _watch_key(obj)
        obj = self._kept(obj)
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
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
            wake(self._wakeup, str(namespace) if namespace else None)

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
                    self._list,
                    label_selector=self._selector,
                    **({"field_selector": self._fields} if self._fields else {}),
                    resource_version=version,
                    timeout_seconds=server_timeout,
                    allow_watch_bookmarks=True,
                    # Bookmarks and events keep a healthy stream talking; silence longer
                    # than the server's own timeout means the server hangs.
                    _request_timeout=(_CONNECT_TIMEOUT, server_timeout + self._request_timeout),
                )
                for event in stream:
                    self._heard()  # any event, bookmarks included
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
                else:
                    # The server ended the watch on its own timeout: it answers.
                    self._heard()
            except Exception as exc:  # noqa: BLE001 - the watch thread reports and retries every failure
                status = status_of(exc)
                if isinstance(status, int) and 400 <= status < 500:
                    # A client error is an answer (a denial will not pass by restarting).
                    self._heard()
                if _gone(exc):
                    version = ""
                    continue
                if self._stop.is_set():
                    break
                # Logged once per failure (by status and reason), not every retry.
                failure = list_failure(exc)
                log = logger.warning if failure != self._failure else logger.debug
                log("%s.%s watch failed (retrying): %s", self.plural, self.group, exc)
                self._failure = failure
                # A built-in kind's denial waits for the next resync (its readers fall
                # back to direct reads); a custom kind's is retried soon, as it holds
                # its workers.
                forbidden = status == 403 and not self._custom
                self._stop.wait(
                    max(self._retry_delay, self._resync) if forbidden else self._retry_delay
                )
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
        crd_exists: CrdLookup | None = None,
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
            crd_exists=crd_exists,
        )


_CONNECT_TIMEOUT = 5.0
"""Seconds to establish a connection to the API server."""
_CRD_TIMEOUT = 10.0
"""Seconds to wait for the CRD check's answer."""


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


def _connection_content(obj: Mapping[str, Any]) -> object:
    # Spec, deletion and finalizers matter (a deletion must be answered); status not.
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    return (obj.get("spec"), meta.get("deletionTimestamp"), meta.get("finalizers"))


def _worker_content(obj: Mapping[str, Any]) -> object:
    # The daemon's own status writes must not wake the loop: spec and generation only.
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    return (obj.get("spec"), meta.get("generation"), meta.get("uid"))


class NativeSource(Protocol):
    """Where the loop gets TemporalWorker and connection objects from."""

    def start(self, wakeup: threading.Event) -> None:
        """Begin tracking; set ``wakeup`` whenever an object changes."""
        ...

    def stop(self) -> None:
        """Stop tracking."""
        ...

    def snapshot(self) -> NativeSnapshot | None:
        """The current objects, or ``None`` until every kind was listed once."""
        ...

    def observed(self) -> dict[str, ObjectList]:
        """Per kind key, the objects as the desired state's input."""
        ...


class StaticNative:
    """A fixed set of objects (no cluster, or tests)."""

    def __init__(self, snapshot: NativeSnapshot | None = None) -> None:
        """Hold ``snapshot``; :meth:`replace` changes it and wakes the loop."""
        self._snapshot = snapshot or NativeSnapshot()
        self._wakeup: threading.Event | None = None

    def start(self, wakeup: threading.Event) -> None:
        """Remember the event to set on :meth:`replace`."""
        self._wakeup = wakeup

    def stop(self) -> None:
        """Nothing to stop."""

    def snapshot(self) -> NativeSnapshot:
        """The objects."""
        return self._snapshot

    def observed(self) -> dict[str, ObjectList]:
        """The objects per kind key, known."""
        return self._snapshot.observed()

    def replace(self, snapshot: NativeSnapshot) -> None:
        """Swap the objects and wake the loop."""
        self._snapshot = snapshot
        if self._wakeup is not None:
            self._wakeup.set()


class NativeWatch:
    """One :class:`ObjectWatcher` per kind: TemporalWorkers and every connection kind."""

    def __init__(
        self,
        custom_api: Any,
        kinds: Iterable[WatchedKind],
        *,
        resync_interval: float,
        clock: Callable[[], float] = time.monotonic,
        crd_exists: CrdLookup | None = None,
    ) -> None:
        """Prepare watchers for TemporalWorkers and each connection kind in ``kinds``."""
        self._workers = ObjectWatcher(
            custom_api,
            group=WORKER_GROUP,
            version=CRD_VERSION,
            plural=WORKER_PLURAL,
            resync_interval=resync_interval,
            clock=clock,
            content=_worker_content,
            crd_exists=crd_exists,
        )
        self._kinds = {
            kind: ObjectWatcher(
                custom_api,
                group=kind.api_group,
                version=kind.version,
                plural=kind.plural,
                resync_interval=resync_interval,
                clock=clock,
                content=_connection_content,
                crd_exists=crd_exists,
            )
            for kind in kinds
        }

    def _all(self) -> list[ObjectWatcher]:
        return [self._workers, *self._kinds.values()]

    def watchers(self) -> dict[str, ObjectWatcher]:
        """Per kind key, its watcher."""
        out = {kind_key("TemporalWorker", WORKER_GROUP): self._workers}
        for kind, watcher in self._kinds.items():
            out[kind_key(kind.kind, kind.api_group)] = watcher
        return out

    def start(self, wakeup: threading.Event) -> None:
        """Start every watcher."""
        for watcher in self._all():
            watcher.start(wakeup)

    def stop(self) -> None:
        """Stop every watcher."""
        for watcher in self._all():
            watcher.stop()

    def list_now(self) -> NativeSnapshot:
        """List every kind once (no watch): the snapshot of a one-shot command."""
        for watcher in self._all():
            watcher.list_now()
        found = self.snapshot()
        assert found is not None  # every watcher was just listed
        return found

    def failure(self) -> str | None:
        """Why a kind's last list or watch failed, until it lists again; else ``None``."""
        for watcher in self._all():
            found = watcher.failure()
            if found:
                return f"{watcher.plural}.{watcher.group}: {found}"
        return None

    def observed(self) -> dict[str, ObjectList]:
        """Per kind key, the objects as the desired state's input."""
        out = {kind_key("TemporalWorker", WORKER_GROUP): self._workers.observed()}
        for kind, watcher in self._kinds.items():
            out[kind_key(kind.kind, kind.api_group)] = watcher.observed()
        return out

    def snapshot(self) -> NativeSnapshot | None:
        """The objects of every kind, or ``None`` until each was listed once."""
        workers = self._workers.snapshot()
        if workers is None:
            return None
        connections: dict[WatchedKind, tuple[Mapping[str, Any], ...]] = {}
        for kind, watcher in self._kinds.items():
            found = watcher.snapshot()
            if found is None:
                return None
            connections[kind] = found
        return NativeSnapshot(workers=workers, connections=connections)
