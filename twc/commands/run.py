"""``twc run``: wire the daemon to the real engine, cluster, Temporal and HTTP server.

The loop itself (:mod:`twc.loop.daemon`) only sees injected collaborators; this
module builds the real ones from the command line (:func:`wire`), installs the SIGTERM/SIGINT
handler (finish the current step, then exit 0) and serves ``/healthz``, ``/readyz``,
``/metrics`` and ``/status``.

A fleet with ``sharding`` runs every shard of the stack in this one process
(:class:`twc.loop.shards.ShardedDaemon`): one loop per shard over shared watches, at
most ``shards.engine_concurrency`` engine runs at once, one Lease per shard with
``--leader-elect`` (a replica takes at most its share).

It also supervises, as kopf does: the loop runs in a thread of its own and the main
thread watches every root thread (``twc-*``: the loop, the shards' loops, the watches,
the electors, the HTTP server). Once any of them ends while the daemon is not stopping,
the daemon interrupts its engine runs and exits non-zero, so Kubernetes restarts it
instead of leaving a daemon that only half works.
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
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from twc.commands.common import fleet_file_for, stack_config, stack_ref
from twc.connections import default_registry
from twc.kube.caches import DeploymentCache, SecretCache, digests_by_name
from twc.kube.client import KubeClient, NoClusterError, kube_client
from twc.kube.lease import DAEMON_LEASE_ENV, LeaseElector, call_timeout, lease_name_for
from twc.kube.record import CONTROL_NAMESPACE, control_namespace, record_for_stack
from twc.kube.scale import ReplicaScaler
from twc.kube.views import TemporalWorkerViews
from twc.kube.watch import NativeWatch, QueueWatcher, StaticQueues
from twc.kube.workloads import Workloads
from twc.kube.writer import NativeWriter
from twc.loop.act import Effects
from twc.loop.backlog import TemporalBacklogs, import_temporal
from twc.loop.daemon import Daemon
from twc.loop.filewatch import FleetFileWatch
from twc.loop.health import DaemonMetrics, HealthServer, MetricsSource, Probe
from twc.loop.observe import CachedFleetFile, Sources
from twc.loop.rollouts import RolloutSource
from twc.loop.sampling import (
    POLLERS_BURST,
    POLLERS_RATE_PER_S,
    SAMPLE_BURST,
    SAMPLE_RATE_PER_S,
    Allowance,
    Budgets,
    TokenBucket,
)
from twc.loop.settings import KILL_MARGIN, DaemonSettings
from twc.loop.shards import (
    EngineSlots,
    MergedMetrics,
    Shard,
    ShardedDaemon,
    ShardLeader,
    SlotEngine,
)
from twc.loop.shardviews import (
    FanoutWakeup,
    ShardFleet,
    ShardNamespaces,
    ShardNative,
    ShardQueues,
    shard_keyed,
    shard_keys,
)
from twc.stackrun import engine, retention
from twc.stackrun.automation import INPUTS_PREFIX, AutomationEngine
from twc.stackrun.guard import GuardChannel
from twc.stackrun.shards import SHARD_CONFIG, ShardEngine, shard_ref, stack_resources

__all__ = [
    "RunOptions",
    "Supervisor",
    "Wiring",
    "WiringError",
    "load_settings",
    "run_daemon",
    "wire",
]

logger = logging.getLogger(__name__)

PROJECT = "twc"
KEEP_BACKUPS = 10
"""The file backend writes a backup of the state and a copy into the stack's history on
every ``up`` and never removes them: the newest this many of each are kept per stack."""
REFRESH_SHARE = 0.25
"""The most of a sharded daemon's time its shards' refreshes take together
(:class:`~twc.loop.shards.EngineSlots`)."""


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
    rbac_scope: Literal["cluster", "namespaced"] = "cluster"
    """The RBAC the daemon runs under (the chart's ``rbac.scope``). ``namespaced``: Secrets
    are readable only in some namespaces, so they are never listed cluster-wide; each
    credential Secret an iteration needs is read by name instead of from a watch cache
    (a few GETs per iteration: one per connection's Secret)."""


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


class WiringError(RuntimeError):
    """The daemon cannot be wired as asked (the message says why, for the user)."""


@dataclass
class Wiring:
    """``twc run``'s parts, built and not yet started."""

    stack: str
    """The stack (the base stack of a sharded one)."""
    settings: DaemonSettings
    """The daemon's settings."""
    runner: Daemon | ShardedDaemon
    """The loop: one stack's, or every shard's."""
    metrics: MetricsSource
    """What ``/metrics`` renders."""
    file: str
    """The fleet file's name."""
    kube: KubeClient | None = None
    """The cluster (``None`` without one)."""
    channels: list[GuardChannel] = field(default_factory=list)
    """The engine guards' channels (one per stack the loop runs)."""
    lease_kube: KubeClient | None = None
    """The Leases' own client (short calls, no retries), with leader election."""
    starts: list[Callable[[], None]] = field(default_factory=list)
    stops: list[Callable[[], None]] = field(default_factory=list)
    release_leases: bool = False
    """Set by :meth:`close`: whether the Leases may be released (no engine left)."""
    state_dir: Path | None = None
    """The process's private directory (the engines' inputs files, the guards'
    channels); :meth:`close` removes the inputs files once no engine is left."""

    @property
    def live(self) -> Probe:
        """``/healthz``: the loop's progress."""
        return self.runner.live

    def start(self) -> None:
        """Start the watch caches (waiting a moment for their first lists) and the
        elections; the loop itself runs in :meth:`runner.run`."""
        for step in self.starts:
            step()

    def settle(self) -> float:
        """Seconds an interrupted engine run takes to be gone: its grace and its kill."""
        return self.settings.engine.interrupt_grace + KILL_MARGIN

    def interrupt(self, reason: str) -> None:
        """Interrupt every engine run in progress (the daemon is exiting)."""
        for channel in self.channels:
            channel.interrupt(reason)

    def idle(self) -> bool:
        """Wait (at most :meth:`settle`) until no engine run is left; whether none is."""
        deadline = time.monotonic() + self.settle()
        return all(
            channel.wait_idle(max(0.0, deadline - time.monotonic())) for channel in self.channels
        )

    def close(self) -> None:
        """Stop what :meth:`start` started, and close the clusters' connection pools.

        The Leases are released only with no engine left: releasing ends the proof that
        this daemon's engines are gone (otherwise a Lease simply expires).
        """
        self.release_leases = self.idle()
        for step in reversed(self.stops):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - shutting down: one part failing to stop never keeps the others running
                logger.warning("[%s] stopping: %s", self.stack, exc)
        for client in (self.kube, self.lease_kube):
            if client is not None:
                client.close()
        if self.state_dir is None:
            return
        if not self.release_leases:
            logger.warning(
                "[%s] an engine run is still ending: it keeps its inputs in %s",
                self.stack,
                self.state_dir,
            )
            return
        # A fleet's inputs file is megabytes: daemons that come and go on a host
        # (restarts, tests, benchmarks) would otherwise fill its temporary directory.
        # The guards' journals stay: a few bytes per engine command, the record of what
        # ran (the fault tests read it after the daemon ended).
        for inputs in self.state_dir.rglob(f"{INPUTS_PREFIX}*.json"):
            inputs.unlink(missing_ok=True)


def _secret_cache(
    kube: KubeClient, options: RunOptions, settings: DaemonSettings
) -> SecretCache | None:
    """The cluster-wide Secret cache, or ``None`` under namespaced RBAC (which grants no
    cluster-wide list: the cache would only ever answer 403)."""
    if options.rbac_scope == "namespaced":
        logger.info(
            "[%s] namespaced RBAC: credential Secrets are read by name, not watched",
            options.stack,
        )
        return None
    return SecretCache(kube, resync_interval=settings.resync_interval)


def _secret_digests(
    secrets: SecretCache | None, workloads: Workloads | None
) -> Callable[[str, str], dict[str, bytes]] | None:
    """How the loop reads credential digests: from the cache (a direct read until it is
    listed), or, without a cache (namespaced RBAC), always by name."""
    if workloads is None:
        return None
    if secrets is None:
        return digests_by_name(workloads.read_secret)
    return secrets.reader(workloads.read_secret)


def _caches(wiring: Wiring, cluster: _Cluster) -> None:
    caches: list[Any] = [c for c in (cluster.deployments, cluster.secrets) if c is not None]

    def start() -> None:
        for cache in caches:
            cache.start()
        for cache in caches:
            if not cache.wait_listed(timeout=10.0):
                logger.warning(
                    "[%s] %s not listed yet: %s",
                    wiring.stack,
                    cache.watcher.plural,
                    cache.failure() or "waiting",
                )

    def stop() -> None:
        for cache in caches:
            cache.stop()

    wiring.starts.append(start)
    wiring.stops.append(stop)


def _watch_file(wiring: Wiring, path: str, wakeup: threading.Event) -> None:
    """Wake the loop when the fleet file changes, not at the next iteration."""
    watch = FleetFileWatch(path, wakeup)
    wiring.starts.append(watch.start)
    wiring.stops.append(watch.stop)


def _sharding_of(path: str) -> Any:
    """The fleet's ``sharding`` block (``None`` when unsharded or unreadable: the loop
    reports an unreadable file as it does for any stack)."""
    from twc.errors import SpecError
    from twc.spec import load_fleet_file

    try:
        return load_fleet_file(path).sharding
    except SpecError:
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError):
            return None
        if isinstance(data, dict) and data.get("sharding"):
            raise WiringError(
                f"{path}: a sharded fleet must be valid when the daemon starts"
            ) from None
        return None


def wire(options: RunOptions, settings: DaemonSettings) -> Wiring:
    """Build ``twc run``'s loop from the command line, with the real engine, cluster,
    Temporal and watches (nothing is started).

    Raises:
        WiringError: The options cannot work (leader election without a cluster, a
            sharded fleet without one, or an unsharded stack that still holds state
            next to its shards).
    """
    file = fleet_file_for(options.stack, options.fleet_file)
    path = file if Path(file).is_absolute() else str(engine.ROOT / file)
    ref = stack_ref(options.stack, path)
    state = settings.state
    # How the engine writes the state (the daemon's settings, chosen by measurement).
    tuning = retention.engine_env(
        checkpoints=state.checkpoints, compression="none", parallel_diff=False
    )
    ref = replace(ref, env={**tuning, **(ref.env or {})})
    # Where the stack's record lives is part of the stack: every run writes it to the
    # stack's config, so every entry point reads the record this daemon writes.
    control = control_namespace(stack_config(ref))
    ref = replace(ref, config={**(ref.config or {}), CONTROL_NAMESPACE: control})

    kube: KubeClient | None
    try:
        kube = kube_client((ref.env or {}).get("KUBECONFIG"))
    except NoClusterError:
        kube = None
        logger.warning("[%s] no Kubernetes API configured: no Queue objects", options.stack)
    if settings.leader_election.enabled and kube is None:
        raise WiringError("--leader-elect needs a Kubernetes API")
    sharding = _sharding_of(path)
    if sharding is not None:
        if kube is None:
            raise WiringError("a sharded stack needs a Kubernetes API (its assignment is there)")
        return _wire_shards(options, settings, ref, path, file, kube, sharding)
    return _wire_one(options, settings, ref, path, file, kube)


def _pruned(engine_: Any, ref: engine.StackRef, settings: DaemonSettings) -> Any:
    # The file backend's backups and history copies, kept to the newest few per stack.
    return retention.PruningEngine(
        engine_,
        stack=ref.name,
        project=PROJECT,
        keep=KEEP_BACKUPS,
        env=ref.env,
    )


def _identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _lease_client(ref: engine.StackRef, settings: DaemonSettings) -> KubeClient:
    # The Leases' own client: calls short enough for a round to fit the renew deadline,
    # and no retries hiding a hung API server.
    return kube_client(
        (ref.env or {}).get("KUBECONFIG"),
        timeout=call_timeout(settings.leader_election),
        retries=0,
    )


def _in_lease(ref: engine.StackRef, namespace: str, name: str) -> engine.StackRef:
    # The program exports it: a later `twc up` on this stack takes part in the Lease.
    return replace(ref, env={**(ref.env or {}), DAEMON_LEASE_ENV: f"{namespace}/{name}"})


@dataclass
class _Cluster:
    """What every loop of the process reads and writes through the cluster."""

    kube: KubeClient
    workloads: Workloads
    """Reads Secrets and objects by name (any stack's)."""
    deployments: DeploymentCache
    """The stack's worker Deployments (a shard's carry its base stack's label), from a
    watch cache: an iteration reads memory, and another stack's workers in a shared
    namespace are never counted as this stack's."""
    secrets: SecretCache | None
    writer: NativeWriter
    views: TemporalWorkerViews
    """Every Queue and fleet-file worker shown as a TemporalWorker object."""
    scaler: ReplicaScaler


def _cluster(
    kube: KubeClient, options: RunOptions, settings: DaemonSettings, workloads: Workloads
) -> _Cluster:
    return _Cluster(
        kube,
        workloads,
        DeploymentCache(kube, resync_interval=settings.resync_interval, stack=options.stack),
        _secret_cache(kube, options, settings),
        NativeWriter(kube.custom, kube.core),
        TemporalWorkerViews(kube.custom),
        ReplicaScaler(kube),
    )


def _elector(
    leases: KubeClient,
    election: Any,
    channel: GuardChannel,
    *,
    name: str,
    identity: str,
    on_lost: Callable[[], None],
    **extra: Any,
) -> LeaseElector:
    """A Lease elector whose terms the engine guard's ``channel`` follows."""
    return LeaseElector(
        leases.coordination,
        name=name,
        namespace=election.lease_namespace,
        identity=identity,
        settings=election,
        on_lost=on_lost,
        on_renewed=channel.lease_renewed,
        on_ended=channel.lease_ended,
        announced=channel.announced,
        **extra,
    )


def _automation(
    ref: engine.StackRef,
    settings: DaemonSettings,
    state_dir: Path,
    channel: GuardChannel,
    leader: LeaseElector | ShardLeader | None,
) -> AutomationEngine:
    """The stack's engine: with a Lease, it runs only inside its term."""
    return AutomationEngine(
        ref,
        state_dir=state_dir,
        channel=channel,
        deadline=settings.engine.deadline,
        previous_engines=leader.inherited_engines if leader is not None else tuple,
        hold=leader.hold if leader is not None else contextlib.nullcontext,
    )


def _channel(state_dir: Path, settings: DaemonSettings) -> GuardChannel:
    # The engine guard's channel: with election, no engine runs outside a Lease term.
    return GuardChannel(
        state_dir / "guard",
        grace=settings.engine.interrupt_grace,
        leased=settings.leader_election.enabled,
    )


def _daemon(
    ref: engine.StackRef,
    settings: DaemonSettings,
    file: str,
    cluster: _Cluster | None,
    own: Workloads | None,
    reads: dict[str, Any],
    effects: dict[str, Any],
    **loop: Any,
) -> Daemon:
    """A stack's loop. ``reads``: its fleet, Queues, native objects and Deployment
    views; ``own``: its own objects; ``effects``: its engine (and refresh turn)."""
    config = {k: v for k, v in (ref.config or {}).items() if k != SHARD_CONFIG}
    temporal_address = config.get("temporalAddress")
    workloads = cluster.workloads if cluster is not None else None
    record = None
    if cluster is not None:
        # The stack's record: the last accepted specs and the held deletions.
        record = record_for_stack(cluster.kube.core, ref.name, stack_config(ref))
    return Daemon(
        ref.name,
        settings,
        Sources(
            **reads,
            backlogs=TemporalBacklogs(
                read_secret=workloads.read_secret if workloads is not None else None,
                temporal_address=temporal_address,
            ),
            secrets=_secret_digests(cluster.secrets if cluster else None, workloads),
            secret_data=workloads.read_secret if workloads is not None else None,
            objects=own.read if own is not None else None,
            registry=default_registry(),
            file=file,
            rollouts=_rollout_source(cluster.kube if cluster else None, own, temporal_address),
            record=record,
            program={"config": config},
        ),
        Effects(
            **effects,
            early=own,
            writer=cluster.writer if cluster else None,
            temporal_address=temporal_address,
            scaler=cluster.scaler if cluster else None,
            views=cluster.views if cluster else None,
        ),
        metrics=DaemonMetrics(ref.name),
        **loop,
    )


def _wire_one(
    options: RunOptions,
    settings: DaemonSettings,
    ref: engine.StackRef,
    path: str,
    file: str,
    kube: KubeClient | None,
) -> Wiring:
    election = settings.leader_election
    state_dir = Path(tempfile.mkdtemp(prefix="twc-daemon-"))
    channel = _channel(state_dir, settings)
    elector: LeaseElector | None = None
    lease_kube: KubeClient | None = None
    daemon: Daemon | None = None
    if election.enabled and kube is not None:
        lease_kube = _lease_client(ref, settings)

        def lost() -> None:
            channel.lease_ended()
            if daemon is not None:
                daemon.request_stop(exit_code=1)

        lease_name = election.lease_name or lease_name_for(PROJECT, options.stack)
        ref = _in_lease(ref, election.lease_namespace, lease_name)
        elector = _elector(
            lease_kube, election, channel, name=lease_name, identity=_identity(), on_lost=lost
        )
        kube = kube.fenced(channel.term_left)  # every write checks the term right before it
    cluster = None
    reads: dict[str, Any] = {"fleet": CachedFleetFile(path), "queues": StaticQueues(())}
    if kube is not None:
        cluster = _cluster(kube, options, settings, Workloads(kube, stack=options.stack))
        deployments = cluster.deployments
        reads |= {
            "queues": QueueWatcher(kube.custom, resync_interval=settings.resync_interval),
            # TemporalWorkers and every connection kind the registry knows (plugins too).
            "native": NativeWatch(
                kube.custom,
                default_registry().watched_kinds(),
                resync_interval=settings.resync_interval,
            ),
            "replicas": deployments.worker_replicas,
            "scaled": deployments.scaled,
            "deployments": deployments.worker_deployments,
        }
    automation = _automation(ref, settings, state_dir, channel, elector)
    daemon = _daemon(
        ref,
        settings,
        file,
        cluster,
        cluster.workloads if cluster is not None else None,
        reads,
        {"engine": _pruned(automation, ref, settings)},
        leader=elector,
    )
    wiring = Wiring(
        options.stack, settings, daemon, daemon.metrics, file, kube, [channel], lease_kube
    )
    wiring.state_dir = state_dir
    if cluster is not None:
        _caches(wiring, cluster)
    _watch_file(wiring, path, daemon.wakeup)
    if elector is not None:
        lease = elector

        def elect() -> None:
            logger.info(
                "[%s] leader election on lease %s/%s as %s",
                options.stack,
                lease.namespace,
                lease.name,
                lease.identity,
            )
            lease.start()

        wiring.starts.append(elect)
        wiring.stops.append(lambda: lease.stop(release=wiring.release_leases))
    return wiring


@dataclass
class _ShardParts:
    """What a sharded daemon's shards share, and how a shard is made from them."""

    options: RunOptions
    settings: DaemonSettings
    base: engine.StackRef
    file: str
    cluster: _Cluster
    fleet: CachedFleetFile
    queue_watch: QueueWatcher
    native_watch: NativeWatch
    fanout: FanoutWakeup = field(default_factory=FanoutWakeup)
    slots: EngineSlots | None = None
    budgets: Budgets | None = None
    identity: str = field(default_factory=_identity)
    state_root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="twc-daemon-")))
    channels: list[GuardChannel] = field(default_factory=list)
    lease_kube: KubeClient | None = None
    sharded: ShardedDaemon | None = None

    def __post_init__(self) -> None:
        settings = self.settings
        self.slots = EngineSlots(
            settings.shards.engine_concurrency,
            refresh_share=REFRESH_SHARE,
            # A due shard asks every iteration; one that has not for a few is out of line.
            claim_ttl=max(120.0, 4 * settings.reconcile_interval),
        )
        # One backlog budget and one pollers budget for the process, whatever the
        # number of shards: Temporal's capacity does not grow with them.
        self.budgets = Budgets(
            samples=TokenBucket(SAMPLE_RATE_PER_S, burst=SAMPLE_BURST),
            pollers=Allowance(POLLERS_RATE_PER_S, burst=POLLERS_BURST),
        )
        if settings.leader_election.enabled:
            self.lease_kube = _lease_client(self.base, settings)

    def load(self) -> dict[str, int]:
        """Workers per namespace, for the assignment."""
        from twc.shards import namespace_load

        native = self.native_watch.snapshot()
        workers = native.workers if native is not None else ()
        return namespace_load(self.fleet(), self.queue_watch.snapshot() or (), workers)

    def make_shard(self, index: int, namespaces: ShardNamespaces) -> Shard:
        """Shard ``index``'s loop over ``namespaces``, gated on the process's slots."""
        assert self.slots is not None
        ref = shard_ref(self.base, index, namespaces())
        state_dir = self.state_root / f"shard-{index}"
        channel = _channel(state_dir, self.settings)
        self.channels.append(channel)
        leader = None
        if self.settings.leader_election.enabled:
            lease_name = lease_name_for(PROJECT, ref.name)
            ref = _in_lease(ref, self.settings.leader_election.lease_namespace, lease_name)
            leader = self._leader(index, ref.name, lease_name, channel)
        automation = _automation(ref, self.settings, state_dir, channel, leader)
        engine_ = SlotEngine(
            _pruned(ShardEngine(automation, namespaces), ref, self.settings), self.slots
        )
        cluster = self.cluster
        if leader is not None:  # every write of the shard checks its term right before it
            fenced = cluster.kube.fenced(channel.term_left)
            cluster = replace(
                cluster,
                kube=fenced,
                writer=NativeWriter(fenced.custom, fenced.core),
                views=TemporalWorkerViews(fenced.custom),
                scaler=ReplicaScaler(fenced),
            )
        # The shard's own objects (it is a stack of its own) and its own record.
        own = Workloads(cluster.kube, stack=ref.name, namespaces=namespaces)
        deployments = self.cluster.deployments
        reads = {
            "fleet": ShardFleet(self.fleet, namespaces),
            "queues": ShardQueues(self.queue_watch, namespaces, self.fanout),
            "native": ShardNative(self.native_watch, namespaces, self.fanout),
            "replicas": shard_keyed(lambda: deployments.by_namespace("replicas"), namespaces),
            "scaled": shard_keys(lambda: deployments.by_namespace("scaled"), namespaces),
            "deployments": shard_keyed(lambda: deployments.by_namespace("deployments"), namespaces),
        }
        effects = {"engine": engine_, "refresh_turn": self.slots.refresh_turn}
        daemon = _daemon(
            ref,
            self.settings,
            self.file,
            cluster,
            own,
            reads,
            effects,
            leader=leader,
            budgets=self.budgets,
        )

        def others() -> frozenset[Any]:
            # A connection another shard uses keeps its delete protection.
            assert self.sharded is not None
            shards = self.sharded.shards.items()
            return frozenset().union(*(s.daemon.reporter.in_use for i, s in shards if i != index))

        daemon.reporter.also_in_use = others
        return Shard(index, ref.name, namespaces, daemon, engine_, leader)

    def _leader(
        self, index: int, stack: str, lease_name: str, channel: GuardChannel
    ) -> ShardLeader:
        assert self.sharded is not None
        assert self.lease_kube is not None
        leases, may_acquire = self.lease_kube, self.sharded.may_acquire

        def lost() -> None:
            # Losing one shard's Lease stops that shard's engine and turns only its loop
            # standby.
            channel.lease_ended()
            logger.error("[%s] lost the shard's lease", stack)

        return ShardLeader(
            lambda: _elector(
                leases,
                self.settings.leader_election,
                channel,
                name=lease_name,
                identity=self.identity,
                on_lost=lost,
                may_acquire=may_acquire,
                thread_name=f"shard-leader-{index}",
            )
        )


