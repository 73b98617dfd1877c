"""Fleet documents for the spec, connection and builder tests."""

from __future__ import annotations

import copy
from typing import Any

CLUSTER_REF = {
    "objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": "prod"}
}

# Stand-ins with the right PEM framing; nothing in the unit tests parses them.
CERT_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfakecert\n-----END CERTIFICATE-----\n"
KEY_PEM = b"-----BEGIN PRIVATE KEY-----\nMIIEfakekey\n-----END PRIVATE KEY-----\n"
CA_PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfakeca\n-----END CERTIFICATE-----\n"

_VALID: dict[str, Any] = {
    "apiVersion": "twc.temporal.io/v1",
    "kind": "Fleet",
    "defaults": {
        "image": "registry.example/worker:1.4.2",
        "temporalNamespace": "default",
        "replicas": 1,
        "connectionRef": CLUSTER_REF,
    },
    "clusterConnections": [
        {
            "name": "prod",
            "hostPort": "temporal-frontend.temporal.svc.cluster.local:7233",
            "tls": {"serverName": "temporal.example"},
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": "temporal"},
            "allowedNamespaces": ["sqs", "temporal"],
        }
    ],
    "connections": [{"name": "orders", "namespace": "sqs", "hostPort": "10.0.0.5:7233"}],
    "queues": [
        {
            "name": "orders-fifo",
            "namespace": "sqs",
            "fifo": True,
            "partitions": 6,
            "workerEnabled": True,
        },
        {"name": "billing", "namespace": "sqs"},
    ],
    "workers": [
        {
            "name": "billing",
            "namespace": "sqs",
            "queueRef": {"name": "billing"},
            "connectionRef": {"name": "orders"},
            "image": "registry.example/billing:2.0.0",
            "imagePullPolicy": "Always",
            "autoscaling": {"minReplicas": 1, "maxReplicas": 20, "targetBacklogPerReplica": 5},
            "resources": {
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "limits": {"cpu": "2", "memory": "2Gi"},
            },
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [
                {
                    "key": "dedicated",
                    "operator": "Equal",
                    "value": "temporal",
                    "effect": "NoSchedule",
                }
            ],
            "lifecycle": {"preStopCommand": ["sleep", "5"]},
            "dlq": {"enabled": True},
        },
        {
            "name": "reports",
            "namespace": "temporal",
            "taskQueueName": "reports",
        },
    ],
}


def valid_fleet() -> dict[str, Any]:
    """A fresh copy of a valid fleet touching every section."""
    return copy.deepcopy(_VALID)
