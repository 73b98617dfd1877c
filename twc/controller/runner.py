"""``twc run``: wire the daemon to the real engine, cluster, Temporal and HTTP server.

The loop itself (:mod:`twc.controller.daemon`) only sees injected collaborators; this
module builds the real ones from the command line, installs the SIGTERM/SIGINT handler
(finish the current step, then exit 0) and serves ``/healthz``, ``/readyz`` and
``/metrics``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twc.connections import default_registry
from twc.controller import commands, engine
from twc.controller.automation import AutomationEngine
from twc.controller.backlog import TemporalBacklogs
from twc.controller.cluster import Cluster, api_client_from_environment
from twc.controller.daemon import Daemon
from twc.controller.health import DaemonMetrics, HealthServer
from twc.controller.leader import LeaseElector, lease_name_for
from twc.controller.native_cluster import NativeWatch, NativeWriter
from twc.controller.queues import QueueSource, QueueWatcher, StaticQueues
from twc.controller.settings import DaemonSettings
from twc.spec import Fleet, load_fleet_file

__all__ = ["RunOptions", "load_settings", "run_daemon"]

logger = logging.getLogger(__name__)

PROJECT = "twc"


@dataclass(frozen=True)
class RunOptions:
    """What ``twc run`` was asked for on the command line."""

    stack: str
    """The stack to reconcile."""
    fleet_file: str | None = None
    """The fleet file; ``stacks/<stack>.yaml`` by default."""
    settings_file: str | None = None
    """A JSON or YAML file with :class:`DaemonSettings` fields."""
    port: int | None = None
    """Overrides ``metrics_port``."""
    interval: float | None = None
    """Overrides ``reconcile_interval``."""
    leader_elect: bool = False
    """Take part in leader election on a Lease."""
    lease_namespace: str | None = None
    """Overrides the Lease's namespace (default: ``POD_NAMESPACE`` or ``default``)."""
    lease_name: str | None = None
    """Overrides the Lease's name."""
    once: bool = False
    """Run one iteration and exit (0 on success)."""


def load_settings(options: RunOptions) -> DaemonSettings:
    """Build the settings: the file's fields, then the command-line overrides.

    Raises:
        ValueError: The file is not a mapping, or a value is invalid (pydantic's
            ``ValidationError`` is a ``ValueError``).
    """
    data: dict[str, Any] = {}
    if options.settings_file:
        import yaml

        loaded = yaml.safe_load(Path(options.settings_file).read_text())
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{options.settings_file}: expected a mapping of settings")
        data = dict(loaded or {})
    if options.port is not None:
        data["metrics_port"] = options.port
    if options.interval is not None:
        data["reconcile_interval"] = options.interval
    election = dict(data.get("leader_election") or {})
    if options.leader_elect:
        election["enabled"] = True
    if options.lease_namespace:
        election["lease_namespace"] = options.lease_namespace
    elif "lease_namespace" not in election and os.environ.get("POD_NAMESPACE"):
        election["lease_namespace"] = os.environ["POD_NAMESPACE"]
    if options.lease_name:
        election["lease_name"] = options.lease_name
    data["leader_election"] = election
    return DaemonSettings.model_validate(data)


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=os.environ.get("TWC_LOG_LEVEL", "INFO").upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
    # The Kubernetes client's pool logs every connection retry; an unreachable API server
    # is reported once, as the KubernetesUnavailable fault, instead.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def run_daemon(options: RunOptions) -> int:
    """Run the daemon until SIGTERM (or one iteration with ``--once``).

    Returns:
        The exit code: 0 after SIGTERM or a successful ``--once``; 1 after losing the
        Lease, a failed ``--once`` or invalid settings.
    """
    _configure_logging()
    try:
        settings = load_settings(options)
    except (OSError, ValueError) as exc:
        print(f"twc run: invalid settings: {exc}", file=sys.stderr)
        return 1
    file = commands.fleet_file_for(options.stack, options.fleet_file)
    path = file if Path(file).is_absolute() else str(engine.ROOT / file)
    ref = commands.stack_ref(options.stack, path)

    api_client = api_client_from_environment()
    cluster = Cluster(api_client) if api_client is not None else None
    if cluster is None:
        logger.warning("[%s] no Kubernetes API configured: no Queue objects", options.stack)
    if settings.leader_election.enabled and cluster is None:
        print("twc run: --leader-elect needs a Kubernetes API", file=sys.stderr)
        return 1

    metrics = DaemonMetrics(options.stack)
    elector: LeaseElector | None = None
    daemon: Daemon | None = None
    if settings.leader_election.enabled and cluster is not None:
        election = settings.leader_election
        elector = LeaseElector(
            cluster.coordination,
            name=election.lease_name or lease_name_for(PROJECT, options.stack),
            namespace=election.lease_namespace,
            identity=f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
            settings=election,
            on_lost=lambda: daemon.request_stop(exit_code=1) if daemon else None,
        )

    queues: QueueSource
    native: NativeWatch | None = None
    writer: NativeWriter | None = None
    registry = default_registry()
    if cluster is not None:
        queues = QueueWatcher(cluster.custom, resync_interval=settings.resync_interval)
        # TemporalWorkers and every connection kind the registry knows (plugins too).
        native = NativeWatch(
            cluster.custom, registry.watched_kinds(), resync_interval=settings.resync_interval
        )
        writer = NativeWriter(cluster.custom, cluster.core)
    else:
        queues = StaticQueues(())

    temporal_address = (ref.config or {}).get("temporalAddress")

    def load() -> Fleet:
        return load_fleet_file(path)

    daemon = Daemon(
        stack=options.stack,
        load_fleet=load,
        engine=AutomationEngine(
            ref, is_leader=elector.is_leader if elector is not None else lambda: False
        ),
        settings=settings,
        queues=queues,
        backlogs=TemporalBacklogs(
            read_secret=cluster.read_secret if cluster is not None else None,
            temporal_address=temporal_address,
        ),
        current_replicas=cluster.worker_replicas if cluster is not None else None,
        read_secret=cluster.read_secret if cluster is not None else None,
        metrics=metrics,
        leader=elector,
        file=file,
        shared={"config": dict(ref.config or {})},
        early=cluster,
        temporal_address=temporal_address,
        native=native,
        writer=writer,
        deployments=cluster.worker_deployments if cluster is not None else None,
        registry=registry,
    )
    try:
        server = HealthServer(
            metrics,
            port=settings.metrics_port,
            live=daemon.live,
            ready=daemon.ready,
            status=daemon.status,
        ).start()
    except OSError as exc:
        print(f"twc run: cannot serve on port {settings.metrics_port}: {exc}", file=sys.stderr)
        return 1
    stop_daemon = daemon

    def on_signal(signum: int, _frame: object) -> None:
        logger.info(
            "[%s] %s: finishing the current step, then exiting",
            options.stack,
            signal.Signals(signum).name,
        )
        stop_daemon.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logger.info(
        "[%s] twc daemon: fleet %s, /healthz /readyz /metrics /status on port %d, settings %s",
        options.stack,
        file,
        server.port,
        json.dumps(settings.model_dump(mode="json"), sort_keys=True),
    )
    if elector is not None:
        logger.info(
            "[%s] leader election on lease %s/%s as %s",
            options.stack,
            elector.namespace,
            elector.name,
            elector.identity,
        )
        elector.start()
    try:
        return daemon.run(once=options.once)
    finally:
        if elector is not None:
            elector.stop(release=True)
        server.stop()
        if cluster is not None:
            cluster.close()