def _wire_shards(
    options: RunOptions,
    settings: DaemonSettings,
    base: engine.StackRef,
    path: str,
    file: str,
    kube: KubeClient,
    sharding: Any,
) -> Wiring:
    from twc.kube.members import MemberRoster, fair_share
    from twc.kube.shardmap import ShardMapStore

    # The shards' loops sample from several threads: import temporalio here, once.
    import_temporal()
    held = stack_resources(base)
    if held:
        raise WiringError(
            f"{options.stack} holds {len(held)} resources of its own: move it to its shards "
            f"first (`twc shards migrate --stack {options.stack}`), or two stacks would own "
            "the same objects"
        )
    parts = _ShardParts(
        options,
        settings,
        base,
        file,
        _cluster(kube, options, settings, Workloads(kube)),
        CachedFleetFile(path),
        QueueWatcher(kube.custom, resync_interval=settings.resync_interval),
        NativeWatch(
            kube.custom,
            default_registry().watched_kinds(),
            resync_interval=settings.resync_interval,
        ),
    )
    roster: MemberRoster | None = None
    election = settings.leader_election
    if parts.lease_kube is not None:
        roster = MemberRoster(
            parts.lease_kube.coordination,
            namespace=election.lease_namespace,
            stack=options.stack,
            identity=parts.identity,
            settings=election,
        )
    store = ShardMapStore(kube.core, namespace=sharding.assignment_namespace, stack=options.stack)
    sharded = parts.sharded = ShardedDaemon(
        options.stack,
        store=store,
        load=parts.load,
        make_shard=parts.make_shard,
        max_workers_per_shard=sharding.max_workers_per_shard,
        share=(lambda shards: fair_share(shards, roster.count())) if roster is not None else None,
        slots=parts.slots,
    )
    metrics = MergedMetrics(lambda: [s.daemon.metrics.registry for s in sharded.shards.values()])
    wiring = Wiring(
        options.stack, settings, sharded, metrics, file, kube, parts.channels, parts.lease_kube
    )
    wiring.state_dir = parts.state_root
    _shared_watches(wiring, parts, roster)
    _caches(wiring, parts.cluster)
    # An edit wakes every shard's loop, and the assignment (a new namespace needs a shard).
    parts.fanout.subscribe(sharded.wakeup, lambda: ())
    _watch_file(wiring, path, parts.fanout)
    return wiring


