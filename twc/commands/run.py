"""``twc run``: wire the daemon to the real engine, cluster, Temporal and HTTP server.

The loop itself (:mod:`twc.loop.daemon`) only sees injected collaborators; this
module builds the real ones from the command line, installs the SIGTERM/SIGINT handler
(finish the current step, then exit 0) and serves ``/healthz``, ``/readyz`` and
``/metrics``.

It also supervises, as kopf does: the loop runs in a thread of its own and the main
thread watches every root thread (``twc-*``: the loop, the watches, the elector, the
HTTP server). Once any of them ends while the daemon is not stopping, the daemon
interrupts its engine run and exits non-zero, so Kubernetes restarts it instead of
leaving a daemon that only half works.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from twc.commands.common import fleet_file_for, stack_config, stack_ref
from twc.connections import default_registry
from twc.kube.client import KubeClient, NoClusterError, kube_client
from twc.kube.lease import DAEMON_LEASE_ENV, LeaseElector, call_timeout, lease_name_for
from twc.kube.record import RecordStore, control_namespace
from twc.kube.views import TemporalWorkerViews
from twc.kube.watch import NativeWatch, QueueSource, QueueWatcher, StaticQueues
from twc.kube.workloads import Workloads
from twc.kube.writer import NativeWriter
from twc.loop.act import Effects
from twc.loop.backlog import TemporalBacklogs
from twc.loop.daemon import Daemon
from twc.loop.health import DaemonMetrics, HealthServer
from twc.loop.observe import CachedFleetFile, Sources
from twc.loop.rollouts import RolloutSource
from twc.loop.settings import KILL_MARGIN, DaemonSettings
from twc.stackrun import engine
from twc.stackrun.automation import AutomationEngine
from twc.stackrun.guard import GuardChannel

__all__ = ["RunOptions", "Supervisor", "load_settings", "run_daemon"]

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
    status_port: int | None = None
    """Overrides ``status_port``."""
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
    if options.status_port is not None:
        data["status_port"] = options.status_port
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


def _rollout_source(
    kube: KubeClient | None,
    workloads: Workloads | None,
    temporal_address: str | None,
    settings: DaemonSettings,
) -> RolloutSource | None:
    """Versioned workers' versions (from the cluster) and routing (through Temporal)."""
    if kube is None or workloads is None:
        return None
    from twc.kube.versions import read_gate_input, versions
    from twc.versioning import WorkerClients

    cluster = kube
    return RolloutSource(
        versions=lambda: versions(cluster),
        clients=WorkerClients(
            read_secret=workloads.read_secret,
            temporal_address=temporal_address,
            identity=settings.rollout.identity,
        ),
        read_input=lambda namespace, source: read_gate_input(cluster, namespace, source),
    )


ROOT_THREAD_PREFIX = "twc-"
"""Every long-lived thread of the daemon is named so; each one is a root of the daemon."""


