"""Where a sharded stack's assignment of namespaces to shards is kept: a ConfigMap.

The assignment must never change for a namespace once given (a namespace that moved
would be deleted by one shard and created by another), and every writer must agree on
it: several daemon replicas, and ``twc up`` from a laptop, can all meet a new namespace
at the same moment. So it lives in one ConfigMap, ``twc-shards-<stack>`` in the fleet's
``sharding.assignmentNamespace``, written with the ``resourceVersion`` it was read at:
of two writers that extend it at once, one wins and the other reads the winner's map
and finds the namespace assigned. It is written *before* any shard applies a new
namespace, so no shard ever holds a namespace the map does not give it.

(The shard stacks' own outputs could record their namespaces too, but they are written
only after an ``up`` finishes, and each shard knows only itself: two shards could both
take a new namespace before either recorded it.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from twc.kube.client import status_of
from twc.shards import ShardMap, assign

__all__ = ["ASSIGNMENT_KEY", "ShardMapStore", "shard_map_name"]

logger = logging.getLogger(__name__)

ASSIGNMENT_KEY = "assignment.json"
"""The ConfigMap key holding :meth:`ShardMap.to_json`."""


def shard_map_name(stack: str) -> str:
    """The ConfigMap's name for ``stack``: a valid object name."""
    raw = f"twc-shards-{stack}".lower()
    cleaned = "".join(c if c.isalnum() or c in "-." else "-" for c in raw).strip("-.")
    return cleaned[:253]


class ShardMapStore:
    """Reads and extends one stack's assignment ConfigMap."""

    def __init__(self, core_api: Any, *, namespace: str, stack: str) -> None:
        """Keep the map of ``stack`` in ``namespace`` (through a ``CoreV1Api``)."""
        self._api = core_api
        self.namespace = namespace
        self.name = shard_map_name(stack)

    def read(self) -> tuple[ShardMap | None, str | None]:
        """The map and the ConfigMap's resourceVersion; ``(None, None)`` when absent.

        Raises:
            ValueError: The ConfigMap holds no readable map (it is never overwritten
                then: someone must look at it).
        """
        try:
            found = self._api.read_namespaced_config_map(self.name, self.namespace)
        except Exception as exc:
            if status_of(exc) == 404:
                return None, None
            raise
        data = found.data or {}
        raw = data.get(ASSIGNMENT_KEY)
        if raw is None:
            raise ValueError(f"ConfigMap {self.namespace}/{self.name} has no {ASSIGNMENT_KEY}")
        parsed = json.loads(raw)
        if not isinstance(parsed, Mapping):
            raise ValueError(f"ConfigMap {self.namespace}/{self.name}: not a shard map")
        return ShardMap.from_json(parsed), found.metadata.resource_version

    def extend(
        self, load: Mapping[str, int], *, max_workers_per_shard: int, attempts: int = 8
    ) -> ShardMap:
        """Assign the namespaces of ``load`` that have no shard yet, and record it.

        Returns:
            The map as recorded (another writer's, when it got there first).

        Raises:
            RuntimeError: Every attempt lost a race (a very busy map).
            Exception: The API server refused or could not be reached.
        """
        for _ in range(attempts):
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
        raise RuntimeError(f"ConfigMap {self.namespace}/{self.name}: lost {attempts} races")

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
        # Optimistic concurrency: a competing write in between makes this one 409.
        body["metadata"]["resourceVersion"] = version
        self._api.replace_namespaced_config_map(self.name, self.namespace, body)
