"""The Pulumi program: fleet file (+ the daemon's overlay) → components → stack outputs.

``main()`` is what ``__main__.py`` runs under ``pulumi up`` and the Automation API alike.
``build()`` does the work from already-loaded inputs, so unit tests drive it under
Pulumi mocks with an injected secret reader.

Inputs besides the fleet file:

* Pulumi config ``twc:fleetFile`` (default ``stacks/<stack>.yaml``),
  ``twc:temporalAddress`` (replaces every connection's hostPort; the embedded local
  environment), ``twc:waitForPollersSeconds``.
* ``TWC_OVERLAY_FILE``: a JSON file the daemon writes before each ``up``, with the
  Queue objects found in the cluster and the replicas the autoscaler chose:
  ``{"queues": [<kmsvc Queue objects>], "replicas": {"<ns>/<worker>": n}}``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from twc import builders
from twc.components.connection import (
    ConnectionArgs,
    ConnectionComponent,
    SecretReader,
)
from twc.components.queue import QueueComponent
from twc.components.worker import TemporalWorkerComponent, WorkerArgs
from twc.connections import ResolvedConnection, default_registry
from twc.errors import SpecError, TwcConnectionError
from twc.spec import Fleet, ResolvedWorker, load_fleet_file

log = logging.getLogger(__name__)

OVERLAY_ENV = "TWC_OVERLAY_FILE"


@dataclass(frozen=True)
class Overlay:
    """What the daemon adds to the fleet file for one run."""

    queues: tuple[Mapping[str, Any], ...] = ()
    """kmsvc Queue objects from the cluster (labelled worker-enabled)."""
    replicas: Mapping[str, int] = field(default_factory=dict)
    """Autoscaler decisions, keyed ``<namespace>/<worker>``."""
    objects: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    """TemporalWorker and connection objects from the cluster, already validated by the
    daemon, as fleet-file entries per section (``clusterConnections``, ``connections``,
    ``customConnections``, ``workers``)."""

    @classmethod
    def from_env(cls) -> Overlay:
        path = os.environ.get(OVERLAY_ENV)
        if not path:
            return cls()
        data = json.loads(Path(path).read_text())
        return cls(
            queues=tuple(data.get("queues") or ()),
            replicas=dict(data.get("replicas") or {}),
            objects={k: tuple(v or ()) for k, v in (data.get("objects") or {}).items()},
        )


@dataclass(frozen=True)
class ProgramOptions:
    """Knobs from Pulumi config."""

    temporal_address: str | None = None
    """Replace every connection's hostPort (local environment)."""
    wait_for_pollers_seconds: float = 0
    """How long each TaskQueueCheck waits for a poller."""


def default_secret_reader(namespace: str, name: str) -> Mapping[str, bytes] | None:
    """Read a Secret's data from the cluster the kubernetes provider targets."""
    from providers._kube import read_secret_data

    try:
        return read_secret_data(namespace, name)
    except LookupError:
        return None


def worker_key(worker: ResolvedWorker) -> str:
    """The stable name of a worker in the stack: ``<namespace>/<name>``."""
    return f"{worker.namespace}/{worker.name}"


def build(
    fleet: Fleet,
    *,
    file: str,
    options: ProgramOptions,
    overlay: Overlay,
    read_secret: SecretReader,
) -> dict[str, pulumi.Output[Any]]:
    """Build every component of the fleet; returns the per-worker status outputs.

    Raises:
        SpecError: the fleet (with the overlay's queues) is invalid.
        TwcConnectionError: a connection cannot be resolved or its secret is unusable.
    """
    # The daemon's merge order: connection objects, Queue objects, TemporalWorker objects.
    connections = {k: v for k, v in overlay.objects.items() if k != "workers"}
    if any(connections.values()):
        fleet = _with_entries(fleet, connections, file)
    if overlay.queues:
        fleet = _with_cluster_queues(fleet, overlay.queues, file)
    if overlay.objects.get("workers"):
        fleet = _with_entries(fleet, {"workers": overlay.objects["workers"]}, file)
    workers = fleet.resolved_workers()
    registry = default_registry()

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
        key = _connection_key(conn)
        resolved.setdefault(key, conn)
        ns_list = namespaces.setdefault(key, [])
        if worker.namespace not in ns_list:
            ns_list.append(worker.namespace)
        sources.setdefault(key, worker.connection_source)
        worker_conn[worker_key(worker)] = key

    # One explicit provider for the fleet: Secrets are updated in place (not deleted and
    # re-created) when a credential rotates, so pods never see the copy missing.
    provider = k8s.Provider("kubernetes", enable_secret_mutable=True)
    top = pulumi.ResourceOptions(providers=[provider])

    components: dict[str, ConnectionComponent] = {}
    for key, conn in sorted(resolved.items()):
        source_ns = _secret_source_namespace(fleet, conn)
        components[key] = ConnectionComponent(
            key,
            ConnectionArgs(
                resolved=conn,
                namespaces=tuple(namespaces[key]),
                source=f"{file}: {sources[key]}",
                secret_source_namespace=source_ns,
            ),
            read_secret,
            opts=top,
        )

    queues = {
        f"{q.namespace}/{q.name}": QueueComponent(f"{q.namespace}/{q.name}", q)
        for q in fleet.queues
    }

    statuses: dict[str, pulumi.Output[Any]] = {}
    for worker in workers:
        wkey = worker_key(worker)
        conn_component = components[worker_conn[wkey]]
        parent = None
        if worker.derived and worker.queue is not None:
            parent = queues.get(f"{worker.queue.namespace}/{worker.queue.name}")
        component = TemporalWorkerComponent(
            wkey,
            WorkerArgs(
                worker=worker,
                connection=conn_component.for_namespace(worker.namespace),
                connection_name=worker_conn[wkey],
                replicas=overlay.replicas.get(wkey) if worker.autoscaling else None,
                wait_for_pollers_seconds=options.wait_for_pollers_seconds,
            ),
            opts=pulumi.ResourceOptions(parent=parent) if parent else top,
        )
        statuses[wkey] = component.status
    return statuses


