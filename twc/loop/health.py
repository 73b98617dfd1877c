"""The daemon's Prometheus metrics and its ``/healthz``, ``/readyz``, ``/metrics`` and
``/status`` server.

Each :class:`DaemonMetrics` owns its own ``CollectorRegistry``, so several daemons (or
tests) in one process never share counters. The names are stable: dashboards and the
end-to-end tests read them. ``twc_engine_runs_total`` counts every start of the Pulumi
engine (``up`` and ``refresh``), which is what proves a no-op iteration engine-free.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["DaemonMetrics", "HealthServer", "Liveness", "MetricsSource", "Probe", "sample_names"]

logger = logging.getLogger(__name__)

# Reconciles range from a skipped iteration (milliseconds) to a full `up` (minutes).
_DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class DaemonMetrics:
    """Every metric the daemon exports, labelled by stack."""

    def __init__(self, stack: str, registry: CollectorRegistry | None = None) -> None:
        """Create the metrics in ``registry`` (a fresh one by default).

        Args:
            stack: The stack this daemon reconciles; a label on every metric.
            registry: Where to register; ``None`` creates a private registry.
        """
        self.stack = stack
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self._worker_metrics(stack, r)
        self._object_metrics(stack, r)
        self._safety_metrics(stack, r)
        self.reconciles = Counter(
            "twc_reconcile", "Reconcile iterations by result.", ["stack", "result"], registry=r
        )
        self.reconcile_errors = Counter(
            "twc_reconcile_errors", "Failed iterations by reason.", ["stack", "reason"], registry=r
        )
        self.reconcile_duration = Histogram(
            "twc_reconcile_duration_seconds",
            "Duration of reconcile iterations.",
            ["stack"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.engine_runs = Counter(
            "twc_engine_runs",
            "Pulumi engine runs started, by operation (up, refresh) and mode.",
            ["stack", "operation", "mode"],
            registry=r,
        )
        self.engine_in_progress = Gauge(
            "twc_engine_in_progress",
            "1 while an engine run is in progress (operation up, refresh or recover).",
            ["stack", "operation"],
            registry=r,
        )
        for operation in ("up", "refresh", "recover"):
            self.engine_in_progress.labels(stack, operation).set(0)
        self.last_success = Gauge(
            "twc_last_success_timestamp_seconds",
            "Unix time of the last successful iteration.",
            ["stack"],
            registry=r,
        )

    def _worker_metrics(self, stack: str, r: CollectorRegistry) -> None:
        self.desired_replicas = Gauge(
            "twc_worker_desired_replicas",
            "Replicas the daemon wants per worker.",
            ["stack", "worker"],
            registry=r,
        )
        self.current_replicas = Gauge(
            "twc_worker_current_replicas",
            "Replicas of the worker's Deployment in the cluster (spec.replicas).",
            ["stack", "worker"],
            registry=r,
        )
        self.backlog = Gauge(
            "twc_task_queue_backlog",
            "Approximate backlog per task queue, summed over task-queue types.",
            ["stack", "temporal_namespace", "task_queue"],
            registry=r,
        )
        self.backlog_sampled_at = Gauge(
            "twc_task_queue_backlog_sampled_at_seconds",
            "Unix time of the sample twc_task_queue_backlog shows (taken from Temporal).",
            ["stack", "temporal_namespace", "task_queue"],
            registry=r,
        )
        self.backlog_errors = Counter(
            "twc_backlog_sample_errors",
            "Failed backlog samples (the worker's replicas are held).",
            ["stack"],
            registry=r,
        )

    def _object_metrics(self, stack: str, r: CollectorRegistry) -> None:
        self.invalid_queues = Gauge(
            "twc_invalid_queue_objects",
            "Labelled Queue objects skipped because they are invalid.",
            ["stack"],
            registry=r,
        )
        self.cluster_queues = Gauge(
            "twc_cluster_queue_objects",
            "Labelled Queue objects accepted into the desired state.",
            ["stack"],
            registry=r,
        )
        self.invalid_objects = Gauge(
            "twc_invalid_native_objects",
            "TemporalWorker and connection objects skipped as invalid, by kind.",
            ["stack", "kind"],
            registry=r,
        )
        self.native_objects = Gauge(
            "twc_native_objects",
            "Kubernetes-native objects accepted into the desired state, by kind.",
            ["stack", "kind"],
            registry=r,
        )
        self.drifted = Gauge(
            "twc_drifted_resources",
            "Resources the last refresh found changed outside twc.",
            ["stack"],
            registry=r,
        )
        self.drift_detected = Counter(
            "twc_drift_detected", "Refreshes that found drift.", ["stack"], registry=r
        )
        self.recoveries = Counter(
            "twc_stack_recoveries",
            "Repairs of a stack left behind by a killed engine (stale lock, pending ops).",
            ["stack", "action"],
            registry=r,
        )
        self.early_applies = Counter(
            "twc_early_applies",
            "New workers' objects applied ahead of the engine, by result "
            "(applied, skipped, released to the engine, deleted).",
            ["stack", "result"],
            registry=r,
        )
        self.scale_writes = Counter(
            "twc_scale_writes",
            "Autoscaled workers' replicas written through the Deployment's scale "
            "subresource (no engine run), by result (written, failed).",
            ["stack", "result"],
            registry=r,
        )

    def _safety_metrics(self, stack: str, r: CollectorRegistry) -> None:
        self.leader = Gauge(
            "twc_leader",
            "1 while this daemon may apply the stack (leader, or no election).",
            ["stack"],
            registry=r,
        )
        self.fault_active = Gauge(
            "twc_fault_active",
            "1 while the fault (TemporalUnavailable, KubernetesUnavailable, "
            "StateBackendUnwritable...) lasts.",
            ["stack", "fault"],
            registry=r,
        )
        self.faults = Counter(
            "twc_faults", "Faults that started, by fault.", ["stack", "fault"], registry=r
        )
        # The safety rules: objects kept on their last accepted spec, deletions held.
        self.kept_objects = Gauge(
            "twc_kept_objects",
            "Objects whose current spec is invalid and whose last accepted spec keeps "
            "running (InvalidSpec, kept), by kind.",
            ["stack", "kind"],
            registry=r,
        )
        self.object_conflicts = Gauge(
            "twc_object_conflicts",
            "New workers left out because objects of their names exist that twc did not "
            "create (ObjectExists).",
            ["stack"],
            registry=r,
        )
        self.deletions_held = Gauge(
            "twc_deletions_held",
            "Workers whose deletion the deletion guard holds (DeletionsHeld).",
            ["stack"],
            registry=r,
        )
        self._known_workers: set[str] = set()
        self._known_queues: set[tuple[str, str]] = set()

    def set_workers(self, desired: dict[str, int], current: dict[str, int | None]) -> None:
        """Publish desired and current replicas; workers no longer desired are dropped."""
        for worker in self._known_workers - set(desired):
            for gauge in (self.desired_replicas, self.current_replicas):
                with contextlib.suppress(KeyError):
                    gauge.remove(self.stack, worker)
        for worker, count in desired.items():
            self.desired_replicas.labels(self.stack, worker).set(count)
            now = current.get(worker)
            if now is not None:
                self.current_replicas.labels(self.stack, worker).set(now)
        self._known_workers = set(desired)

    def set_backlogs(self, backlogs: Iterable[tuple[str, str, int, float]]) -> None:
        """Publish ``(temporal namespace, task queue, backlog, sampled at)``; others drop.

        The sample's time goes with its value, so whoever reads the backlog can tell a
        new sample from an old one and time what followed it (the scale) from the
        moment twc knew, not from when it happened to look.
        """
        seen: set[tuple[str, str]] = set()
        for namespace, queue, count, sampled_at in backlogs:
            self.backlog.labels(self.stack, namespace, queue).set(count)
            self.backlog_sampled_at.labels(self.stack, namespace, queue).set(sampled_at)
            seen.add((namespace, queue))
        for namespace, queue in self._known_queues - seen:
            for gauge in (self.backlog, self.backlog_sampled_at):
                with contextlib.suppress(KeyError):
                    gauge.remove(self.stack, namespace, queue)
        self._known_queues = seen

    def render(self) -> bytes:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry)

    def sample_names(self) -> dict[str, str]:
        """Every sample name the registry's metrics can produce, with the metric's type
        (``counter``, ``gauge``, ``histogram``), whether or not it has a sample yet."""
        return sample_names((family.name, family.type) for family in self.registry.collect())

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value, e.g. ``value("twc_engine_runs_total", operation="up")``.

        Samples whose labels include ``labels`` are summed; ``None`` when none matches
        (no sample for these labels yet, or one that was dropped).

        Raises:
            KeyError: No metric of this registry has a sample called ``name`` (a typo or
                a renamed metric must fail a test, not read as "no sample").
        """
        if name not in self.sample_names():
            raise KeyError(f"no metric has a sample named {name!r}")
        found = False
        total = 0.0
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name != name:
                    continue
                if all(sample.labels.get(k) == v for k, v in labels.items()):
                    found = True
                    total += sample.value
        return total if found else None

    def count(self, name: str, **labels: str) -> float:
        """A counter's value; 0 when it has no sample for these labels yet (a counter
        that never counted is at zero).

        Raises:
            KeyError: ``name`` is no counter's sample (see :meth:`value`).
        """
        if self.sample_names().get(name) != "counter":
            raise KeyError(f"no counter has a sample named {name!r}")
        found = self.value(name, **labels)
        return 0.0 if found is None else found


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


