"""``twc run``: the daemon wired to the real engine, cluster, Temporal and HTTP server.

A sharded fleet runs every shard in this process, one Lease per shard. The daemon ends on
SIGTERM/SIGINT after the current step (exit 0); once any root thread (``twc-*``) ends
unasked, engine runs are interrupted and it exits 1, so Kubernetes restarts it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
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
from functools import partial
from pathlib import Path
from typing import Any, Literal

from twc.cli.common import fleet_file_for, fleet_path, stack_config, stack_ref
from twc.cli.shards import is_sharded
from twc.cli.stack_lease import guard_elector, lease_client
from twc.connections import default_registry
from twc.engine import engine, workspace
from twc.engine.automation import INPUTS_PREFIX, AutomationEngine
from twc.engine.engine import SHARD_CONFIG
from twc.engine.shards import shard_ref, stack_resources
from twc.engine.supervisor import GuardChannel
from twc.errors import SpecError
from twc.kube.caches import DeploymentCache, SecretCache, digests_by_name
from twc.kube.client import KubeClient, NoClusterError, kube_client
from twc.kube.lease import DAEMON_LEASE_ENV, LeaseElector, lease_name_for
from twc.kube.record import CONTROL_NAMESPACE, control_namespace, record_for_stack
from twc.kube.watch import NativeWatch, QueueWatcher, StaticQueues
from twc.kube.workloads import ReplicaScaler, Workloads, read_gate_input, versions
from twc.kube.writer import NativeWriter, TemporalWorkerViews
from twc.reconcile import shards
from twc.reconcile.act import Effects
from twc.reconcile.asking import Budget, TemporalBacklogs, import_temporal
from twc.reconcile.daemon import Daemon
from twc.reconcile.health import HealthServer, MetricsSource
from twc.reconcile.observe import CachedFleetFile, FleetFileWatch, RolloutSource, Sources
from twc.reconcile.settings import KILL_MARGIN, DaemonSettings
from twc.shards import namespace_load, slice_fleet
from twc.spec import load_fleet_file

logger = logging.getLogger(__name__)

PROJECT = "twc"
REFRESH_SHARE = 0.25  # the most of a sharded daemon's time its shards' refreshes take
ENGINE_NICENESS = 5  # the engine gives the daemon's loops a core first (docs/architecture.md)
ROOT_THREAD_PREFIX = "twc-"  # every long-lived thread of the daemon: its roots
THAW_EVERY = 600.0  # seconds between full collections that look at frozen objects again
LIBC = ctypes.CDLL(None)  # the C allocator's arenas and free pages (docs/architecture.md)
# The Deployments' reads of a stack's loop (keys of the "scaled" read: the Deployments).
_DEPLOYMENT_READS = ("replicas", "scaled", "deployments")


@dataclass(frozen=True)
class RunOptions:
    """``twc run``'s flags; one left ``None`` keeps the settings file's value."""

    stack: str
    fleet_file: str | None = None
    settings_file: str | None = None
    port: int | None = None
    status_port: int | None = None
    interval: float | None = None
    leader_elect: bool = False
    lease_namespace: str | None = None
    lease_name: str | None = None
    once: bool = False
    rbac_scope: Literal["cluster", "namespaced"] = "cluster"


def load_settings(options: RunOptions) -> DaemonSettings:
    """The settings file's fields, then the flags; ``ValueError`` if invalid."""
    data: dict[str, Any] = {}
    if options.settings_file:
        import yaml

        loaded = yaml.safe_load(Path(options.settings_file).read_text())
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{options.settings_file}: expected a mapping of settings")
        data = dict(loaded or {})
    flags = {
        "metrics_port": options.port,
        "status_port": options.status_port,
        "reconcile_interval": options.interval,
    }
    data |= {key: value for key, value in flags.items() if value is not None}
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


