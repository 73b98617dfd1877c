"""Pulumi components: connections, queues and workers.

Imports pulumi and pulumi-kubernetes; the layers below (spec, connections, builders) do
not.
"""

from twc.components.connection import (
    CLUSTER_CONNECTION_TYPE,
    CONNECTION_TYPE,
    ConnectionArgs,
    ConnectionComponent,
    WorkerConnection,
)
from twc.components.queue import QUEUE_TYPE, QueueComponent
from twc.components.worker import TEMPORAL_WORKER_TYPE, TemporalWorkerComponent, WorkerArgs

__all__ = [
    "CLUSTER_CONNECTION_TYPE",
    "CONNECTION_TYPE",
    "QUEUE_TYPE",
    "TEMPORAL_WORKER_TYPE",
    "ConnectionArgs",
    "ConnectionComponent",
    "QueueComponent",
    "TemporalWorkerComponent",
    "WorkerArgs",
    "WorkerConnection",
]
