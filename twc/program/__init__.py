"""The Pulumi program: the desired state → components → stack outputs.

The daemon and ``twc up``/``preview`` hand it observed, judged inputs
(``TWC_DESIRED_INPUTS``); under plain ``pulumi up`` it observes and judges the deletions
itself. Config: ``twc:fleetFile``, ``twc:temporalAddress``, ``twc:waitForPollersSeconds``,
``twc:controlNamespace`` (the record's) and ``twc:shardNamespaces`` (a shard's, JSON list).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pydantic import TypeAdapter, ValidationError

from providers.ownership import ObjectOwnership
from twc import builders
from twc.connections import ResolvedConnection, default_registry
from twc.desired import (
    INPUTS_ENV,
    DesiredFleet,
    DesiredInputs,
    Hold,
    ObjectsUnknown,
    deletion_verdict,
    desired_fleet,
    refusal,
)
from twc.errors import SpecError, TwcConnectionError
from twc.kube.client import KubeClient, kube_client
from twc.kube.lease import DAEMON_LEASE_ENV, DAEMON_LEASE_OUTPUT
from twc.kube.observe import observe_inputs, running_versions
from twc.kube.record import HeldRecord, RecordStore, record_for_stack
from twc.kube.workloads import Workloads, read_secret_data
from twc.program.components import (
    QUEUE_TYPE,
    TEMPORAL_WORKER_TYPE,
    ConnectionArgs,
    ConnectionComponent,
    QueueComponent,
    SecretReader,
    TemporalWorkerComponent,
    WorkerArgs,
)
from twc.shards import restrict
from twc.spec import QUEUE_KIND, Fleet, ResolvedWorker, load_fleet, load_fleet_file


@dataclass(frozen=True)
class ProgramOptions:
    """Knobs from Pulumi config."""

    temporal_address: str | None = None  # replaces every connection's hostPort
    wait_for_pollers_seconds: float = 0  # how long each TaskQueueCheck waits
    control_namespace: str | None = None  # where the stack's record is (else looked for)


def default_secret_reader(namespace: str, name: str) -> Mapping[str, bytes] | None:
    """Read a Secret's data from the cluster the kubernetes provider targets."""
    try:
        with kube_client() as kube:
            return read_secret_data(kube, namespace, name)
    except LookupError:
        return None


def shard_namespaces(config: Mapping[str, str] | None) -> tuple[str, ...] | None:
    """A shard stack's namespaces, ``None`` for no shard; ``ValueError`` if malformed."""
    raw = (config or {}).get("shardNamespaces")
    if raw is None:
        return None
    try:
        return tuple(sorted(TypeAdapter(list[str]).validate_json(raw, strict=True)))
    except ValidationError:
        raise ValueError(f"twc:shardNamespaces must be a JSON list of names, got {raw!r}") from None


def observe(
    kube: KubeClient,
    fleet: Fleet,
    *,
    stack: str,
    config: Mapping[str, str],
    document: Mapping[str, Any] | None = None,
) -> DesiredInputs:
    """The cluster's objects the fleet selects, with the stack's record; raises if unreadable."""
    record = record_for_stack(kube.core, stack, config)
    select = fleet.select.model_dump(exclude_none=True) if fleet.select else None
    kinds = default_registry().watched_kinds()
    return observe_inputs(kube, kinds, fleet=document, record=record, select=select)


def running_workers(kube: KubeClient, stack: str, config: Mapping[str, str]) -> set[str]:
    """The workers the stack (a shard: in its namespaces) runs; raises if unlistable."""
    namespaces = shard_namespaces(config)
    listed = (lambda: list(namespaces)) if namespaces is not None else None
    return set(Workloads(kube, stack=stack, namespaces=listed).worker_replicas())


def settle_hold(record: RecordStore, hold: Hold | None) -> None:
    """Put the held deletions on the record for ``twc approve``, or (``None``) clear them."""
    if hold is None and record.load() is None:
        return
    held = HeldRecord(hold.digest, tuple(sorted(hold.workers)), hold.reason) if hold else None
    record.publish_held(held)


def _connections(
    desired: DesiredFleet, file: str, options: ProgramOptions
) -> tuple[dict[str, ResolvedConnection], dict[str, list[ResolvedWorker]]]:
    """Each worker's connection, by name, and the workers of each connection."""
    resolved: dict[str, ResolvedConnection] = {}
    users: dict[str, list[ResolvedWorker]] = {}
    for worker in desired.workers.values():
        try:
            conn = default_registry().resolve_worker(worker, desired.fleet)
        except TwcConnectionError as exc:
            raise TwcConnectionError(
                exc.reason, f"{file}: {worker.connection_source}: {exc}"
            ) from exc
        if options.temporal_address:
            conn = dataclasses.replace(conn, host_port=options.temporal_address)
        key = builders.connection_name(conn)
        resolved.setdefault(key, conn)
        users.setdefault(key, []).append(worker)
    return resolved, users