@dataclass(kw_only=True)
class Supervisor:
    """Runs the loop in a thread and ends the daemon when any root thread ends.

    ``on_fatal(reason)`` must make the loop return, within ``grace`` seconds; a root
    thread that ends while ``stopping()`` is no failure."""

    stack: str
    stopping: Callable[[], bool]
    on_fatal: Callable[[str], None]
    grace: float
    poll: float = 0.5
    _seen: set[threading.Thread] = field(default_factory=set, init=False)

    def run(self, loop: Callable[[], int]) -> int:
        """``loop``'s exit code (run in ``twc-loop``), or 1 if it raised or a root thread ended."""
        result: dict[str, int] = {}

        def target() -> None:
            try:
                result["code"] = loop()
            except BaseException:
                logger.exception("[%s] the reconcile loop crashed", self.stack)

        thread = threading.Thread(target=target, name=f"{ROOT_THREAD_PREFIX}loop", daemon=True)
        thread.start()
        while thread.is_alive():
            ended = self.ended()
            if ended and not self.stopping():
                reason = f"the daemon's thread {ended} ended"
                logger.error("[%s] %s: exiting so that it is restarted", self.stack, reason)
                self.on_fatal(reason)
                thread.join(self.grace)
                return 1
            thread.join(self.poll)
        return result.get("code", 1)

    def _ours(self, name: str) -> bool:
        """Whether a thread is one of this daemon's roots: engine and asking threads carry
        their stack's name, so another stack's (a daemon run before in this process) is not."""
        for kind in ("twc-engine-", "twc-ask-"):
            if name.startswith(kind):
                return name[len(kind) :].startswith(self.stack)
        return name.startswith(ROOT_THREAD_PREFIX)

    def ended(self) -> str | None:
        """The name of a root thread that ran and has ended, if any."""
        for found in threading.enumerate():
            # Only once running: a thread just started is listed before it is alive.
            if self._ours(found.name) and found.is_alive():
                self._seen.add(found)
        return next(
            (t.name for t in sorted(self._seen, key=lambda t: t.name) if not t.is_alive()), None
        )


class WiringError(RuntimeError):
    """The daemon cannot be wired as asked (the message says why, for the user)."""


@dataclass
class Wiring:
    """``twc run``'s parts, built and not yet started."""

    stack: str
    settings: DaemonSettings
    runner: Daemon | shards.ShardedDaemon
    metrics: MetricsSource
    file: str
    kube: KubeClient | None = None
    channels: list[GuardChannel] = field(default_factory=list)  # one per stack run
    lease_kube: KubeClient | None = None
    # (start, stop) of each part: started in order with the daemon, stopped in reverse.
    parts: list[tuple[Callable[[], object], Callable[[], object]]] = field(default_factory=list)
    release_leases: bool = False  # set by close(): no engine is left
    state_dir: Path | None = None  # the engines' inputs files, the guards' channels
    wake: Callable[[], None] | None = None  # every loop (SIGHUP)

    def settle(self) -> float:
        """Seconds an interrupted engine run takes to be gone: its grace and its kill."""
        return self.settings.engine.interrupt_grace + KILL_MARGIN

    def close(self) -> None:
        """Stop the started ``parts``; release Leases and inputs only with no engine left."""
        deadline = time.monotonic() + self.settle()
        self.release_leases = all(
            c.wait_idle(max(0.0, deadline - time.monotonic())) for c in self.channels
        )
        for _, stop in reversed(self.parts):
            try:
                stop()
            except Exception as exc:  # noqa: BLE001 - one part failing to stop never keeps the others running
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
        for inputs in self.state_dir.rglob(f"{INPUTS_PREFIX}*.json"):
            inputs.unlink(missing_ok=True)


