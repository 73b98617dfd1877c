"""The daemon's Prometheus metrics and its ``/healthz``, ``/readyz``, ``/metrics``, ``/status``.

Each :class:`DaemonMetrics` owns its registry. The names are stable (dashboards and tests
read them); ``twc_engine_runs_total`` counts every engine start.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

# Reconciles range from a skipped iteration (milliseconds) to a full `up` (minutes).
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

_M = TypeVar("_M", Counter, Gauge, Histogram)


def metric(
    kind: type[_M], registry: CollectorRegistry, name: str, doc: str, labels: str = ""
) -> _M:
    """A ``twc_<name>`` metric in ``registry``, labelled by stack and ``labels``."""
    extra: dict[str, Any] = {"buckets": _DURATION_BUCKETS} if kind is Histogram else {}
    return kind(f"twc_{name}", doc, ["stack", *labels.split()], registry=registry, **extra)


class DaemonMetrics:
    """Every metric the daemon exports, labelled by stack."""

    def __init__(self, stack: str, registry: CollectorRegistry | None = None) -> None:
        self.stack = stack
        r = self.registry = registry if registry is not None else CollectorRegistry()
        counter, gauge = partial(metric, Counter, r), partial(metric, Gauge, r)
        self.reconciles = counter("reconcile", "Reconcile iterations.", "result")
        self.reconcile_errors = counter("reconcile_errors", "Failed iterations.", "reason")
        self.reconcile_duration = metric(Histogram, r, "reconcile_duration_seconds", "Duration.")
        self.engine_runs = counter("engine_runs", "Engine runs.", "operation mode")
        self.engine_in_progress = gauge("engine_in_progress", "1 while it runs.", "operation")
        self.last_success = gauge("last_success_timestamp_seconds", "Last success.")
        self._fleet = _FleetGauges(stack)
        r.register(self._fleet)
        self.backlog_errors = counter("backlog_sample_errors", "Failed samples.")
        self.invalid_queues = gauge("invalid_queue_objects", "Queue objects skipped as invalid.")
        self.cluster_queues = gauge("cluster_queue_objects", "Queue objects accepted.")
        self.invalid_objects = gauge("invalid_native_objects", "Invalid objects.", "kind")
        self.drifted = gauge("drifted_resources", "Drift the last refresh found.")
        self.drift_detected = counter("drift_detected", "Refreshes with drift.")
        self.recoveries = counter("stack_recoveries", "Stack repairs.", "action")
        self.early_applies = counter("early_applies", "Applied before the engine.", "result")
        self.scale_writes = counter("scale_writes", "Replicas written by scale.", "result")
        self.leader = gauge("leader", "1 while this daemon may apply the stack.")
        self.fault_active = gauge("fault_active", "1 while it lasts.", "fault")
        self.faults = counter("faults", "Faults that started.", "fault")
        self.kept_objects = gauge("kept_objects", "Kept on their last spec.", "kind")
        self.object_conflicts = gauge("object_conflicts", "Left out: ObjectExists.")
        self.deletions_held = gauge("deletions_held", "Workers whose deletion is held.")
        for operation in ("up", "refresh", "recover"):
            self.engine_in_progress.labels(stack, operation).set(0)

    def publish(self, **values: Mapping[Any, float | None]) -> None:
        """Replace the per-worker or per-queue gauges named (``twc_`` left out): their values
        now (keyed by worker, or by Temporal namespace and task queue), and no others."""
        if unknown := values.keys() - {name for name, _, _ in _FLEET_GAUGES}:
            raise ValueError(f"no such per-worker or per-queue gauge: {sorted(unknown)}")
        self._fleet.values = {**self._fleet.values, **values}

    def render(self) -> bytes:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float | None:
        """The sum of samples ``name`` whose labels include ``labels``; ``None`` when none match."""
        known = sample_names((family.name, family.type) for family in self.registry.collect())
        if name not in known:
            raise KeyError(f"no metric has a sample named {name!r}")
        found = [
            sample.value
            for family in self.registry.collect()
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        ]
        return sum(found) if found else None

    def count(self, name: str, **labels: str) -> float:
        """A counter's value; 0 before it counted."""
        known = sample_names((family.name, family.type) for family in self.registry.collect())
        if known.get(name) != "counter":
            raise KeyError(f"no counter has a sample named {name!r}")
        return self.value(name, **labels) or 0.0


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


_QUEUE = "temporal_namespace task_queue"
_FLEET_GAUGES = (
    ("worker_desired_replicas", "Replicas wanted.", "worker"),
    ("worker_current_replicas", "Replicas now.", "worker"),
    ("task_queue_backlog", "Approximate backlog.", _QUEUE),
    ("task_queue_backlog_sampled_at_seconds", "The backlog's time.", _QUEUE),
)


class _FleetGauges(Collector):
    """The per-worker and per-queue gauges, read when scraped from the values the last
    iteration published: an iteration publishes in O(1), and what it left out is gone."""

    def __init__(self, stack: str) -> None:
        self.stack = stack
        self.values: Mapping[str, Mapping[Any, float | None]] = {}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, doc, labels in _FLEET_GAUGES:
            family = GaugeMetricFamily(f"twc_{name}", doc, labels=["stack", *labels.split()])
            for key, value in self.values.get(name, {}).items():
                if value is not None:
                    family.add_metric(
                        [self.stack, *((key,) if isinstance(key, str) else key)], value
                    )
            yield family


def sample_names(families: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Every sample name of the families ``(name, type)``, with its type."""
    return {f"{n}{s}": kind for n, kind in families for s in _SUFFIXES.get(kind, ("",))}


class MetricsSource(Protocol):
    """What ``/metrics`` renders: one daemon's metrics, or every shard's merged."""

    def render(self) -> bytes:
        """The metrics in the Prometheus text format."""
        ...


Probe = Callable[[], tuple[bool, str]]
"""A health check: ``(ok, one line of explanation)``."""


class HealthServer:
    """``/healthz``, ``/livez``, ``/readyz``, ``/metrics``, ``/status``; a raising probe is 503."""

    def __init__(
        self,
        metrics: MetricsSource,
        *,
        port: int,
        live: Probe,
        ready: Probe,
        status: Callable[[], Mapping[str, Any]] | None = None,
        host: str = "0.0.0.0",  # noqa: S104 - probes and Prometheus reach it from outside the pod
    ) -> None:

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez", "/readyz"):
                    try:
                        ok, text = (ready if path == "/readyz" else live)()
                    except Exception as exc:  # noqa: BLE001 - a probe that raises is unhealthy
                        ok, text = False, f"probe failed: {exc}"
                    self._send(200 if ok else 503, f"{text}\n".encode(), "text/plain")
                elif path == "/status" and status is not None:
                    body = json.dumps(status(), indent=2, sort_keys=True, default=str)
                    self._send(200, f"{body}\n".encode(), "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError) as exc:
                    # The caller's timeout passed first: one line, not a traceback.
                    name = type(exc).__name__
                    logger.info(
                        "http: the caller of %s went away before the answer (%s)", self.path, name
                    )

            def log_message(self, format: str, *args: object) -> None:
                logger.debug("http: %s", format % args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="twc-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