def build(
    desired: DesiredFleet, *, file: str, options: ProgramOptions, read_secret: SecretReader
) -> dict[str, pulumi.Output[Any]]:
    """Build every component of the desired fleet: the per-worker status outputs."""
    fleet, stack = desired.fleet, pulumi.get_stack()
    resolved, users = _connections(desired, file, options)
    conn_of = {w.stack_key: key for key, ws in users.items() for w in ws}
    # Secrets update in place when a credential rotates; creates are server-side applies,
    # which adopt what early apply or a killed run made (ObjectOwnership keeps them from
    # adopting anyone else's object).
    provider = k8s.Provider("kubernetes", enable_secret_mutable=True, enable_server_side_apply=True)
    objects, retiring = owned_objects(desired, resolved, users)
    ownership = ObjectOwnership(
        "ownership",
        stack=stack,
        objects=objects,
        retiring=retiring,
        max_share=fleet.deletion_guard.max_share,
        control_namespace=options.control_namespace,
    )
    components = {
        key: ConnectionComponent(
            key,
            ConnectionArgs(
                resolved=conn,
                namespaces=tuple(dict.fromkeys(w.namespace for w in users[key])),
                source=f"{file}: {users[key][0].connection_source}",
                stack=stack,
                depends_on=(ownership,),
            ),
            read_secret,
            opts=pulumi.ResourceOptions(providers=[provider]),
        )
        for key, conn in sorted(resolved.items())
    }
    queues = {
        f"{q.namespace}/{q.name}": QueueComponent(
            f"{q.namespace}/{q.name}", q, stack=stack, depends_on=(ownership,)
        )
        for q in fleet.queues
    }
    statuses: dict[str, pulumi.Output[Any]] = {}
    for key, worker in desired.workers.items():
        parent = None
        if worker.derived and worker.queue is not None:
            parent = queues.get(f"{worker.queue.namespace}/{worker.queue.name}")
        # A worker moving in or out from under its queue's component is moved by alias.
        chain = TEMPORAL_WORKER_TYPE if parent else f"{QUEUE_TYPE}${TEMPORAL_WORKER_TYPE}"
        aliases = [f"urn:pulumi:{stack}::{pulumi.get_project()}::{chain}::{key}"]
        opts = pulumi.ResourceOptions(
            parent=parent, aliases=aliases, providers=None if parent else [provider]
        )
        versioned = worker.autoscaling and worker.rollout is not None
        args = WorkerArgs(
            worker=worker,
            connection=components[conn_of[key]].by_namespace[worker.namespace],
            connection_name=conn_of[key],
            # Only a versioned worker's: the daemon scales the others, never the program.
            replicas=desired.replicas.get(key) if versioned else None,
            wait_for_pollers_seconds=options.wait_for_pollers_seconds,
            versions=desired.inputs.versions.get(key),
            stack=stack,
            depends_on=(ownership,),
        )
        statuses[key] = TemporalWorkerComponent(key, args, opts=opts).status
    return statuses


def owned_objects(
    desired: DesiredFleet,
    resolved: Mapping[str, ResolvedConnection],
    users: Mapping[str, Sequence[ResolvedWorker]],
) -> tuple[dict[str, list[str]], list[str]]:
    """Every object the components create, as ``Kind namespace/name`` by owner, and the
    objects of versions retired after draining: what :class:`ObjectOwnership` refuses to
    take over when someone else made it, and counts when they go. Owners: each worker,
    ``""`` for the Queue objects, and a connection's users in one namespace
    (``<connection> <namespace>``) for its credential copy there, which goes with them."""
    found, retiring = builders.fleet_worker_objects(desired.workers, desired.inputs.versions)
    queues = [
        f"{QUEUE_KIND} {q.namespace}/{q.name}" for q in desired.fleet.queues if q.create_object
    ]
    for key, conn in resolved.items():
        source, secret = conn.secret_source_namespace, conn.secret_name
        for ns in {w.namespace for w in users[key]}:
            copied = bool(secret and source and ns != source)
            found[f"{key} {ns}"] = [f"Secret {ns}/{secret}"] if copied else []
    return {"": sorted(queues), **found}, retiring


