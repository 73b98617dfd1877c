"""Shards: one stack split by namespace into several Pulumi stacks.

A stack with ``sharding: {by: namespace, maxWorkersPerShard: N}`` is applied as shard
stacks ``<stack>.s00``, ``<stack>.s01``... Each shard is its own Pulumi stack, with its
own state, lock and Lease, and holds everything its namespaces need: their workers,
their queues, and the connections those workers use (the secret copies in its
namespaces, the fingerprints).

Everything here is pure:

* :class:`ShardMap` is the assignment of namespaces to shards, and :func:`assign` extends
  it for new namespaces without ever moving one already assigned (a namespace that moved
  would have its workers deleted by one shard and created by another);
* :func:`slice_fleet` and :func:`slice_objects` cut the fleet file and the cluster's
  objects down to one shard's namespaces (what that shard's daemon and program see);
  :class:`NamespaceGroups` cuts a list shared by a daemon's shards by namespace;
* :func:`restrict` cuts a desired fleet down to a shard's namespaces inside the program
  (a queue another shard owns may be referenced for resolution, never built).
"""

from twc.shards._assign import (
    ShardMap,
    assign,
    namespace_load,
    parse_shard_stack,
    shard_stack,
    shard_stacks,
)
from twc.shards._slice import (
    NamespaceGroups,
    restrict,
    slice_fleet,
    slice_inputs,
    slice_objects,
)

__all__ = [
    "NamespaceGroups",
    "ShardMap",
    "assign",
    "namespace_load",
    "parse_shard_stack",
    "restrict",
    "shard_stack",
    "shard_stacks",
    "slice_fleet",
    "slice_inputs",
    "slice_objects",
]