@dataclass(frozen=True)
class _Cluster:
    """What every loop of the process reads through the cluster."""

    kube: KubeClient
    workloads: Workloads  # reads Secrets by name (any stack's)
    deployments: DeploymentCache
    secrets: SecretCache | None  # None under namespaced RBAC: each Secret read by name
    queues: QueueWatcher
    # TemporalWorkers and every connection kind the registry knows (plugins too).
    native: NativeWatch

    def watch(self, wiring: Wiring) -> None:
        """Start the caches with ``wiring``, waiting a moment for their first lists."""
        caches: list[Any] = [c for c in (self.deployments, self.secrets) if c is not None]

        def start() -> None:
            for cache in caches:
                cache.start()
            for cache in caches:
                if not cache.wait_listed(timeout=10.0):
                    why = cache.failure() or "waiting"
                    logger.warning("[%s] %s not listed yet: %s", wiring.stack, cache.plural, why)

        wiring.parts.append((start, lambda: [cache.stop() for cache in caches]))


def _cluster(kube: KubeClient, options: RunOptions, settings: DaemonSettings) -> _Cluster:
    resync = settings.resync_interval
    secrets = None
    if options.rbac_scope == "namespaced":
        logger.info("[%s] namespaced RBAC: credential Secrets are read by name", options.stack)
    else:
        secrets = SecretCache(kube, resync_interval=resync)
    deployments = DeploymentCache(kube, resync_interval=resync, stack=options.stack)
    queues = QueueWatcher(kube.custom, resync_interval=resync)
    native = NativeWatch(kube.custom, default_registry().watched_kinds(), resync_interval=resync)
    return _Cluster(kube, Workloads(kube), deployments, secrets, queues, native)


def _identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def _guard(
    ref: engine.StackRef,
    settings: DaemonSettings,
    state_dir: Path,
    leases: KubeClient | None,
    lease: tuple[str, str],
    on_lost: Callable[[], object],
    **extra: Any,
) -> tuple[engine.StackRef, GuardChannel, Callable[[], LeaseElector] | None]:
    """A loop's engine guard channel: with election, no engine runs outside a Lease term.
    Under election (``leases``), also ``ref`` in the Lease ``lease`` (name, identity) and
    how to make its elector: a lost term stops the engine, then calls ``on_lost``."""
    election, (name, identity) = settings.leader_election, lease
    grace, nice = settings.engine.interrupt_grace, ENGINE_NICENESS
    channel = GuardChannel(state_dir / "guard", grace=grace, leased=election.enabled, niceness=nice)
    if leases is None:
        return ref, channel, None

    def lost() -> None:
        channel.lease_ended()
        on_lost()

    namespace = election.lease_namespace
    hooks = {"identity": identity, "timings": election, "on_lost": lost, **extra}
    elect = partial(guard_elector, leases, channel, name=name, namespace=namespace, **hooks)
    # The program exports it: a later `twc up` on this stack takes part in the Lease.
    return ref.with_env({DAEMON_LEASE_ENV: f"{namespace}/{name}"}), channel, elect


def _automation(
    ref: engine.StackRef,
    settings: DaemonSettings,
    state_dir: Path,
    channel: GuardChannel,
    leader: LeaseElector | shards.ShardLeader | None,
    namespaces: shards.ShardNamespaces | None = None,
) -> AutomationEngine:
    """The stack's engine: with a Lease, it runs only inside its term."""
    return AutomationEngine(
        ref,
        state_dir=state_dir,
        channel=channel,
        deadline=settings.engine.deadline,
        previous_engines=leader.inherited_engines if leader is not None else tuple,
        hold=leader.hold if leader is not None else contextlib.nullcontext,
        namespaces=namespaces,
    )