def _inputs(file: str, stack: str, config: Mapping[str, str]) -> tuple[Fleet, DesiredInputs]:
    """The inputs handed over (``TWC_DESIRED_INPUTS``), else observed now."""
    given = DesiredInputs.from_env()
    if given is not None:
        fleet = load_fleet(given.fleet, file) if given.fleet is not None else load_fleet_file(file)
        return fleet, given
    fleet = load_fleet_file(file)
    # The file alone; a versioned worker's older versions are in the cluster only.
    if not fleet.cluster_objects and all(w.rollout is None for w in fleet.resolved_workers()):
        return fleet, DesiredInputs()
    with kube_client() as kube:
        if fleet.cluster_objects:
            return fleet, observe(kube, fleet, stack=stack, config=config)
        return fleet, DesiredInputs(versions=running_versions(kube))


def _guard(desired: DesiredFleet, fleet: Fleet, stack: str, config: Mapping[str, str]) -> None:
    """Under plain ``pulumi up``: the deletion verdict, settled on the record (not in a
    preview); ``pulumi.RunError`` when deletions are held or cannot be judged."""
    try:
        with kube_client() as kube:
            record = record_for_stack(kube.core, stack, config)
            running = running_workers(kube, stack, config)
            verdict = deletion_verdict(
                running, desired.workers, fleet.deletion_guard, record.approved
            )
            if (verdict.released or verdict.hold) and not pulumi.runtime.is_dry_run():
                settle_hold(record, verdict.hold)
    except Exception as exc:  # noqa: BLE001 - a guard that cannot judge holds
        raise pulumi.RunError(
            f"cannot tell what this up would delete ({exc}); nothing was changed"
        ) from None
    if verdict.hold is not None:
        raise pulumi.RunError(refusal(verdict.hold, stack))


def _desired(file: str, stack: str, config: Mapping[str, str]) -> tuple[DesiredFleet, DesiredFleet]:
    """Observe and plan: the whole desired fleet, and what this run builds of it."""
    fleet, inputs = _inputs(file, stack, config)
    desired = desired_fleet(fleet, inputs, registry=default_registry(), file=file)
    namespaces = shard_namespaces(config)
    if namespaces is not None:
        desired = restrict(desired, namespaces)  # the rest belongs to other shards
    if not os.environ.get(INPUTS_ENV):
        _guard(desired, fleet, stack, config)  # nobody judged before handing over
    for rejected in desired.rejected:
        what = f"{rejected.obj.kind} object {rejected.key}: {rejected.reason}: {rejected.message}"
        fate = "keeping the last accepted spec of" if rejected.kept else "skipping"
        pulumi.log.warn(f"{fate} invalid {what}")
    scope = inputs.scope
    # A targeted up builds its workers alone; the engine keeps the rest as it is.
    return desired, desired.only(scope.workers) if scope is not None else desired


def main() -> None:
    """Entry point of ``__main__.py``."""
    cfg, stack = pulumi.Config("twc"), pulumi.get_stack()
    file = cfg.get("fleetFile") or f"stacks/{stack}.yaml"
    config = {k: v for k in ("controlNamespace", "shardNamespaces") if (v := cfg.get(k))}
    try:
        namespaces = shard_namespaces(config)  # a shard stack's
        options = ProgramOptions(
            temporal_address=cfg.get("temporalAddress"),
            wait_for_pollers_seconds=cfg.get_float("waitForPollersSeconds") or 0.0,
            control_namespace=config.get("controlNamespace"),
        )
        desired, built = _desired(file, stack, config)
        statuses = build(built, file=file, options=options, read_secret=default_secret_reader)
    except SpecError as exc:
        raise pulumi.RunError(f"invalid fleet; nothing was changed:\n{exc}") from None
    except TwcConnectionError as exc:
        raise pulumi.RunError(f"{exc.reason}: {exc}; nothing was changed") from None
    except (ObjectsUnknown, ValueError) as exc:
        raise pulumi.RunError(f"{exc}; nothing was changed") from None
    except LookupError as exc:
        raise pulumi.RunError(
            f"cannot read the cluster's objects ({exc}); nothing was changed "
            "(set clusterObjects: false in the fleet file for the file alone)"
        ) from None
    pulumi.export("fleetFile", file)
    if namespaces is not None:
        pulumi.export("shardNamespaces", list(namespaces))
    pulumi.export("clusterObjects", desired.cluster_managed)
    # A targeted up builds some: the others' statuses as the stack last recorded them.
    scope = desired.inputs.scope
    kept = {k: v for k, v in (scope.statuses if scope else {}).items() if k in desired.workers}
    pulumi.export("workers", {**kept, **statuses})
    # Run under a daemon's Lease: say so, so a later `twc up` takes part in it too.
    lease = os.environ.get(DAEMON_LEASE_ENV)
    if lease:
        pulumi.export(DAEMON_LEASE_OUTPUT, lease)
