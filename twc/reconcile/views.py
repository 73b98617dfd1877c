"""Keep the generated TemporalWorker objects (views) of Queue and fleet-file workers.

The planned views are created, put back and deleted while leading; an edit of a view's spec
is undone with a ``ViewOverwritten`` Warning Event. Nothing here fails the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from prometheus_client import Counter, Gauge

from twc.kube.writer import ObjectWriter
from twc.native.objects import worker_native
from twc.native.views import FROM_QUEUE, VIEW_LABEL, ViewPlan, ViewWrite, spec_matches
from twc.reconcile.health import DaemonMetrics, metric

__all__ = ["VIEW_OVERWRITTEN", "ViewSync", "ViewWriter"]

logger = logging.getLogger(__name__)

VIEW_OVERWRITTEN = "ViewOverwritten"  # the Event on a view whose edit was put back


class ViewWriter(Protocol):
    """The writes of views (:class:`twc.kube.writer.TemporalWorkerViews` is the real one)."""

    def apply(self, body: Mapping[str, Any], *, resource_version: str | None) -> dict[str, Any]:
        """Server-side apply a view (conditional on ``resource_version`` when given)."""
        ...

    def replace_spec(
        self, namespace: str, name: str, spec: Mapping[str, Any], resource_version: str
    ) -> dict[str, Any]: ...

    def delete(self, namespace: str, name: str, uid: str) -> None: ...


class ViewSync:
    """Carries out the views part of each plan."""

    def __init__(
        self,
        writer: ViewWriter,
        *,
        stack: str,
        metrics: DaemonMetrics,
        events: ObjectWriter | None = None,
    ) -> None:
        self._writer = writer
        self._stack = stack
        self._events = events
        registry = metrics.registry
        what = "Writes of generated TemporalWorker objects, by operation."
        self._writes = metric(Counter, registry, "temporalworker_view_writes", what, "operation")
        what = "Generated TemporalWorker objects of Queue and fleet-file workers."
        self._shown = metric(Gauge, registry, "temporalworker_views", what)
        self._skipped: dict[str, str] = {}

    def sync(self, views: ViewPlan) -> None:
        """Create, put back and delete views as planned; never raises."""
        for key, reason in sorted(views.skipped.items()):
            if self._skipped.get(key) != reason:
                logger.warning("[%s] no TemporalWorker view of %s: %s", self._stack, key, reason)
        for key in set(self._skipped) - set(views.skipped):
            logger.info("[%s] TemporalWorker view of %s no longer held back", self._stack, key)
        self._skipped = dict(views.skipped)
        self._shown.labels(self._stack).set(len(views.shown))
        for write in views.writes:
            try:
                self._write(write)
            except Exception as exc:  # noqa: BLE001 - a view never fails the loop; the next iteration retries
                logger.warning(
                    "[%s] view %s not written (retrying): %s", self._stack, write.view.key, exc
                )
        for gone in views.deletes:
            obj = gone.obj
            try:
                self._writer.delete(obj.namespace or "", obj.name, obj.uid)
            except Exception as exc:  # noqa: BLE001 - a view never fails the loop; the next iteration retries
                logger.warning("[%s] view %s not deleted (retrying): %s", self._stack, obj.key, exc)
                continue
            self._writes.labels(self._stack, "delete").inc()
            logger.info(
                "[%s] deleted TemporalWorker view %s: its worker (%s) is gone",
                self._stack,
                obj.key,
                gone.source,
            )

    def _write(self, write: ViewWrite) -> None:
        view = write.view
        stored = self._writer.apply(view.body, resource_version=write.resource_version)
        if not spec_matches(stored, view.spec):
            # Fields another manager added survive an apply (it removes only its own).
            meta = stored.get("metadata") or {}
            stored = self._writer.replace_spec(
                str(meta.get("namespace")),
                str(meta.get("name")),
                view.spec,
                str(meta.get("resourceVersion")),
            )
        self._writes.labels(self._stack, "create" if write.create else "update").inc()
        if write.edited_by:
            logger.warning(
                "[%s] TemporalWorker view %s was edited by %s: put back (%s)",
                self._stack,
                view.key,
                ", ".join(write.edited_by),
                view.source,
            )
            self._event(stored, write)
        else:
            word = "created" if write.create else "updated"
            logger.info(
                "[%s] %s TemporalWorker view %s (%s)", self._stack, word, view.key, view.source
            )

    def _event(self, stored: Mapping[str, Any], write: ViewWrite) -> None:
        if self._events is None:
            return
        view = write.view
        where = (
            "the Queue object or the fleet's defaults"
            if view.body["metadata"]["labels"].get(VIEW_LABEL) == FROM_QUEUE
            else "the fleet file"
        )
        message = (
            f"this TemporalWorker is generated by twc from {view.source} and shows the "
            f"worker twc runs for it: the change to its spec by {', '.join(write.edited_by)} "
            f"was undone; change {where} instead"
        )
        try:
            self._events.event(worker_native(stored), VIEW_OVERWRITTEN, message)
        except Exception as exc:  # noqa: BLE001 - a view never fails the loop; the next iteration retries
            logger.warning("[%s] could not record an Event on %s: %s", self._stack, view.key, exc)