def _daemon(
    ref: engine.StackRef,
    settings: DaemonSettings,
    file: str,
    cluster: _Cluster | None,
    namespaces: shards.ShardNamespaces | None,
    reads: dict[str, Any],
    effects: dict[str, Any],
    **loop: Any,
) -> Daemon:
    """A stack's loop over ``reads``, writing its own objects (of ``namespaces``, or all),
    with ``effects``' engine."""
    config = {k: v for k, v in (ref.config or {}).items() if k != SHARD_CONFIG}
    address = config.get("temporalAddress")
    sources: dict[str, Any] = {"registry": default_registry(), "program": {"config": config}}
    effect: dict[str, Any] = {"temporal_address": address}
    read_secret = None
    if cluster is not None:
        from twc.kube.dryrun import dry_run_fleet
        from twc.versioning import WorkerClients

        kube, read_secret, secrets = cluster.kube, cluster.workloads.read_secret, cluster.secrets
        # The stack's own objects (a shard is a stack of its own) and its own record.
        own = Workloads(kube, stack=ref.name, namespaces=namespaces)
        sources |= {
            "secrets": secrets.reader(read_secret) if secrets else digests_by_name(read_secret),
            "secret_data": read_secret,
            "objects": own.read,
            "dry_run": lambda fleet, origins, only: (
                dry_run_fleet(
                    fleet, file=file, api_client=kube.api_client, origins=origins, only=only
                ).refused
            ),
            "rollouts": RolloutSource(
                versions=lambda: versions(kube),
                clients=WorkerClients(read_secret=read_secret, temporal_address=address),
                read_input=lambda namespace, source: read_gate_input(kube, namespace, source),
            ),
            # The stack's record: the last accepted specs and the held deletions.
            "record": record_for_stack(kube.core, ref.name, stack_config(ref)),
        }
        effect |= {
            "early": own,
            "writer": NativeWriter(kube.custom, kube.core),
            "scaler": ReplicaScaler(kube),
            "views": TemporalWorkerViews(kube.custom),
        }
    backlogs = TemporalBacklogs(read_secret=read_secret, temporal_address=address)
    observe = Sources(**reads, **sources, backlogs=backlogs, file=file)
    return Daemon(ref.name, settings, observe, Effects(**effects, **effect), **loop)


def wire(options: RunOptions, settings: DaemonSettings) -> Wiring:
    """``twc run``'s parts, not started; ``WiringError`` when they cannot be wired."""
    file = fleet_file_for(options.stack, options.fleet_file)
    path = fleet_path(file)
    ref = stack_ref(options.stack, path)
    tuning = workspace.engine_env(checkpoints=settings.state.checkpoints)
    # The record's namespace is part of the stack's config: every entry point finds it.
    control = control_namespace(stack_config(ref))
    ref = replace(
        ref,
        env={**tuning, **(ref.env or {})},
        config={**(ref.config or {}), CONTROL_NAMESPACE: control},
    )
    kube: KubeClient | None = None
    try:
        kube = kube_client((ref.env or {}).get("KUBECONFIG"))
    except NoClusterError:
        logger.warning("[%s] no Kubernetes API configured: no Queue objects", options.stack)
    if settings.leader_election.enabled and kube is None:
        raise WiringError("--leader-elect needs a Kubernetes API")
    if not is_sharded(options.stack, path):
        return _wire_one(options, settings, ref, path, file, kube)
    if kube is None:
        raise WiringError("a sharded stack needs a Kubernetes API (its assignment is there)")
    try:
        sharding = load_fleet_file(path).sharding
    except SpecError:
        raise WiringError(f"{path}: a sharded fleet must be valid when the daemon starts") from None
    return _Shards(options, settings, ref, file, kube).wire(sharding)


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
    lease_kube = lease_client(ref, election) if election.enabled and kube is not None else None
    lease_id = (election.lease_name or lease_name_for(PROJECT, options.stack), _identity())

    def lost() -> None:  # only once started: the daemon is built by then
        daemon.request_stop(exit_code=1)

    ref, channel, elect = _guard(ref, settings, state_dir, lease_kube, lease_id, lost)
    elector = elect() if elect is not None else None
    if kube is not None and elector is not None:
        kube = kube.fenced(channel.term_left)  # every write checks the term right before it
    cluster = None
    reads: dict[str, Any] = {"fleet": CachedFleetFile(path), "queues": StaticQueues(())}
    if kube is not None:
        cluster = _cluster(kube, options, settings)
        reads |= {"queues": cluster.queues, "native": cluster.native}
        reads |= {r: partial(cluster.deployments.read, r) for r in _DEPLOYMENT_READS}
    automation = _automation(ref, settings, state_dir, channel, elector)
    effects = {"engine": automation}
    daemon = _daemon(ref, settings, file, cluster, None, reads, effects, leader=elector)
    wiring = Wiring(
        options.stack, settings, daemon, daemon.metrics, file, kube, [channel], lease_kube
    )
    wiring.state_dir = state_dir
    if cluster is not None:
        cluster.watch(wiring)
    watch = FleetFileWatch(path, daemon.wakeup)  # an edit wakes the loop at once
    wiring.parts.append((watch.start, watch.stop))
    wiring.wake = daemon.wakeup.set
    if elector is not None:
        lease, where = elector, f"{elector.namespace}/{elector.name}"
        logger.info("[%s] leader election on lease %s as %s", options.stack, where, lease.identity)
        wiring.parts.append((lease.start, lambda: lease.stop(release=wiring.release_leases)))
    return wiring


