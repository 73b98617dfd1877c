"""What keeps a held worker in the desired state: the inputs it last came from.

The deletion guard decides *which* workers must not go yet; this finds, in the previous
desired state, the inputs each of them came from, so :func:`twc.desired.desired_fleet`
can put exactly those back:

* a TemporalWorker object's worker: that object as last accepted;
* a Queue object's derived worker: that Queue object;
* a fleet-file worker: its entry in the fleet document, or its queue's entry when it
  was derived from a queue of the file;
* and, when the worker's connection went too (a connection object deleted, a CRD
  removed, an entry dropped from the file), that connection's object or entry.

Pure: two desired states in, a :class:`~twc.desired.HeldObjects` out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from twc.desired._inputs import QUEUE_KIND_KEY, WORKER_KIND_KEY, HeldObjects
from twc.desired._state import DesiredFleet
from twc.native.objects import IdentityKey
from twc.spec import API_GROUP, CLUSTER_CONNECTION_KIND, CONNECTION_KIND

__all__ = ["held_objects"]


def _find(entries: Iterable[Mapping[str, Any]], **match: Any) -> Mapping[str, Any] | None:
    for entry in entries:
        if all(
            entry.get(k, "default" if k == "namespace" else None) == v for k, v in match.items()
        ):
            return entry
    return None


def _connection_entry(
    document: Mapping[str, Any], ident: IdentityKey
) -> tuple[str, Mapping[str, Any]] | None:
    group, kind, name, namespace = ident
    if group == API_GROUP and kind == CLUSTER_CONNECTION_KIND:
        found = _find(document.get("clusterConnections") or [], name=name)
        return ("clusterConnections", found) if found is not None else None
    if group == API_GROUP and kind == CONNECTION_KIND:
        found = _find(document.get("connections") or [], name=name, namespace=namespace)
        return ("connections", found) if found is not None else None
    for entry in document.get("customConnections") or []:
        if (entry.get("kind"), entry.get("name"), entry.get("namespace")) == (
            kind,
            name,
            namespace,
        ):
            return ("customConnections", entry)
    return None


def held_objects(
    previous: DesiredFleet, workers: Iterable[str], current: DesiredFleet
) -> tuple[HeldObjects, frozenset[str]]:
    """The inputs that keep ``workers`` (all in ``previous``) in the desired state.

    Args:
        previous: The desired state the workers were last part of.
        workers: The workers to hold.
        current: The desired state without them (what is still there needs no help).

    Returns:
        The held objects and entries, and the workers whose inputs were not found
        (nothing in ``previous`` says where they came from).
    """
    cluster: dict[str, dict[str, dict[str, Any]]] = {}
    file: dict[str, list[dict[str, Any]]] = {}
    document: Mapping[str, Any] = previous.inputs.fleet or {}
    present = set(current.references.values())
    for merge in current.kinds.values():
        present.update(merge.identities.values())
    missing: set[str] = set()

    def hold_object(kind: str, key: str) -> bool:
        merge = previous.kinds.get(kind)
        obj = merge.store.get(key) if merge is not None else None
        if obj is None:
            return False
        cluster.setdefault(kind, {})[key] = dict(obj)
        return True

    def hold_entry(section: str, entry: Mapping[str, Any]) -> None:
        entries = file.setdefault(section, [])
        if dict(entry) not in entries:
            entries.append(dict(entry))

    wanted = sorted(set(workers))
    for key in wanted:
        worker = previous.workers.get(key)
        origin = previous.origins.get(key, "")
        if worker is None:
            missing.add(key)
            continue
        kind, _, object_key = origin.partition(" ")
        if kind == "TemporalWorker":
            found = hold_object(WORKER_KIND_KEY, object_key)
        elif kind == "Queue":
            found = hold_object(QUEUE_KIND_KEY, object_key)
        elif worker.derived and worker.queue is not None:
            entry = _find(
                document.get("queues") or [],
                name=worker.queue.name,
                namespace=worker.queue.namespace,
            )
            found = entry is not None
            if entry is not None:
                hold_entry("queues", entry)
        else:
            entry = _find(
                document.get("workers") or [], name=worker.name, namespace=worker.namespace
            )
            found = entry is not None
            if entry is not None:
                hold_entry("workers", entry)
                queue = worker.queue
                if (
                    queue is not None
                    and current.fleet.find_queue(queue.namespace, queue.name) is None
                ):
                    queue_entry = _find(
                        document.get("queues") or [], name=queue.name, namespace=queue.namespace
                    )
                    if queue_entry is not None:
                        hold_entry("queues", queue_entry)
                    elif not hold_object(QUEUE_KIND_KEY, f"{queue.namespace}/{queue.name}"):
                        found = False
        if not found:
            missing.add(key)
            continue
        ident = previous.references.get(key)
        if ident is None or ident in present:
            continue
        # The worker's connection went too: hold it from where it came.
        held_connection = False
        for kind_key, merge in previous.kinds.items():
            for obj_key, provided in merge.identities.items():
                if provided == ident and hold_object(kind_key, obj_key):
                    held_connection = True
        if not held_connection:
            entry_found = _connection_entry(document, ident)
            if entry_found is not None:
                hold_entry(*entry_found)
                held_connection = True
        if held_connection:
            present.add(ident)
        else:
            missing.add(key)
    kept = tuple(k for k in wanted if k not in missing)
    held = HeldObjects(
        workers=kept,
        cluster=cluster,
        file={section: tuple(entries) for section, entries in file.items()},
    )
    return held, frozenset(missing)
