"""Watches: one kind's objects kept in memory from a paged list + watch, re-listed
periodically, every request with a client-side timeout. Since the desired state deletes
what an observation no longer holds: a failed list makes the kind *unknown*; a 404 list
means "no objects" only when the CRD is gone; an object leaves only on a ``DELETED`` event
or a re-list without it *and* a GET answering 404 (or showing it no longer selected)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType
from typing import Any, Protocol

from twc.connections import WatchedKind
from twc.desired import QUEUE_PLURAL, WORKER_KIND_KEY, ObjectList, kind_key, object_key
from twc.kube.client import status_of, unless_404
from twc.kube.crds import is_twc_crd
from twc.native.objects import WORKER_PLURAL, metadata, template_native
from twc.spec import API_GROUP, CONNECTION_VERSION, WORKER_ENABLED_LABEL, part
from twc.spec.crds import (
    CRD_VERSION,
    OFFICIAL_WORKER_KIND,
    OFFICIAL_WORKER_PLURAL,
    RESOURCE_TEMPLATE_KIND,
    RESOURCE_TEMPLATE_PLURAL,
    WORKER_GROUP,
)

logger = logging.getLogger(__name__)

QUEUE_GROUP = "kmsvc.io"
QUEUE_VERSION = "v1"
LABEL_SELECTOR = f"{WORKER_ENABLED_LABEL}=true"
LIST_PAGE_SIZE = 500  # objects per page of a list, as client-go's reflector
_CONNECT_TIMEOUT = 5.0

CrdLookup = Callable[[str], bool]
"""Whether the CRD ``<plural>.<group>`` is installed; raises when that cannot be told."""
Lister = Callable[..., Any]
"""Lists one kind across namespaces as JSON data (with ``watch=True``, the stream)."""
Content = Callable[[Mapping[str, Any]], object]


def _connection_content(obj: Mapping[str, Any]) -> object:
    meta = metadata(obj)
    # Annotations: a ClusterConnection's secretSource and allowedNamespaces are twc's there.
    fields = ("annotations", "deletionTimestamp", "finalizers")
    return (obj.get("spec"), *(meta.get(f) for f in fields))


def _worker_content(obj: Mapping[str, Any]) -> object:
    # The daemon's own status writes must not wake the loop: spec and generation only.
    return (obj.get("spec"), metadata(obj).get("generation"), metadata(obj).get("uid"))


@dataclass(frozen=True, slots=True)
class Resource:
    """Which objects a watcher keeps, and what of them."""

    group: str
    version: str
    plural: str
    label_selector: str = ""
    field_selector: str = ""
    content: Content = lambda obj: (metadata(obj).get("labels"), obj.get("spec"))
    """What of an object wakes the loop when it changes."""
    keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = lambda obj: obj
    """What of each object to hold (the whole object by default)."""
    served: Callable[[str], bool] = lambda _crd: True
    """Whether the CRD's objects are twc's to read at all (``False``: none, listed again later)."""


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """How a watcher talks to the API server (seconds)."""

    resync_interval: float
    watch_timeout: int = 60
    """Server-side timeout of one watch request (bounds how long a stop takes)."""
    retry_delay: float = 2.0
    request_timeout: float = 30.0
    """Client-side read timeout of a list or GET (a watch adds its server-side one)."""
    page_size: int = LIST_PAGE_SIZE


@dataclass(frozen=True, slots=True)
class NativeSnapshot:
    """The TemporalWorker and connection objects read from the cluster."""

    workers: tuple[Mapping[str, Any], ...] = ()
    connections: Mapping[WatchedKind, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)


class QueueSource(Protocol):
    """Where the loop gets Queue objects from."""

    def start(self, wakeup: threading.Event) -> None: ...
    def stop(self) -> None: ...
    def observed(self) -> ObjectList: ...


class NativeSource(Protocol):
    """Where the loop gets TemporalWorker and connection objects from."""

    def start(self, wakeup: threading.Event) -> None: ...
    def stop(self) -> None: ...
    def observed(self) -> dict[str, ObjectList]: ...


class StaticQueues:
    """A fixed set of Queue objects (no cluster)."""

    def __init__(self, objects: Iterable[Mapping[str, Any]] = ()) -> None:
        self._objects = tuple(objects)

    def start(self, wakeup: threading.Event) -> None: ...  # nothing changes: no thread
    def stop(self) -> None: ...

    def observed(self) -> ObjectList:
        return ObjectList.known(self._objects, trim=False)


def wake(event: threading.Event, namespace: str | None) -> None:
    """Set ``event`` for a change in ``namespace`` (a fanout's ``set_for`` if it has one)."""
    set_for = getattr(event, "set_for", None)
    if callable(set_for):
        set_for(namespace)
    else:
        event.set()


def list_failure(exc: BaseException) -> str:
    """A failed list in words: the HTTP status and reason, else the error's text."""
    status = status_of(exc)
    if status is not None:
        return f"{status} {getattr(exc, 'reason', None) or ''}".strip()
    return str(exc) or type(exc).__name__


class ListFailed(RuntimeError):
    """A list whose answer cannot be taken as the kind's objects (the kind is unknown)."""


def _crd_labels(custom_api: Any, name: str) -> Mapping[str, str] | None:
    """The labels of the CRD ``name`` (``None``: not installed) over ``custom_api``'s client."""
    from kubernetes import client

    api = client.ApiextensionsV1Api(custom_api.api_client)
    read, timeout = api.read_custom_resource_definition, (_CONNECT_TIMEOUT, 10.0)
    found = unless_404(read, name, _request_timeout=timeout)
    return None if found is None else found.metadata.labels or {}


def builtin_lister(list_for_all_namespaces: Callable[..., Any]) -> Lister:
    """A built-in kind's lister (raw JSON) from its ``list_*_for_all_namespaces`` call."""

    def list_objects(**kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return list_for_all_namespaces(**kwargs)
        return json.loads(list_for_all_namespaces(_preload_content=False, **kwargs).data)

    return list_objects


def _selector_matches(selector: str, obj: Mapping[str, Any]) -> bool:
    # Equality selectors only (``key=value,...``).
    labels = metadata(obj).get("labels") or {}
    terms = (t.partition("=") for t in selector.split(",") if t.strip())
    return all(labels.get(k.strip()) == v.strip() for k, _, v in terms)


class ObjectWatcher:
    """List + watch one kind's objects (across namespaces) in a background thread: custom
    resources through ``custom_api``, built-in kinds through a ``lister`` (no CRD check, no
    GET to confirm a missing object)."""

    def __init__(
        self,
        custom_api: Any,
        resource: Resource,
        settings: WatchSettings,
        *,
        lister: Lister | None = None,
        crd_exists: CrdLookup | None = None,
    ) -> None:
        """``crd_exists`` is asked when a list answers 404 (a GET of the CRD by default)."""
        if settings.page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {settings.page_size}")
        self.resource, self.settings = resource, settings
        self.group, self.version, self.plural = resource.group, resource.version, resource.plural
        self._api = custom_api
        self._custom = lister is None
        self._list = lister or (
            lambda **kw: custom_api.list_cluster_custom_object(
                resource.group, resource.version, resource.plural, **kw
            )
        )
        self._crd_exists = crd_exists or (lambda crd: _crd_labels(custom_api, crd) is not None)
        self._lock = threading.Lock()
        self._objects: dict[str, Mapping[str, Any]] | None = None
        self._observed: tuple[object, ObjectList] | None = None  # of the objects named first
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: Any = None
        self._failure: str | None = None
        self._unknown: str | None = None

    @property
    def crd(self) -> str:
        """The CustomResourceDefinition's name, ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    def start(self, wakeup: threading.Event | None = None) -> None:
        """Start the background thread; ``wakeup`` (else one of its own) is set on every change."""
        if wakeup is not None:
            self._wakeup = wakeup
        self._thread = threading.Thread(
            target=self._run, name=f"twc-watch-{self.plural}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end."""
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def snapshot(self) -> tuple[Mapping[str, Any], ...] | None:
        """The current objects sorted by key, or ``None`` before the first list."""
        objects = self._objects
        return None if objects is None else tuple(objects[k] for k in sorted(objects))

    def by_key(self) -> Mapping[str, Mapping[str, Any]] | None:
        """The current objects by key (a read-only view that never changes), or ``None``."""
        found = self._objects
        return None if found is None else MappingProxyType(found)

    def observed(self) -> ObjectList:
        """The objects as the desired state's input (unknown before a successful list); the
        same object until they change (each change makes a new mapping)."""
        with self._lock:
            found, unknown = self._objects, self._unknown
        if found is None or unknown is not None:
            return ObjectList.unknown(f"{self.crd}: {unknown or 'not listed yet'}")
        if (last := self._observed) is None or last[0] is not found:
            self._observed = last = (found, ObjectList.of_api(found[k] for k in sorted(found)))
        return last[1]

    def failure(self) -> str | None:
        """Why the last list or watch failed, until a list succeeds again."""
        return self._failure

    def list_now(self) -> str:
        """List, replace the snapshot, return the resourceVersion (empty: no CRD); raises
        when the list failed (the kind is then unknown)."""
        served = True  # bound even when asking raises (a 404: the CRD is gone)
        try:
            served = self.resource.served(self.crd)
            items, version = self._pages() if served else ({}, "")
        except Exception as exc:
            if not (self._custom and status_of(exc) == 404 and self._crd_gone(exc)):
                self._unknown = list_failure(exc)
                raise
            logger.warning("the %s CRD is not installed: no such objects", self.crd)
            items, version = {}, ""
        if self._custom and served:  # an unserved kind holds none: nothing to confirm
            items = self._confirm_missing(items)
        self._replace(items)
        self._unknown = None
        return version

    def _timeout(self, extra: float = 0.0) -> tuple[float, float]:
        return (_CONNECT_TIMEOUT, self.settings.request_timeout + extra)

    def _selectors(self) -> dict[str, str]:
        found = {"label_selector": self.resource.label_selector}
        if self.resource.field_selector:
            found["field_selector"] = self.resource.field_selector
        return found

    def _pages(self) -> tuple[dict[str, Mapping[str, Any]], str]:
        items: dict[str, Mapping[str, Any]] = {}
        token = ""
        while True:
            result = self._list(
                limit=self.settings.page_size,
                _request_timeout=self._timeout(),
                **self._selectors(),
                **({"_continue": token} if token else {}),
            )
            for obj in result.get("items") or []:
                items[object_key(obj)] = self.resource.keep(obj)
            meta = result.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return items, str(meta.get("resourceVersion", ""))

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
        # Objects missing from the list stay unless a GET finds them gone or unselected.
        before = self._objects or {}
        for key in sorted(set(before) - set(items)):
            try:
                found = self._get(before[key])
            except Exception as exc:  # noqa: BLE001 - unconfirmed: keep it as last seen
                logger.warning(
                    "%s %s: not in the list and not readable (%s); kept until confirmed",
                    self.crd,
                    key,
                    list_failure(exc),
                )
                items[key] = before[key]
                continue
            if found is not None and _selector_matches(self.resource.label_selector, found):
                logger.info("%s %s: missing from the list but still there", self.crd, key)
                items[key] = self.resource.keep(found)
        return items

    def _get(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        name, namespace = str(metadata(obj).get("name", "")), metadata(obj).get("namespace")
        where = (namespace, self.plural, name) if namespace else (self.plural, name)
        api = self._api
        get = api.get_namespaced_custom_object if namespace else api.get_cluster_custom_object
        found = unless_404(get, self.group, self.version, *where, _request_timeout=self._timeout())
        return found if isinstance(found, Mapping) else None

    def _content_of(self, obj: Mapping[str, Any]) -> str:
        return repr(self.resource.content(obj))

    def _content(self, items: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        return {key: self._content_of(obj) for key, obj in items.items()}

    def _replace(self, items: dict[str, Mapping[str, Any]]) -> None:
        with self._lock:
            changed = self._objects is None or self._content(self._objects) != self._content(items)
            self._objects = items
        if changed:
            self._wakeup.set()

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        key, obj = object_key(obj), self.resource.keep(obj)
        with self._lock:
            current = dict(self._objects or {})
            before = current.pop(key, None)
            if kind != "DELETED":
                current[key] = obj
            self._objects = current  # a new mapping: by_key views never change
        if kind == "DELETED" or before is None or self._content_of(before) != self._content_of(obj):
            logger.info("%s %s %s", self.crd, key, kind.lower())
            wake(self._wakeup, str(metadata(obj).get("namespace") or "") or None)

    def _stream(self, version: str) -> str:
        # Watch from ``version``; the last version seen (empty: list again).
        from kubernetes import watch

        self._watch = watch.Watch()
        settings = self.settings
        server_timeout = int(min(settings.watch_timeout, max(1.0, settings.resync_interval)))
        stream = self._watch.stream(
            self._list,
            **self._selectors(),
            resource_version=version,
            timeout_seconds=server_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=self._timeout(server_timeout),
        )
        for event in stream:
            if self._stop.is_set():
                break
            kind, obj = event.get("type", ""), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    return ""  # expired: list again
                raise RuntimeError(f"watch error: {obj.get('message', obj)}")
            version = str(metadata(obj).get("resourceVersion") or version)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self._apply(kind, obj)
        return version

    def _run(self) -> None:
        version = ""
        listed_at = -float("inf")
        while not self._stop.is_set():
            try:
                if not version or time.monotonic() - listed_at >= self.settings.resync_interval:
                    version = self.list_now()
                    listed_at = time.monotonic()
                    if self._failure is not None:
                        logger.info("%s: listed again after a failure", self.crd)
                    self._failure = None
                    if not version:  # no CRD: look again at the next resync
                        self._stop.wait(min(self.settings.resync_interval, 30.0))
                        continue
                version = self._stream(version)
            except Exception as exc:  # noqa: BLE001 - the watch thread reports and retries every failure
                version = ""
                if status_of(exc) == 410:
                    continue
                if self._stop.is_set():
                    break
                failure = list_failure(exc)
                log = logger.warning if failure != self._failure else logger.debug
                log("%s watch failed (retrying): %s", self.crd, exc)
                self._failure = failure
                # A built-in kind's denial waits for the resync (readers read directly).
                delay = self.settings.retry_delay
                if status_of(exc) == 403 and not self._custom:
                    delay = max(delay, self.settings.resync_interval)
                self._stop.wait(delay)
            finally:
                self._watch = None


class QueueWatcher(ObjectWatcher):
    """List + watch labelled kmsvc Queue objects across namespaces."""

    def __init__(
        self,
        custom_api: Any,
        *,
        resync_interval: float,
        retry_delay: float = 2.0,
        crd_exists: CrdLookup | None = None,
    ) -> None:
        resource = Resource(QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, LABEL_SELECTOR)
        settings = WatchSettings(resync_interval, retry_delay=retry_delay)
        super().__init__(custom_api, resource, settings, crd_exists=crd_exists)


def _workers(ours: ObjectList, official: ObjectList, templates: ObjectList) -> ObjectList:
    """The TemporalWorkers and the official WorkerDeployments, each of those with the
    templates naming it as ``spec.resourceTemplates`` (unknown when any of the three is)."""
    if ours.objects is None or official.objects is None or templates.objects is None:
        return next(found for found in (ours, official, templates) if found.objects is None)
    if not official.objects:
        return ours
    named: dict[str, list[dict[str, Any]]] = {}
    for obj in templates.objects:
        native, worker = template_native(obj)
        entry = {"name": native.name, "template": part(obj, "spec").get("template")}
        named.setdefault(worker, []).append(entry)
    out = list(ours.objects)
    for obj in official.objects:
        mine = named.get(f"{metadata(obj).get('namespace')}/{metadata(obj).get('name')}")
        with_mine = {**part(obj, "spec"), "resourceTemplates": mine}
        out.append({**obj, "spec": with_mine} if mine else obj)
    return ObjectList.of_api(out)


class NativeWatch:
    """One :class:`ObjectWatcher` per kind: TemporalWorkers and every connection kind."""

    def __init__(
        self,
        custom_api: Any,
        kinds: Iterable[WatchedKind],
        *,
        resync_interval: float,
        crd_exists: CrdLookup | None = None,
        twc_crd: CrdLookup | None = None,
    ) -> None:
        """``twc_crd``: whether a CRD is twc's (official WorkerDeployments are read only
        from twc's CRD: the official controller reconciles those of its own)."""
        settings = WatchSettings(resync_interval)
        owned = twc_crd or (lambda name: is_twc_crd(_crd_labels(custom_api, name)))
        watcher = partial(ObjectWatcher, custom_api, settings=settings, crd_exists=crd_exists)
        official = partial(Resource, API_GROUP, CONNECTION_VERSION, served=owned)
        worker = Resource(WORKER_GROUP, CRD_VERSION, WORKER_PLURAL, content=_worker_content)
        self._workers = watcher(worker)
        self._official = watcher(official(OFFICIAL_WORKER_PLURAL, content=_worker_content))
        self._templates = watcher(official(RESOURCE_TEMPLATE_PLURAL, content=_worker_content))
        self._kinds = {
            k: watcher(Resource(k.api_group, k.version, k.plural, content=_connection_content))
            for k in kinds
        }

    def watchers(self) -> dict[str, ObjectWatcher]:
        out = {
            WORKER_KIND_KEY: self._workers,
            kind_key(OFFICIAL_WORKER_KIND, API_GROUP): self._official,
            kind_key(RESOURCE_TEMPLATE_KIND, API_GROUP): self._templates,
        }
        out.update({kind_key(k.kind, k.api_group): w for k, w in self._kinds.items()})
        return out

    def start(self, wakeup: threading.Event) -> None:
        for watcher in self.watchers().values():
            watcher.start(wakeup)

    def stop(self) -> None:
        for watcher in self.watchers().values():
            watcher.stop()

    def observed(self) -> dict[str, ObjectList]:
        """Per kind key, the objects as the desired state's input (official WorkerDeployments among
        the TemporalWorkers, as twc reconciles them alike, each with its WorkerResourceTemplates as
        ``spec.resourceTemplates``; those also as their own kind, for their status)."""
        found = {key: w.observed() for key, w in self.watchers().items() if w is not self._official}
        ours, templates = found[WORKER_KIND_KEY], found[kind_key(RESOURCE_TEMPLATE_KIND, API_GROUP)]
        found[WORKER_KIND_KEY] = _workers(ours, self._official.observed(), templates)
        return found

    def snapshot(self) -> NativeSnapshot | None:
        """The objects of every kind, or ``None`` until each was listed once."""
        ours, official = self._workers.snapshot(), self._official.snapshot()
        templates = self._templates.snapshot()  # WorkerDeployments are read with them
        connections = {kind: watcher.snapshot() for kind, watcher in self._kinds.items()}
        listed = {kind: found for kind, found in connections.items() if found is not None}
        if ours is None or official is None or templates is None or len(listed) < len(connections):
            return None
        return NativeSnapshot((*ours, *official), listed)
