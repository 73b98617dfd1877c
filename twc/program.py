"""The Pulumi program: the desired state → components → stack outputs.

``main()`` is what ``__main__.py`` runs, under plain ``pulumi up`` and under the
Automation API (the daemon, ``twc up``, ``twc preview``) alike. Either way the program
computes what should run with the one desired-state function,
:func:`twc.desired.desired_fleet`, from one kind of input:

* the daemon and ``twc up``/``preview`` hand it the inputs they observed (and hashed)
  in a :class:`~twc.desired.DesiredInputs` file named by ``TWC_DESIRED_INPUTS``;
* under plain ``pulumi up`` nobody does, so the program reads the fleet file and, when
  the fleet includes the cluster's objects (``clusterObjects``, the default), reads them
  itself through :func:`twc.kube.observe.observe_inputs`, as ``twc up`` would.

So a stack the daemon manages keeps its Queue- and TemporalWorker-derived workers
whichever way it is applied. Deletions are judged alike too: the daemon and ``twc up``
judge before they hand the inputs over; under plain ``pulumi up`` the program judges
(:func:`guard_deletions`) and fails, registering nothing, when the plan would delete more
than the fleet's ``deletionGuard`` allows without an approval, or when what runs or the
stack's record cannot be read. ``build()`` does the Pulumi part from a computed desired
state, so unit tests drive it under Pulumi mocks with an injected secret reader.

Pulumi config: ``twc:fleetFile`` (default ``stacks/<stack>.yaml``),
``twc:temporalAddress`` (replaces every connection's hostPort; the embedded local
environment), ``twc:waitForPollersSeconds``, ``twc:controlNamespace`` (where the stack's
record lives, see :mod:`twc.kube.record`), and on a shard stack of a sharded fleet
``twc:shardNamespaces`` (a JSON list: the namespaces this shard builds, see
:mod:`twc.shards`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from providers.ownership import ObjectOwnership
from twc import builders
from twc.components.connection import ConnectionArgs, ConnectionComponent, SecretReader
from twc.components.queue import QUEUE_TYPE, QueueComponent
from twc.components.worker import TEMPORAL_WORKER_TYPE, TemporalWorkerComponent, WorkerArgs
from twc.connections import ResolvedConnection, default_registry
from twc.desired import (
    INPUTS_ENV,
    BuildScope,
    DesiredFleet,
    DesiredInputs,
    ObjectsUnknown,
    deletion_verdict,
    desired_fleet,
    refusal,
)
from twc.errors import SpecError, TwcConnectionError
from twc.kube.lease import DAEMON_LEASE_ENV, DAEMON_LEASE_OUTPUT
from twc.spec import Fleet, load_fleet, load_fleet_file

log = logging.getLogger(__name__)

__all__ = [
    "ProgramOptions",
    "build",
    "default_secret_reader",
    "guard_deletions",
    "main",
    "program_inputs",
]


@dataclass(frozen=True)
class ProgramOptions:
    """Knobs from Pulumi config."""

    temporal_address: str | None = None
    """Replace every connection's hostPort (local environment)."""
    wait_for_pollers_seconds: float = 0
    """How long each TaskQueueCheck waits for a poller."""
    shard_namespaces: tuple[str, ...] | None = None
    """On a shard stack: the namespaces it builds (``None``: an unsharded stack)."""


def default_secret_reader(namespace: str, name: str) -> Mapping[str, bytes] | None:
    """Read a Secret's data from the cluster the kubernetes provider targets."""
    from providers._kube import read_secret_data

    try:
        return read_secret_data(namespace, name)
    except LookupError:
        return None


