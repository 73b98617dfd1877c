"""Shards: one stack split by namespace into Pulumi stacks ``<stack>.s00``, ``.s01``...,
each with its own state, lock and Lease and everything its namespaces need. Pure:
:func:`assign` extends the :class:`ShardMap` without ever moving a namespace, and the
slicers cut the fleet file, the cluster's objects and a desired fleet to one shard."""

from twc.shards._assign import (
    ShardMap,
    assign,
    namespace_load,
    parse_shard_stack,
    shard_stack,
    shard_stacks,
)
from twc.shards._slice import restrict, shard_part, slice_fleet, slice_inputs, slice_objects

__all__ = [
    "ShardMap",
    "assign",
    "namespace_load",
    "parse_shard_stack",
    "restrict",
    "shard_part",
    "shard_stack",
    "shard_stacks",
    "slice_fleet",
    "slice_inputs",
    "slice_objects",
]
