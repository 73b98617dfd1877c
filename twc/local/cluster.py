"""The test bed's cluster: its Kubernetes client (twc's :class:`KubeClient` over a kubeconfig, for
the test bed and its tests), the CRDs it installs and its simulated nodes.

The CRDs: the kmsvc ``Queue`` (``kmsvc.io/v1``; one labelled ``temporal.io/worker-enabled: "true"``
gets a worker derived by twc) and twc's own kinds. The nodes: KWOK's stages play their kubelets. A
node turns Ready with room for everything; a pod scheduled on one turns Running and Ready (init
containers completed, sidecars running); a pod being deleted is deleted. No heartbeats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from twc.kube import workloads
from twc.kube.client import KubeClient, api_client, tolerating
from twc.spec import crds as spec_crds


class Kube(KubeClient):
    """One API server through a kubeconfig, on an ``ApiClient`` of its own."""

    def __init__(self, kubeconfig: Path | str) -> None:
        super().__init__(api_client(kubeconfig))
        self.ext = self.extensions

    # twc.kube.workloads' own functions (the client first), as methods for the tests.
    ensure_namespace = workloads.ensure_namespace
    get_deployment = workloads.read_deployment


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


NODE_ANNOTATION = "kwok.x-k8s.io/node"
MANAGE_SELECTOR = f"{NODE_ANNOTATION}=fake"
NODES = ("twc-node-0", "twc-node-1", "twc-node-2")
NODE_IP = "127.0.0.1"
DEFAULT_POD_CIDR = "127.9.0.0/16"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"

_NODE_READY = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- type: {{ .type | Quote }}
  status: {{ .status | Quote }}
  reason: {{ .reason | Quote }}
  message: {{ .message | Quote }}
  lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
{{ end }}
addresses:
- {type: InternalIP, address: {{ NodeIP | Quote }}}
- {type: Hostname, address: {{ .metadata.name | Quote }}}
capacity: {cpu: "1000", memory: 4Ti, pods: "10000"}
allocatable: {cpu: "1000", memory: 4Ti, pods: "10000"}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-v%s" Version | Quote }}
phase: Running
"""

_POD_RUNNING = """\
{{ $now := Now }}
conditions:
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ end }}
{{ with .spec.initContainers }}
initContainerStatuses:
{{ range . }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  restartCount: 0
{{ if eq ( or .restartPolicy "" ) "Always" }}
  started: true
  state: {running: {startedAt: {{ $now | Quote }}}}
{{ else }}
  state:
    terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }},
      finishedAt: {{ $now | Quote }}}
{{ end }}
{{ end }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _stage(name: str, kind: str, expressions: list[Any], nxt: dict[str, Any]) -> Any:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": kind},
            "selector": {"matchExpressions": expressions},
            "next": nxt,
        },
    }


_NOT_READY = {
    "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
    "operator": "NotIn",
    "values": ["True"],
}


def config_yaml() -> str:
    """The file ``kwok --config`` reads: the Stage objects as one YAML stream."""
    pod_running = [
        {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
        {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
    ]
    deleting = [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}]
    stages = [
        _stage("twc-node-ready", "Node", [_NOT_READY], {"statusTemplate": _NODE_READY}),
        _stage("twc-pod-running", "Pod", pod_running, {"statusTemplate": _POD_RUNNING}),
        _stage("twc-pod-deleted", "Pod", deleting, {"delete": True}),
    ]
    return yaml.safe_dump_all(stages, sort_keys=False)


def ensure_nodes(kube: KubeClient) -> None:
    """Create the simulated nodes that do not exist yet, each with a pod CIDR of its own."""
    for index, name in enumerate(NODES):
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}
        labels["kubernetes.io/arch"] = "amd64"
        meta = {"name": name, "annotations": {NODE_ANNOTATION: "fake"}, "labels": labels}
        spec = {"podCIDR": f"127.{10 + index}.0.0/16"}
        with tolerating(409):
            kube.core.create_node({"metadata": meta, "spec": spec})


def nodes_ready(kube: KubeClient) -> bool:
    """True once every node is Ready and schedulable (lifting the not-ready taint)."""
    usable = set()
    for node in kube.core.list_node().items:
        conditions = (node.status.conditions if node.status else None) or []
        if node.metadata.name not in NODES or not any(
            c.type == "Ready" and c.status == "True" for c in conditions
        ):
            continue
        taints = node.spec.taints or []
        if any(t.key == NOT_READY_TAINT for t in taints):
            kept = [kube.api_client.sanitize_for_serialization(t) for t in taints]
            kept = [t for t in kept if t["key"] != NOT_READY_TAINT]
            kube.core.patch_node(node.metadata.name, {"spec": {"taints": kept}})
        else:
            usable.add(node.metadata.name)
    return set(NODES) <= usable