class _Shards:
    """A sharded daemon's shared parts, and how a shard is made from them."""

    def __init__(
        self,
        options: RunOptions,
        settings: DaemonSettings,
        base: engine.StackRef,
        file: str,
        kube: KubeClient,
    ) -> None:
        self.options, self.settings, self.base = options, settings, base
        self.path, self.file = fleet_path(file), file
        self.cluster = _cluster(kube, options, settings)
        self.fleet = CachedFleetFile(self.path)
        self.fanout = shards.FanoutWakeup()
        # A due shard asks every iteration; one that has not for a few is out of line.
        ttl = max(120.0, 4 * settings.reconcile_interval)
        self.slots = shards.EngineSlots(
            settings.shards.engine_concurrency, refresh_share=REFRESH_SHARE, claim_ttl=ttl
        )
        # One Temporal budget for the process: its capacity does not grow with the shards.
        self.budgets = Budget()
        self.identity = _identity()
        self.state_root = Path(tempfile.mkdtemp(prefix="twc-daemon-"))
        self.channels: list[GuardChannel] = []
        election = settings.leader_election
        self.lease_kube = lease_client(base, election) if election.enabled else None
        self.sharded: shards.ShardedDaemon | None = None

    def load(self) -> dict[str, int]:
        """Workers per namespace, for the assignment."""
        native = self.cluster.native.snapshot()
        workers = native.workers if native is not None else ()
        return namespace_load(self.fleet(), self.cluster.queues.snapshot() or (), workers)

    def make_shard(self, index: int, namespaces: shards.ShardNamespaces) -> shards.Shard:
        """Shard ``index``'s loop over ``namespaces``, gated on the process's slots."""
        ref = shard_ref(self.base, index, namespaces())
        state_dir = self.state_root / f"shard-{index}"
        assert self.sharded is not None  # it makes its shards
        # Only this shard's engine stops, and only its loop turns standby.
        lost = partial(logger.error, "[%s] lost the shard's lease", ref.name)
        lease = (lease_name_for(PROJECT, ref.name), self.identity)
        extra = {"may_acquire": self.sharded.may_acquire, "thread_name": f"shard-leader-{index}"}
        ref, channel, elect = _guard(
            ref, self.settings, state_dir, self.lease_kube, lease, lost, **extra
        )
        self.channels.append(channel)
        leader, cluster = None, self.cluster
        if elect is not None:  # under leader election
            leader = shards.ShardLeader(elect)
            # Every write of the shard checks its term right before it.
            cluster = replace(cluster, kube=cluster.kube.fenced(channel.term_left))
        automation = _automation(ref, self.settings, state_dir, channel, leader, namespaces)
        engine_ = shards.SlotEngine(automation, self.slots)
        by_namespace, cuts = self.cluster.deployments.by_namespace, shards.KeptCuts(namespaces)
        reads = {
            "fleet": lambda: cuts.get("fleet", self.fleet(), slice_fleet),  # one shared parse
            "queues": shards.ShardQueues(self.cluster.queues, namespaces, self.fanout),
            "native": shards.ShardNative(self.cluster.native, namespaces, self.fanout),
            **{
                r: shards.shard_keyed(partial(by_namespace, r), namespaces)
                for r in _DEPLOYMENT_READS
            },
        }
        effects = {"engine": engine_, "refresh_turn": self.slots.refresh_turn}
        loop = {"leader": leader, "budgets": self.budgets}
        daemon = _daemon(ref, self.settings, self.file, cluster, namespaces, reads, effects, **loop)

        def others() -> frozenset[Any]:
            # A connection another shard uses keeps its delete protection.
            assert self.sharded is not None
            others = self.sharded.shards.items()
            return frozenset().union(*(s.daemon.reporter.in_use for i, s in others if i != index))

        daemon.reporter.also_in_use = others
        return shards.Shard(index, ref.name, namespaces, daemon, engine_, leader)

    def wire(self, sharding: Any) -> Wiring:
        from twc.kube.shards import MemberRoster, ShardMapStore, fair_share

        stack = self.options.stack
        import_temporal()  # the shards' loops sample from several threads: import it once
        held = stack_resources(self.base)
        if held:
            raise WiringError(
                f"{stack} holds {len(held)} resources of its own: move it to its shards "
                f"first (`twc shards migrate --stack {stack}`), or two stacks would own "
                "the same objects"
            )
        roster: MemberRoster | None = None
        election = self.settings.leader_election
        if self.lease_kube is not None:
            roster = MemberRoster(
                self.lease_kube.coordination,
                namespace=election.lease_namespace,
                stack=stack,
                identity=self.identity,
                settings=election,
            )
        kube = self.cluster.kube
        store = ShardMapStore(kube.core, namespace=sharding.assignment_namespace, stack=stack)
        sharded = self.sharded = shards.ShardedDaemon(
            stack,
            store=store,
            load=self.load,
            make_shard=self.make_shard,
            max_workers_per_shard=sharding.max_workers_per_shard,
            share=(lambda n: fair_share(n, roster.count())) if roster is not None else None,
            slots=self.slots,
        )
        metrics = shards.MergedMetrics(
            lambda: [s.daemon.metrics.registry for s in sharded.shards.values()]
        )
        wiring = Wiring(
            stack, self.settings, sharded, metrics, self.file, kube, self.channels, self.lease_kube
        )
        wiring.state_dir = self.state_root
        wiring.parts.append((lambda: self._start(roster), lambda: self._stop(roster)))
        self.cluster.watch(wiring)
        # An edit wakes the shards it changed, a new namespace the assignment (it has none).
        self.fanout.subscribe(sharded.wakeup, lambda: ())
        watch = FleetFileWatch(self.path, self.fanout, read=self.fleet)
        wiring.parts.append((watch.start, watch.stop))
        wiring.wake = self.fanout.set
        return wiring

    def _start(self, roster: Any) -> None:
        """Start the shared watches, and count the replicas before any shard's Lease."""
        self.cluster.queues.start(self.fanout)
        self.cluster.native.start(self.fanout)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and (
            self.cluster.queues.snapshot() is None or self.cluster.native.snapshot() is None
        ):
            time.sleep(0.05)
        if roster is not None:
            try:
                roster.round()
            except Exception as exc:  # noqa: BLE001 - the roster's thread retries; start counting 1
                logger.warning("[%s] member lease: %s", self.options.stack, exc)
            roster.start()

    def _stop(self, roster: Any) -> None:
        if roster is not None:
            roster.stop()
        self.cluster.queues.stop()
        self.cluster.native.stop()


