"""What every fault test checks once the fault cleared: nothing duplicated or orphaned."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

from tests.e2e.conftest import FleetStack
from tests.e2e.daemon_process import DaemonProcess
from twc.engine.supervisor import JournalEntry
from twc.local.cluster import Kube
from twc.reconcile.act import EARLY_FIELD_MANAGER

DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def fault_state(daemon: DaemonProcess, fault: str) -> dict[str, Any] | None:
    """The fault's entry in ``/status`` while it is active, else ``None``."""
    found = daemon.status().get("faults", {}).get(fault)
    return dict(found) if found is not None else None


def adopted(kube: Kube, daemon: DaemonProcess, namespace: str, name: str) -> None:
    """The engine owns the worker's Deployment: the daemon's early-apply field manager
    (objects applied ahead of the engine) let go of it, and ``/status`` lists none."""
    assert daemon.status()["earlyApplied"] == []
    deployment = kube.apps.read_namespaced_deployment(name, namespace)
    managers = {f.manager for f in deployment.metadata.managed_fields or []}
    assert EARLY_FIELD_MANAGER not in managers, managers


def assert_cluster_has_exactly(kube: Kube, namespace: str, deployments: set[str]) -> None:
    """The namespace holds exactly these Deployments, one ReplicaSet each (owned by it),
    and no StatefulSet: nothing was created twice or left behind."""
    found = {d.metadata.name for d in kube.apps.list_namespaced_deployment(namespace).items}
    assert found == deployments, f"Deployments in {namespace}: {sorted(found)}"
    owners: Counter[str] = Counter()
    for rs in kube.apps.list_namespaced_replica_set(namespace).items:
        refs = rs.metadata.owner_references or []
        assert len(refs) == 1, rs.metadata.name
        assert refs[0].kind == "Deployment", rs.metadata.name
        owners[refs[0].name] += 1
    assert dict(owners) == dict.fromkeys(deployments, 1), f"ReplicaSets by owner: {owners}"
    sets = kube.apps.list_namespaced_stateful_set(namespace).items
    assert not sets, [s.metadata.name for s in sets]


def assert_state_clean(fs: FleetStack, namespace: str, deployments: set[str]) -> None:
    """The stack's state: no pending operation, no lock left, each URN once, and exactly
    one Deployment resource per expected Deployment."""
    state = fs.stack().export_stack().deployment or {}
    assert not state.get("pending_operations"), state.get("pending_operations")
    urns = Counter(r["urn"] for r in state.get("resources", []))
    assert all(n == 1 for n in urns.values()), [u for u, n in urns.items() if n > 1]
    recorded = Counter(
        (r.get("outputs") or {}).get("metadata", {}).get("name")
        for r in state.get("resources", [])
        if r.get("type") == DEPLOYMENT
        and (r.get("outputs") or {}).get("metadata", {}).get("namespace") == namespace
    )
    assert dict(recorded) == dict.fromkeys(deployments, 1), recorded
    locks = lock_files(fs)
    assert not locks, locks


def assert_converged(
    kube: Kube,
    daemon: DaemonProcess,
    fs: FleetStack,
    namespace: str,
    deployments: set[str],
    *,
    adopted_worker: str | None = None,
) -> None:
    """After a fault cleared: the daemon lives, ``adopted_worker`` (applied early) is the
    engine's, and cluster and state hold exactly ``deployments``, once each."""
    assert daemon.alive()
    if adopted_worker is not None:
        adopted(kube, daemon, namespace, adopted_worker)
    assert_cluster_has_exactly(kube, namespace, deployments)
    assert_state_clean(fs, namespace, deployments)


LOCKING = {("up",), ("refresh",), ("cancel",), ("destroy",), ("stack", "import")}
"""Engine commands that take (or remove) the stack's lock."""


def assert_updates_never_overlap(fs: FleetStack, *daemons: DaemonProcess) -> list[Any]:
    """No two writers at once: the stack's history (``pulumi stack history``) shows
    updates one after the other, and no locking engine command of one daemon ran while
    one of another daemon did (their guards' journals: killed runs, which leave no
    history, included).

    Returns:
        The history, oldest first.
    """
    history = sorted(fs.stack().history(), key=lambda u: u.start_time)
    for before, after in itertools.pairwise(history):
        assert before.end_time is not None, vars(before)
        assert after.start_time >= before.end_time, (vars(before), vars(after))
    runs: list[tuple[JournalEntry, str]] = [
        (entry, daemon.name)
        for daemon in daemons
        for entry in daemon.journal()
        if entry.command in LOCKING
    ]
    for first, who in runs:
        for second, other in runs:
            if who != other and first.started <= second.started:
                assert second.started >= first.ended, (who, first, other, second)
    return history


def lock_files(fs: FleetStack) -> list[Path]:
    """The stack's lock files in its backend."""
    backend = Path(fs.env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    return list((backend / ".pulumi" / "locks").rglob(f"{fs.name}/*.json"))


def deployment_bytes(kube: Kube, namespace: str) -> dict[str, bytes]:
    """Each Deployment of the namespace exactly as the API server returns it: equal
    bytes mean nothing (spec, labels, annotations, status, resourceVersion) changed."""
    names = [d.metadata.name for d in kube.apps.list_namespaced_deployment(namespace).items]
    out: dict[str, bytes] = {}
    for name in sorted(names):
        try:
            response = kube.apps.read_namespaced_deployment(name, namespace, _preload_content=False)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                continue  # deleted between the list and the read
            raise
        out[name] = response.data
    return out


def assert_unchanged(before: dict[str, bytes], after: dict[str, bytes]) -> None:
    """The same Deployments, byte for byte."""
    assert sorted(after) == sorted(before), (sorted(before), sorted(after))
    changed = [name for name in before if after[name] != before[name]]
    assert not changed, f"Deployments changed: {changed}"


def events(kube: Kube, namespace: str, name: str, reason: str) -> list[str]:
    """Messages of the Events with ``reason`` about the object ``name`` in ``namespace``."""
    found = kube.core.list_namespaced_event(namespace).items
    return [
        e.message
        for e in found
        if e.reason == reason and e.involved_object is not None and e.involved_object.name == name
    ]


def metric(daemon: DaemonProcess, name: str, **labels: str) -> float:
    """One metric's value; fails when the daemon does not export it at all (a renamed
    metric must fail the test, not read as zero)."""
    samples, known = daemon.metrics()
    assert name in known, f"the daemon exports no metric {name}"
    found = samples.get(name, [])
    return sum(v for got, v in found if all(got.get(k) == x for k, x in labels.items()))