def build(
    desired: DesiredFleet,
    *,
    file: str,
    options: ProgramOptions,
    read_secret: SecretReader,
) -> dict[str, pulumi.Output[Any]]:
    """Build every component of the desired fleet; returns the per-worker status outputs.

    Raises:
        TwcConnectionError: A connection cannot be resolved or its secret is unusable.
    """
    fleet = desired.fleet
    workers = list(desired.workers.values())
    registry = default_registry()
    stack = pulumi.get_stack()

    # Resolve each worker's connection; group by connection identity.
    resolved: dict[str, ResolvedConnection] = {}
    namespaces: dict[str, list[str]] = {}
    sources: dict[str, str] = {}
    worker_conn: dict[str, str] = {}
    for worker in workers:
        try:
            conn = registry.resolve_worker(worker, fleet)
        except TwcConnectionError as exc:
            raise TwcConnectionError(
                exc.reason, f"{file}: {worker.connection_source}: {exc}"
            ) from exc
        if options.temporal_address:
            conn = dataclasses.replace(conn, host_port=options.temporal_address)
        key = builders.connection_name(conn)
        resolved.setdefault(key, conn)
        ns_list = namespaces.setdefault(key, [])
        if worker.namespace not in ns_list:
            ns_list.append(worker.namespace)
        sources.setdefault(key, worker.connection_source)
        worker_conn[worker.stack_key] = key

    # One explicit provider for the fleet: Secrets are updated in place (not deleted and
    # re-created) when a credential rotates, so pods never see the copy missing. Creates
    # are server-side applies, which adopt an object that exists already (an upsert): the
    # daemon relies on it for the objects it applies ahead of the engine and for those a
    # killed run created but never recorded, so it is set here rather than left to the
    # provider's default (ObjectOwnership keeps it from adopting anyone else's object).
    provider = k8s.Provider("kubernetes", enable_secret_mutable=True, enable_server_side_apply=True)
    top = pulumi.ResourceOptions(providers=[provider])

    components: dict[str, ConnectionComponent] = {}
    for key, conn in sorted(resolved.items()):
        components[key] = ConnectionComponent(
            key,
            ConnectionArgs(
                resolved=conn,
                namespaces=tuple(namespaces[key]),
                source=f"{file}: {sources[key]}",
                secret_source_namespace=_secret_source_namespace(fleet, conn),
                stack=stack,
            ),
            read_secret,
            opts=top,
        )

    queues = {
        f"{q.namespace}/{q.name}": QueueComponent(f"{q.namespace}/{q.name}", q, stack=stack)
        for q in fleet.queues
    }
    # A new worker's objects are created only if nobody else made objects of its name.
    ownership = ObjectOwnership("ownership", stack=stack, workers=sorted(desired.workers))

    statuses: dict[str, pulumi.Output[Any]] = {}
    for worker in workers:
        wkey = worker.stack_key
        conn_component = components[worker_conn[wkey]]
        parent = None
        if worker.derived and worker.queue is not None:
            parent = queues.get(f"{worker.queue.namespace}/{worker.queue.name}")
        # A worker moving between the fleet file, a Queue object and a TemporalWorker
        # object moves in or out from under its queue's component: the alias names its
        # other place, so the engine moves its resources instead of creating new ones
        # and deleting the running ones.
        aliases = [_worker_urn(wkey, under_queue=parent is None)]
        component = TemporalWorkerComponent(
            wkey,
            WorkerArgs(
                worker=worker,
                connection=conn_component.for_namespace(worker.namespace),
                connection_name=worker_conn[wkey],
                # Only a versioned worker's (its target version's): an unversioned
                # autoscaled worker is scaled by the daemon, never by the program.
                replicas=desired.replicas.get(wkey)
                if worker.autoscaling and worker.rollout is not None
                else None,
                wait_for_pollers_seconds=options.wait_for_pollers_seconds,
                versions=desired.inputs.versions.get(wkey),
                stack=stack,
                depends_on=(ownership,),
            ),
            opts=pulumi.ResourceOptions(parent=parent, aliases=aliases)
            if parent
            else pulumi.ResourceOptions.merge(top, pulumi.ResourceOptions(aliases=aliases)),
        )
        statuses[wkey] = component.status
    return statuses


def _every_status(
    built: Mapping[str, pulumi.Output[Any]], desired: DesiredFleet, scope: BuildScope | None
) -> dict[str, Any]:
    """The ``workers`` stack output: the statuses of the workers built, and (a targeted
    ``up`` builds only some) the others' as the stack last recorded them, so the
    output stays whole."""
    if scope is None:
        return dict(built)
    kept = {k: v for k, v in scope.statuses.items() if k in desired.workers and k not in built}
    return {**kept, **built}


def _worker_urn(key: str, *, under_queue: bool) -> str:
    """The URN a worker component has at the stack's root or under a queue's component
    (a child's URN carries its parents' types, not their names)."""
    chain = f"{QUEUE_TYPE}${TEMPORAL_WORKER_TYPE}" if under_queue else TEMPORAL_WORKER_TYPE
    return f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{chain}::{key}"


def _secret_source_namespace(fleet: Fleet, conn: ResolvedConnection) -> str | None:
    if conn.identity.namespace:
        return None
    spec = fleet.find_cluster_connection(conn.identity.name)
    if spec is None or spec.secret_source is None:
        return None
    return spec.secret_source.namespace


def _shard_namespaces(raw: str | None) -> tuple[str, ...] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise pulumi.RunError(f"twc:shardNamespaces must be a JSON list of names, got {raw!r}")
    return tuple(sorted(value))


def program_inputs(
    file: str, *, stack: str = "", config: Mapping[str, str] | None = None
) -> tuple[Fleet, DesiredInputs]:
    """The fleet and the desired state's inputs of this run.

    Handed over by the caller (the daemon, ``twc up``) when it set ``TWC_DESIRED_INPUTS``;
    otherwise (plain ``pulumi up``) the fleet file, and the cluster's objects read now
    when the fleet includes them, with the last accepted specs from the stack's record.

    Raises:
        SpecError: The fleet file is invalid.
        LookupError: The cluster's objects are wanted but no cluster is configured.
        Exception: The cluster could not be read.
    """
    given = DesiredInputs.from_env()
    if given is not None:
        fleet = load_fleet(given.fleet, file) if given.fleet is not None else load_fleet_file(file)
        return fleet, given
    fleet = load_fleet_file(file)
    from twc.kube.client import kube_client
    from twc.kube.observe import observe_inputs, running_versions
    from twc.kube.record import record_for_stack

    if not fleet.cluster_objects:
        if not any(w.rollout is not None for w in fleet.resolved_workers()):
            return fleet, DesiredInputs()
        # The file alone, but a versioned worker's older versions are in the cluster
        # only: without them they would be deleted while workflows are pinned to them.
        with kube_client() as kube:
            return fleet, DesiredInputs(versions=running_versions(kube))
    with kube_client() as kube:
        record = record_for_stack(kube.core, stack, config or {})
        select = fleet.select.model_dump(exclude_none=True) if fleet.select else None
        kinds = default_registry().watched_kinds()
        return fleet, observe_inputs(kube, kinds, record=record, select=select)