def _serve(wiring: Wiring, settings: DaemonSettings) -> list[HealthServer] | None:
    """The probes, ``/metrics`` and ``/status`` (own listener); ``None`` if a port is taken."""
    runner, servers = wiring.runner, list[HealthServer]()
    listeners = [
        (settings.metrics_port, "0.0.0.0", None),  # noqa: S104 - probes and Prometheus reach it
        (settings.status_port, settings.status_host, runner.status),
    ]
    live, ready = runner.live, runner.ready
    for port, host, status in listeners:
        try:
            server = HealthServer(
                wiring.metrics, port=port, host=host, live=live, ready=ready, status=status
            )
        except OSError as exc:
            print(f"twc run: cannot serve on {host}:{port}: {exc}", file=sys.stderr)
            for started in servers:
                started.stop()
            return None
        servers.append(server.start())
    return servers


def freeze_survivors(clock: Callable[[], float] = time.monotonic) -> Callable[[str, Any], None]:
    """A ``gc.callbacks`` entry freezing what survives each full collection (later ones skip it);
    the first full one :data:`THAW_EVERY` s after the last thaw scans it too, freeing its cycles.
    After each full collection glibc hands its free pages back to the system."""
    thawed = [clock()]

    def callback(phase: str, info: Any) -> None:
        if info["generation"] == 2 and phase == "start" and clock() - thawed[0] >= THAW_EVERY:
            gc.unfreeze()
            thawed[0] = clock()
        elif info["generation"] == 2 and phase == "stop":
            gc.freeze()
            with contextlib.suppress(AttributeError):  # glibc: hand free pages back
                LIBC.malloc_trim(0)

    return callback


