"""CustomResourceDefinitions installed into the local environment.

The kmsvc ``Queue`` (``kmsvc.io/v1``) is the object platform teams create for a queue; a
Queue labelled ``temporal.io/worker-enabled: "true"`` gets a worker derived by twc. twc's
own kinds (TemporalWorker, Connection, ClusterConnection) come from :mod:`twc.spec.crds`.
"""

from __future__ import annotations

from typing import Any

from twc.spec import crds as spec_crds

WORKER_ENABLED_LABEL = "temporal.io/worker-enabled"


def queue_crd() -> dict[str, Any]:
    """The kmsvc Queue CRD: spec.fifo, spec.partitions, status conditions."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "queues.kmsvc.io"},
        "spec": {
            "group": "kmsvc.io",
            "scope": "Namespaced",
            "names": {
                "kind": "Queue",
                "listKind": "QueueList",
                "plural": "queues",
                "singular": "queue",
                "shortNames": ["kq"],
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "FIFO", "type": "boolean", "jsonPath": ".spec.fifo"},
                        {"name": "Partitions", "type": "integer", "jsonPath": ".spec.partitions"},
                        {
                            "name": "Worker",
                            "type": "string",
                            "jsonPath": ".metadata.labels.temporal\\.io/worker-enabled",
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {
                                        "fifo": {
                                            "type": "boolean",
                                            "description": "Messages are delivered in order.",
                                        },
                                        "partitions": {
                                            "type": "integer",
                                            "minimum": 1,
                                            "maximum": 1000,
                                            "description": "Partitions; a derived worker "
                                            "runs one replica per partition.",
                                        },
                                    },
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def all_crds() -> list[dict[str, Any]]:
    """Every CRD ``twc local up`` installs: the kmsvc Queue and twc's own kinds."""
    return [queue_crd(), *spec_crds.all_crds()]