def _shared_watches(wiring: Wiring, parts: _ShardParts, roster: Any) -> None:
    """Start the shards' shared watches (and count the replicas before any shard's
    Lease is taken) with the wiring; stop them with it."""

    def start() -> None:
        parts.queue_watch.start(parts.fanout)
        parts.native_watch.start(parts.fanout)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and (
            parts.queue_watch.snapshot() is None or parts.native_watch.snapshot() is None
        ):
            time.sleep(0.05)
        if roster is not None:
            try:
                roster.round()
            except Exception as exc:  # noqa: BLE001 - the roster's thread retries; start counting 1
                logger.warning("[%s] member lease: %s", wiring.stack, exc)
            roster.start()

    def stop() -> None:
        if roster is not None:
            roster.stop()
        parts.queue_watch.stop()
        parts.native_watch.stop()

    wiring.starts.append(start)
    wiring.stops.append(stop)


def _serve(wiring: Wiring, settings: DaemonSettings) -> tuple[Any, Any] | None:
    """Serve the probes and ``/metrics``, and ``/status`` on a listener of its own
    (it names every worker and object of the stack, every tenant's: on loopback unless
    configured); ``None`` (said on stderr) when a port cannot be served."""
    runner = wiring.runner
    try:
        server = HealthServer(
            wiring.metrics, port=settings.metrics_port, live=wiring.live, ready=runner.ready
        ).start()
    except OSError as exc:
        print(f"twc run: cannot serve on port {settings.metrics_port}: {exc}", file=sys.stderr)
        return None
    try:
        status_server = HealthServer(
            wiring.metrics,
            port=settings.status_port,
            host=settings.status_host,
            live=wiring.live,
            ready=runner.ready,
            status=runner.status,
        ).start()
    except OSError as exc:
        server.stop()
        print(
            f"twc run: cannot serve /status on {settings.status_host}:"
            f"{settings.status_port}: {exc}",
            file=sys.stderr,
        )
        return None
    return server, status_server