def cap_arenas() -> None:
    """Let glibc's ``malloc`` keep two arenas for all threads, unless ``MALLOC_ARENA_MAX`` says."""
    if "MALLOC_ARENA_MAX" not in os.environ:
        with contextlib.suppress(AttributeError):
            LIBC.mallopt(-8, 2)  # M_ARENA_MAX


def run_daemon(options: RunOptions) -> int:
    """Run the daemon until SIGTERM (or ``--once``): 0 then; 1 after losing the Lease
    (unsharded), a failed ``--once``, invalid settings, or a root thread that ended."""
    cap_arenas()  # before any thread makes an arena of its own
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=os.environ.get("TWC_LOG_LEVEL", "INFO").upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
    # The client's pool logs every retry; an unreachable API server is one fault instead.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
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

    def on_signal(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        logger.info("[%s] %s: finishing the current step, then exiting", options.stack, name)
        runner.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if (wake := wiring.wake) is not None:  # SIGHUP: every loop reconciles now
        signal.signal(signal.SIGHUP, lambda _signum, _frame: wake())
    logger.info(
        "[%s] twc daemon%s: fleet %s, /healthz /readyz /metrics on port %d, /status on %s:%d, "
        "settings %s",
        options.stack,
        " (sharded)" if isinstance(runner, shards.ShardedDaemon) else "",
        wiring.file,
        servers[0].port,
        settings.status_host,
        servers[1].port,
        json.dumps(settings.model_dump(mode="json"), sort_keys=True),
    )

    def fatal(reason: str) -> None:
        runner.request_stop(exit_code=1)
        for channel in wiring.channels:  # every engine run in progress
            channel.interrupt(reason)

    grace = wiring.settle() + 30
    supervisor = Supervisor(
        stack=options.stack, stopping=lambda: runner.stopping, on_fatal=fatal, grace=grace
    )
    gc.callbacks.append(freeze := freeze_survivors())  # the caches' and fleet's objects stay
    try:
        for start, _ in wiring.parts:  # the watch caches and the elections
            start()
        return supervisor.run(lambda: runner.run(once=options.once))
    finally:
        gc.callbacks.remove(freeze)
        wiring.close()
        for server in servers:
            server.stop()