def sample_names(families: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The sample names of metric families given as ``(name, type)``, with the type.

    The Prometheus client names a counter family without ``_total`` and its samples with
    it; a histogram's samples are ``_bucket``, ``_count`` and ``_sum``. Shared with the
    tests that read ``/metrics`` over HTTP, so both reject an unknown name alike.
    """
    out: dict[str, str] = {}
    for name, kind in families:
        for suffix in _SUFFIXES.get(kind, ("",)):
            out[f"{name}{suffix}"] = kind
    return out


class Liveness:
    """When the loop must next show progress; ``/healthz`` fails once that passed.

    Progress is a completed iteration (or, as a standby, an election round): the loop
    then says how long it will sleep, and the next must complete within that plus
    ``allowance``. An engine run in progress is no progress: the loop iterates while it
    runs on its own thread, so a loop stuck in a call fails the probe whatever the
    engine does.
    """

    def __init__(self, clock: Callable[[], float], allowance: float) -> None:
        """Start expecting progress within ``allowance`` seconds."""
        self._clock = clock
        self.allowance = allowance
        self._lock = threading.Lock()
        self._last = clock()
        self._due = self._last + allowance

    def expect(self, within: float = 0.0) -> None:
        """Progress now; the next is due within ``within`` seconds (plus the allowance)."""
        now = self._clock()
        with self._lock:
            self._last = now
            self._due = now + max(0.0, within) + self.allowance

    def check(self) -> tuple[bool, str]:
        """The probe: ``(ok, one line)``."""
        now = self._clock()
        with self._lock:
            last, due = self._last, self._due
        if now <= due:
            return True, "ok"
        return False, (
            f"the reconcile loop made no progress for {now - last:.0f} s (it was due "
            f"{now - due:.0f} s ago; liveness timeout {self.allowance:g} s)"
        )


class MetricsSource(Protocol):
    """What ``/metrics`` renders: one daemon's metrics, or every shard's merged."""

    def render(self) -> bytes:
        """The metrics in the Prometheus text format."""
        ...


Probe = Callable[[], tuple[bool, str]]
"""A health check: ``(ok, one line of explanation)``."""


class HealthServer:
    """``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` over HTTP."""

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
        """Bind the server (not yet serving).

        Args:
            metrics: What ``/metrics`` renders.
            port: TCP port; 0 picks a free one (see :attr:`port`).
            live: The liveness check.
            ready: The readiness check.
            status: What ``/status`` renders as JSON (the loop's state in words).
            host: Address to bind.
        """
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, outer.metrics.render(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    self._probe(outer.live)
                elif path == "/readyz":
                    self._probe(outer.ready)
                elif path == "/status" and outer.status is not None:
                    body = json.dumps(outer.status(), indent=2, sort_keys=True, default=str)
                    self._send(200, f"{body}\n".encode(), "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _probe(self, probe: Probe) -> None:
                try:
                    ok, text = probe()
                except Exception as exc:  # a broken probe is an unhealthy daemon  # noqa: BLE001 - a probe that raises answers 500 with the reason
                    ok, text = False, f"probe failed: {exc}"
                self._send(200 if ok else 503, f"{text}\n".encode(), "text/plain")

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError) as exc:
                    # The caller's timeout passed first (a kubelet probe, a scrape): it
                    # counts the probe as failed anyway. Say so in one line; the
                    # server's default is a traceback that reads like a crash.
                    logger.info(
                        "http: the caller of %s went away before the answer (%s)",
                        self.path,
                        exc.__class__.__name__,
                    )

            def log_message(self, format: str, *args: object) -> None:
                logger.debug("http: %s", format % args)

        self.metrics = metrics
        self.live = live
        self.ready = ready
        self.status = status
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    def thread(self) -> threading.Thread | None:
        """The serving thread, once started."""
        return self._thread

    def start(self) -> HealthServer:
        """Serve in a background thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="twc-health", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