def run_daemon(options: RunOptions) -> int:
    """Run the daemon until SIGTERM (or one iteration with ``--once``).

    Returns:
        The exit code: 0 after SIGTERM or a successful ``--once``; 1 after losing the
        Lease (of an unsharded stack), a failed ``--once``, invalid settings, or a
        thread of the daemon that ended.
    """
    _configure_logging()
    try:
        settings = load_settings(options)
    except (OSError, ValueError) as exc:
        print(f"twc run: invalid settings: {exc}", file=sys.stderr)
        return 1
    try:
        wiring = wire(options, settings)
    except WiringError as exc:
        print(f"twc run: {exc}", file=sys.stderr)
        return 1
    runner = wiring.runner
    servers = _serve(wiring, settings)
    if servers is None:
        wiring.close()
        return 1
    server, status_server = servers

    def on_signal(signum: int, _frame: object) -> None:
        logger.info(
            "[%s] %s: finishing the current step, then exiting",
            options.stack,
            signal.Signals(signum).name,
        )
        runner.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logger.info(
        "[%s] twc daemon%s: fleet %s, /healthz /readyz /metrics on port %d, /status on %s:%d, "
        "settings %s",
        options.stack,
        " (sharded)" if isinstance(runner, ShardedDaemon) else "",
        wiring.file,
        server.port,
        settings.status_host,
        status_server.port,
        json.dumps(settings.model_dump(mode="json"), sort_keys=True),
    )

    def fatal(reason: str) -> None:
        runner.request_stop(exit_code=1)
        wiring.interrupt(reason)

    supervisor = Supervisor(
        stack=options.stack,
        stopping=lambda: runner.stopping,
        on_fatal=fatal,
        grace=wiring.settle() + 30,
    )
    try:
        wiring.start()
        return supervisor.run(lambda: runner.run(once=options.once))
    finally:
        wiring.close()
        server.stop()
        status_server.stop()