def _connection_key(conn: ResolvedConnection) -> str:
    return builders.connection_name(conn)


def _secret_source_namespace(fleet: Fleet, conn: ResolvedConnection) -> str | None:
    if conn.identity.namespace:
        return None
    spec = fleet.find_cluster_connection(conn.identity.name)
    if spec is None or spec.secret_source is None:
        return None
    return spec.secret_source.namespace


def _with_entries(
    fleet: Fleet, entries: Mapping[str, tuple[Mapping[str, Any], ...]], file: str
) -> Fleet:
    """The fleet plus the daemon's validated entries (a clash fails the whole run)."""
    from twc.spec import load_fleet

    data = fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
    for section, items in entries.items():
        data[section] = [*data.get(section, []), *(dict(i) for i in items)]
    return load_fleet(data, f"{file} + cluster objects")


def _with_cluster_queues(fleet: Fleet, objects: tuple[Mapping[str, Any], ...], file: str) -> Fleet:
    """The fleet plus Queue objects from the cluster (file entries win on a clash)."""
    from twc.spec import load_fleet, load_queue_object

    declared = {(q.namespace, q.name) for q in fleet.queues}
    extra = []
    for obj in objects:
        try:
            # Not dict(obj): a non-mapping must become a SpecError, not a crash.
            queue = load_queue_object(obj)
        except SpecError as exc:
            # One bad object must not block the rest: the daemon reports and skips it.
            log.warning("skipping invalid Queue object: %s", exc)
            continue
        if (queue.namespace, queue.name) not in declared:
            extra.append(queue)
    if not extra:
        return fleet

    def merged(queues: list[Any]) -> Fleet:
        data = fleet.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["queues"] = [
            *data.get("queues", []),
            *(q.model_dump(mode="json", by_alias=True, exclude_none=True) for q in queues),
        ]
        return load_fleet(data, file)

    try:
        return merged(extra)
    except SpecError:
        pass
    # An object valid alone may not fit the fleet (a derived name too long or taken):
    # add them one at a time and skip the misfits, as the daemon does.
    accepted: list[Any] = []
    for queue in extra:
        try:
            merged([*accepted, queue])
        except SpecError as exc:
            log.warning("skipping invalid Queue object: %s", exc)
            continue
        accepted.append(queue)
    return merged(accepted)


def main() -> None:
    """Entry point of ``__main__.py``."""
    cfg = pulumi.Config("twc")
    stack = pulumi.get_stack()
    file = cfg.get("fleetFile") or f"stacks/{stack}.yaml"
    wait = cfg.get_float("waitForPollersSeconds") or 0.0
    options = ProgramOptions(
        temporal_address=cfg.get("temporalAddress"), wait_for_pollers_seconds=wait
    )
    try:
        fleet = load_fleet_file(file)
        statuses = build(
            fleet,
            file=file,
            options=options,
            overlay=Overlay.from_env(),
            read_secret=default_secret_reader,
        )
    except SpecError as exc:
        raise pulumi.RunError(f"invalid fleet; nothing was changed:\n{exc}") from None
    except TwcConnectionError as exc:
        raise pulumi.RunError(f"{exc.reason}: {exc}; nothing was changed") from None
    pulumi.export("fleetFile", file)
    # Whether this run merged the cluster's objects (the daemon's runs always do):
    # `twc up`/`preview` then merge them too, instead of deleting their workers.
    pulumi.export("clusterObjects", bool(os.environ.get(OVERLAY_ENV)))
    pulumi.export("workers", statuses)
