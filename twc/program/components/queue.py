"""The kmsvc ``Queue`` component: the ``Queue`` object (``createObject``) and its derived worker."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from twc.builders import stack_labels
from twc.spec import QUEUE_API_VERSION, QUEUE_KIND, WORKER_ENABLED_LABEL, Queue

QUEUE_TYPE = "twc:kmsvc:Queue"


class QueueComponent(pulumi.ComponentResource):
    """One kmsvc queue."""

    def __init__(
        self,
        name: str,
        queue: Queue,
        opts: pulumi.ResourceOptions | None = None,
        *,
        stack: str | None = None,
    ) -> None:
        super().__init__(QUEUE_TYPE, name, {}, opts)
        if queue.create_object:
            labels = {**dict(queue.labels), **stack_labels(stack)}
            if queue.worker_enabled:
                labels[WORKER_ENABLED_LABEL] = "true"
            spec: dict[str, object] = {"fifo": queue.fifo}
            if queue.partitions is not None:
                spec["partitions"] = queue.partitions
            k8s.apiextensions.CustomResource(
                f"{name}-queue",
                api_version=QUEUE_API_VERSION,
                kind=QUEUE_KIND,
                metadata={"name": queue.name, "namespace": queue.namespace, "labels": labels},
                spec=spec,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.register_outputs({"name": queue.name, "namespace": queue.namespace})