def guard_deletions(
    desired: DesiredFleet, fleet: Fleet, *, stack: str, config: Mapping[str, str] | None
) -> None:
    """Under plain ``pulumi up``: the deletion verdict every entry point gives, with
    nobody to ask. Deletions beyond the share go only with an approval on the stack's
    record (``twc approve``), which this run spends; otherwise the held set is put on the
    record for ``twc approve`` (a preview writes nothing).

    Raises:
        pulumi.RunError: The deletions are held, or what runs or the record cannot be
            read; raised before any resource is registered, so nothing is applied.
    """
    from twc.kube.client import kube_client
    from twc.kube.record import HeldRecord, record_for_stack
    from twc.kube.workloads import Workloads

    try:
        with kube_client() as kube:
            record = record_for_stack(kube.core, stack, config or {})
            approved = record.approved()
            running = Workloads(kube, stack=stack).worker_replicas()
            verdict = deletion_verdict(
                running, desired.workers, fleet.deletion_guard, lambda: approved
            )
            hold = verdict.hold
            if (verdict.released or hold) and not pulumi.runtime.is_dry_run():
                record.publish_held(
                    HeldRecord(hold.digest, tuple(sorted(hold.workers)), hold.reason)
                    if hold
                    else None
                )
    except Exception as exc:  # noqa: BLE001 - a guard that cannot judge holds
        raise pulumi.RunError(
            f"cannot tell what this up would delete ({exc}); nothing was changed"
        ) from None
    if hold is not None:
        raise pulumi.RunError(refusal(hold, stack))


def main() -> None:
    """Entry point of ``__main__.py``."""
    cfg = pulumi.Config("twc")
    stack = pulumi.get_stack()
    file = cfg.get("fleetFile") or f"stacks/{stack}.yaml"
    wait = cfg.get_float("waitForPollersSeconds") or 0.0
    options = ProgramOptions(
        temporal_address=cfg.get("temporalAddress"),
        wait_for_pollers_seconds=wait,
        shard_namespaces=_shard_namespaces(cfg.get("shardNamespaces")),
    )
    try:
        control = cfg.get("controlNamespace")
        config = {"controlNamespace": control} if control else None
        fleet, inputs = program_inputs(file, stack=stack, config=config)
        desired = desired_fleet(fleet, inputs, registry=default_registry(), file=file)
        if options.shard_namespaces is not None:
            from twc.shards import restrict

            # A shard builds its own namespaces only; the rest belongs to other shards.
            desired = restrict(desired, options.shard_namespaces)
        if not os.environ.get(INPUTS_ENV):
            # Nobody judged these deletions before handing the inputs over.
            guard_deletions(desired, fleet, stack=stack, config=config)
        for rejected in desired.rejected:
            what = (
                f"{rejected.obj.kind} object {rejected.key}: {rejected.reason}: {rejected.message}"
            )
            if rejected.kept:
                pulumi.log.warn(f"keeping the last accepted spec of invalid {what}")
            else:
                pulumi.log.warn(f"skipping invalid {what}")
        scope = inputs.scope
        # A targeted up builds its workers alone; the engine keeps the rest as it is.
        built = desired.only(scope.workers) if scope is not None else desired
        statuses = build(built, file=file, options=options, read_secret=default_secret_reader)
    except SpecError as exc:
        raise pulumi.RunError(f"invalid fleet; nothing was changed:\n{exc}") from None
    except TwcConnectionError as exc:
        raise pulumi.RunError(f"{exc.reason}: {exc}; nothing was changed") from None
    except ObjectsUnknown as exc:
        raise pulumi.RunError(f"{exc}; nothing was changed") from None
    except LookupError as exc:
        raise pulumi.RunError(
            f"cannot read the cluster's objects ({exc}); nothing was changed "
            "(set clusterObjects: false in the fleet file for the file alone)"
        ) from None
    pulumi.export("fleetFile", file)
    if options.shard_namespaces is not None:
        pulumi.export("shardNamespaces", list(options.shard_namespaces))
    # Whether this run's desired state included the cluster's objects.
    pulumi.export("clusterObjects", desired.cluster_managed)
    pulumi.export("workers", _every_status(statuses, desired, inputs.scope))
    # Run under a daemon's Lease (or a manual run taking part in it): say which, so a
    # later `twc up` on this stack takes part too.
    lease = os.environ.get(DAEMON_LEASE_ENV)
    if lease:
        pulumi.export(DAEMON_LEASE_OUTPUT, lease)
