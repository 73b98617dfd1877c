"""The CRDs of the local environment: the kmsvc ``Queue`` (``kmsvc.io/v1``; one labelled
``temporal.io/worker-enabled: "true"`` gets a worker derived by twc) and twc's own kinds."""

from __future__ import annotations

from typing import Any

import yaml

from twc.spec import crds as spec_crds

QUEUE_CRD = r"""
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: queues.kmsvc.io}
spec:
  group: kmsvc.io
  scope: Namespaced
  names: {kind: Queue, listKind: QueueList, plural: queues, singular: queue, shortNames: [kq]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: FIFO, type: boolean, jsonPath: .spec.fifo}
    - {name: Partitions, type: integer, jsonPath: .spec.partitions}
    - {name: Worker, type: string, jsonPath: '.metadata.labels.temporal\.io/worker-enabled'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              fifo: {type: boolean, description: Messages are delivered in order.}
              partitions:
                type: integer
                minimum: 1
                maximum: 1000
                description: Partitions; a derived worker runs one replica per partition.
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


def queue_crd() -> dict[str, Any]:
    """The kmsvc Queue CRD: spec.fifo, spec.partitions, status conditions."""
    crd: dict[str, Any] = yaml.safe_load(QUEUE_CRD)
    return crd


def all_crds() -> list[dict[str, Any]]:
    """Every CRD ``twc local up`` installs, the Queue labelled as twc's for the installer."""
    queue = queue_crd()
    queue["metadata"]["labels"] = {spec_crds.MANAGED_BY_LABEL: "twc"}
    return [queue, *spec_crds.all_crds()]