class Supervisor:
    """Runs the loop in a thread and ends the daemon when any root thread ends."""

    def __init__(
        self,
        *,
        stack: str,
        stopping: Callable[[], bool],
        on_fatal: Callable[[str], None],
        grace: float,
        poll: float = 0.5,
    ) -> None:
        """Prepare the supervision.

        Args:
            stack: The stack (logs).
            stopping: Whether the daemon was asked to stop (threads then end on purpose).
            on_fatal: Called once with the reason when a root thread ended unasked: it
                must make the loop return soon (stop it, interrupt its engine).
            grace: Seconds the loop then gets to return before the daemon exits anyway.
            poll: Seconds between checks.
        """
        self._stack = stack
        self._stopping = stopping
        self._on_fatal = on_fatal
        self._grace = grace
        self._poll = poll
        self._seen: set[threading.Thread] = set()

    def run(self, loop: Callable[[], int]) -> int:
        """Run ``loop`` in the thread ``twc-loop`` until it returns; returns its exit
        code, or 1 when it raised or another root thread ended."""
        result: dict[str, int] = {}

        def target() -> None:
            try:
                result["code"] = loop()
            except BaseException:
                logger.exception("[%s] the reconcile loop crashed", self._stack)
                result["code"] = 1

        thread = threading.Thread(target=target, name=f"{ROOT_THREAD_PREFIX}loop", daemon=True)
        thread.start()
        while thread.is_alive():
            ended = self.ended()
            if ended and not self._stopping():
                reason = f"the daemon's thread {ended} ended"
                logger.error("[%s] %s: exiting so that it is restarted", self._stack, reason)
                self._on_fatal(reason)
                thread.join(self._grace)
                return 1
            thread.join(self._poll)
        return result.get("code", 1)

    def ended(self) -> str | None:
        """The name of a root thread that ran and has ended, if any."""
        for found in threading.enumerate():
            # Only once running: a thread just started is listed before it is alive.
            if found.name.startswith(ROOT_THREAD_PREFIX) and found.is_alive():
                self._seen.add(found)
        for seen in sorted(self._seen, key=lambda t: t.name):
            if not seen.is_alive():
                return seen.name
        return None


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
    file = fleet_file_for(options.stack, options.fleet_file)
    path = file if Path(file).is_absolute() else str(engine.ROOT / file)
    ref = stack_ref(options.stack, path)

    kube: KubeClient | None
    try:
        kube = kube_client((ref.env or {}).get("KUBECONFIG"))
    except NoClusterError:
        kube = None
        logger.warning("[%s] no Kubernetes API configured: no Queue objects", options.stack)
    if settings.leader_election.enabled and kube is None:
        print("twc run: --leader-elect needs a Kubernetes API", file=sys.stderr)
        return 1

    metrics = DaemonMetrics(options.stack)
    election = settings.leader_election
    state_dir = Path(tempfile.mkdtemp(prefix="twc-daemon-"))
    # The engine guard's channel: with election, no engine runs outside a Lease term.
    channel = GuardChannel(
        state_dir / "guard", grace=settings.engine.interrupt_grace, leased=election.enabled
    )
    elector: LeaseElector | None = None
    lease_kube: KubeClient | None = None
    daemon: Daemon | None = None
    if election.enabled and kube is not None:
        # The Lease's own client: calls short enough for a round to fit the renew
        # deadline, and no retries hiding a hung API server.
        lease_kube = kube_client(
            (ref.env or {}).get("KUBECONFIG"), timeout=call_timeout(election), retries=0
        )

        def lost() -> None:
            channel.lease_ended()
            if daemon is not None:
                daemon.request_stop(exit_code=1)

        lease_name = election.lease_name or lease_name_for(PROJECT, options.stack)
        # The program exports it: a later `twc up` on this stack takes part in the Lease.
        env = {**(ref.env or {}), DAEMON_LEASE_ENV: f"{election.lease_namespace}/{lease_name}"}
        ref = replace(ref, env=env)
        elector = LeaseElector(
            lease_kube.coordination,
            name=lease_name,
            namespace=election.lease_namespace,
            identity=f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
            settings=election,
            on_lost=lost,
            on_renewed=channel.lease_renewed,
            on_ended=channel.lease_ended,
            announced=channel.announced,
        )

    queues: QueueSource
    native: NativeWatch | None = None
    writer: NativeWriter | None = None
    views: TemporalWorkerViews | None = None
    workloads: Workloads | None = None
    record: RecordStore | None = None
    registry = default_registry()
    if kube is not None:
        queues = QueueWatcher(kube.custom, resync_interval=settings.resync_interval)
        # TemporalWorkers and every connection kind the registry knows (plugins too).
        native = NativeWatch(
            kube.custom, registry.watched_kinds(), resync_interval=settings.resync_interval
        )
        writer = NativeWriter(kube.custom, kube.core)
        # Every Queue and fleet-file worker shown as a TemporalWorker object.
        views = TemporalWorkerViews(kube.custom)
        workloads = Workloads(kube, stack=options.stack)
        # The stack's record: the last accepted specs and the held deletions.
        namespace = control_namespace(stack_config(ref))
        record = RecordStore(kube.core, namespace=namespace, stack=options.stack)
    else:
        queues = StaticQueues(())

    temporal_address = (ref.config or {}).get("temporalAddress")
    daemon = Daemon(
        options.stack,
        settings,
        Sources(
            fleet=CachedFleetFile(path),
            queues=queues,
            native=native,
            backlogs=TemporalBacklogs(
                read_secret=workloads.read_secret if workloads is not None else None,
                temporal_address=temporal_address,
            ),
            replicas=workloads.worker_replicas if workloads is not None else None,
            deployments=workloads.worker_deployments if workloads is not None else None,
            secrets=workloads.read_secret if workloads is not None else None,
            objects=workloads.read if workloads is not None else None,
            registry=registry,
            file=file,
            rollouts=_rollout_source(kube, workloads, temporal_address, settings),
            record=record,
        ),
        Effects(
            engine=AutomationEngine(
                ref,
                state_dir=state_dir,
                channel=channel,
                deadline=settings.engine.deadline,
                previous_engines=elector.inherited_engines if elector is not None else tuple,
                hold=elector.hold if elector is not None else contextlib.nullcontext,
            ),
            early=workloads,
            writer=writer,
            temporal_address=temporal_address,
            views=views,
        ),
        leader=elector,
        metrics=metrics,
        program={"config": dict(ref.config or {})},
    )
    try:
        server = HealthServer(
            metrics, port=settings.metrics_port, live=daemon.live, ready=daemon.ready
        ).start()
    except OSError as exc:
        print(f"twc run: cannot serve on port {settings.metrics_port}: {exc}", file=sys.stderr)
        return 1
    # /status names every worker and object of the stack (every tenant's): its own
    # listener, on loopback unless configured; the probes and /metrics stay reachable.
    try:
        status_server = HealthServer(
            metrics,
            port=settings.status_port,
            host=settings.status_host,
            live=daemon.live,
            ready=daemon.ready,
            status=daemon.status,
        ).start()
    except OSError as exc:
        server.stop()
        print(
            f"twc run: cannot serve /status on {settings.status_host}:"
            f"{settings.status_port}: {exc}",
            file=sys.stderr,
        )
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
        "[%s] twc daemon: fleet %s, /healthz /readyz /metrics on port %d, /status on %s:%d, "
        "settings %s",
        options.stack,
        file,
        server.port,
        settings.status_host,
        status_server.port,
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
    # Gone by the time the loop must have returned: the engine's grace and its kill.
    settle = settings.engine.interrupt_grace + KILL_MARGIN

    def fatal(reason: str) -> None:
        stop_daemon.request_stop(exit_code=1)
        channel.interrupt(reason)

    supervisor = Supervisor(
        stack=options.stack,
        stopping=lambda: stop_daemon.stopping,
        on_fatal=fatal,
        grace=settle + 30,
    )
    try:
        return supervisor.run(lambda: stop_daemon.run(once=options.once))
    finally:
        # Release the Lease only with no engine left: releasing ends the proof that
        # this daemon's engine is gone (otherwise the Lease simply expires).
        idle = channel.wait_idle(settle)
        if elector is not None:
            elector.stop(release=idle)
        server.stop()
        status_server.stop()
        for client in (kube, lease_kube):
            if client is not None:
                client.close()
