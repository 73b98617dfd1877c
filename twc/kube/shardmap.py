"""A sharded stack's assignment of namespaces to shards: ConfigMap ``twc-shards-<stack>``
in ``sharding.assignmentNamespace``. A namespace's shard never changes once given: the map
is written at the ``resourceVersion`` read (of two writers, the loser reads the winner's)
and before any shard applies a new namespace."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from twc.kube.client import status_of, unless_404
from twc.shards import ShardMap, assign

logger = logging.getLogger(__name__)

ASSIGNMENT_KEY = "assignment.json"


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

    def extend(
        self, load: Mapping[str, int], *, max_workers_per_shard: int, attempts: int = 8
    ) -> ShardMap:
        """Assign ``load``'s new namespaces and record them; the map as recorded (another
        writer's when it won). RuntimeError when every attempt lost a race."""
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
        body["metadata"]["resourceVersion"] = version
        self._api.replace_namespaced_config_map(self.name, self.namespace, body)
