"""The cluster side of shards. A sharded stack's assignment of namespaces to shards: ConfigMap
``twc-shards-<stack>`` in ``sharding.assignmentNamespace``. A namespace's shard never changes once
given: the map is written at the ``resourceVersion`` read (of two writers, the loser reads the
winner's) and before any shard applies a new namespace. How many daemon replicas share the stack:
each renews a member Lease of its own every ``retry_period`` and counts the others' (gone when
unchanged for ``lease_duration``); each takes at most :func:`fair_share` of the shards' Leases."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from twc.kube.client import status_of, unless_404
from twc.kube.lease import LeaseRecord, LeaseTimings
from twc.shards import ShardMap, assign
from twc.timestamps import rfc3339_micro

logger = logging.getLogger(__name__)

ASSIGNMENT_KEY = "assignment.json"
MEMBER_LABEL = "twc.temporal.io/member-of"
ATTEMPTS = 8  # writes of the shard map before extend gives up the race


def shard_map_name(stack: str) -> str:
    """The ConfigMap's name for ``stack``: a valid object name."""
    raw = f"twc-shards-{stack}".lower()
    cleaned = "".join(c if c.isalnum() or c in "-." else "-" for c in raw).strip("-.")
    return cleaned[:253]


class ShardMapStore:
    """Reads and extends one stack's assignment ConfigMap."""

    def __init__(self, core_api: Any, *, namespace: str, stack: str) -> None:
        self._api = core_api
        self.namespace = namespace
        self.name = shard_map_name(stack)

    def read(self) -> tuple[ShardMap | None, str | None]:
        """The map and its resourceVersion (``None``s when absent; ValueError: unreadable)."""
        found = unless_404(self._api.read_namespaced_config_map, self.name, self.namespace)
        if found is None:
            return None, None
        data = found.data or {}
        raw = data.get(ASSIGNMENT_KEY)
        if raw is None:
            raise ValueError(f"ConfigMap {self.namespace}/{self.name} has no {ASSIGNMENT_KEY}")
        parsed = json.loads(raw)
        if not isinstance(parsed, Mapping):
            raise ValueError(f"ConfigMap {self.namespace}/{self.name}: not a shard map")
        return ShardMap.from_json(parsed), found.metadata.resource_version

    def extend(self, load: Mapping[str, int], *, max_workers_per_shard: int) -> ShardMap:
        """Assign ``load``'s new namespaces and record them; the map as recorded (another
        writer's when it won). RuntimeError when all :data:`ATTEMPTS` lost a race."""
        for _ in range(ATTEMPTS):
            current, version = self.read()
            extended = assign(
                current or ShardMap(), load, max_workers_per_shard=max_workers_per_shard
            )
            if current is not None and extended == current:
                return current
            try:
                self._write(extended, version)
            except Exception as exc:
                if status_of(exc) in (409, 422):
                    continue  # someone else wrote first: read theirs and try again
                raise
            new = sorted(set(extended.namespaces) - set(current.namespaces if current else {}))
            logger.info(
                "shard map %s/%s: %s assigned (%d shard(s))",
                self.namespace,
                self.name,
                ", ".join(f"{ns} -> {extended.namespaces[ns]}" for ns in new) or "created",
                extended.shards,
            )
            return extended
        raise RuntimeError(f"ConfigMap {self.namespace}/{self.name}: lost {ATTEMPTS} races")

    def _write(self, shard_map: ShardMap, version: str | None) -> None:
        body: dict[str, Any] = {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "twc"},
            },
            "data": {ASSIGNMENT_KEY: json.dumps(shard_map.to_json(), sort_keys=True)},
        }
        if version is None:
            self._api.create_namespaced_config_map(self.namespace, body)
            return
        body["metadata"]["resourceVersion"] = version
        self._api.replace_namespaced_config_map(self.name, self.namespace, body)


def fair_share(shards: int, members: int) -> int:
    """The most shards one of ``members`` replicas should hold: ``ceil(shards/members)``."""
    return max(1, math.ceil(shards / max(1, members)))


def _digest(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


class MemberRoster:
    """This replica's member Lease, and the count of live members."""

    def __init__(
        self,
        coordination_api: Any,
        *,
        namespace: str,
        stack: str,
        identity: str,
        settings: LeaseTimings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = coordination_api
        self.namespace = namespace
        self.identity = identity
        self.group = _digest(stack, 16)
        self.name = f"twc-member-{self.group[:8]}-{_digest(identity, 12)}"
        self._settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[LeaseRecord, float]] = {}
        self._count = 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def count(self) -> int:
        """Live members, this one included (1 until the first round succeeded)."""
        with self._lock:
            return self._count

    def start(self) -> MemberRoster:
        """Renew and count in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="twc-members", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop, and delete this member's Lease so the others count one fewer at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._settings.retry_period + 5)
        try:
            self._api.delete_namespaced_lease(self.name, self.namespace)
        except Exception as exc:  # noqa: BLE001 - the Lease then simply expires
            if status_of(exc) != 404:
                logger.warning("could not delete member lease %s: %s", self.name, exc)

    def round(self) -> int:
        """One round: renew this member's Lease, list every member's; the live count."""
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self._settings.lease_duration)),
            "renewTime": rfc3339_micro(time.time()),
        }
        patch = self._api.patch_namespaced_lease
        if unless_404(patch, self.name, self.namespace, {"spec": spec}) is None:
            labels = {MEMBER_LABEL: self.group}
            meta = {"name": self.name, "namespace": self.namespace, "labels": labels}
            self._api.create_namespaced_lease(self.namespace, {"metadata": meta, "spec": spec})
        found = self._api.list_namespaced_lease(
            self.namespace, label_selector=f"{MEMBER_LABEL}={self.group}"
        )
        now = self._clock()
        live = 0
        seen: dict[str, tuple[LeaseRecord, float]] = {}
        for lease in found.items or ():
            data = self._api.api_client.sanitize_for_serialization(lease)
            name = str((data.get("metadata") or {}).get("name"))
            record = LeaseRecord.from_lease(data)
            before = self._seen.get(name)
            changed_at = now if before is None or before[0] != record else before[1]
            seen[name] = (record, changed_at)
            if name == self.name or now - changed_at < self._settings.lease_duration:
                live += 1
        with self._lock:
            self._seen = seen
            self._count = max(1, live)
            return self._count

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                before = self.count()
                after = self.round()
                if after != before:
                    logger.info("%d daemon replica(s) share the shards", after)
            except Exception as exc:  # noqa: BLE001 - a failed round keeps the last count; retried
                logger.warning("member lease %s: %s", self.name, exc)
            self._stop.wait(self._settings.retry_period)
