"""The simulated nodes of the local environment, played by KWOK.

The real kube-scheduler places pods on these Node objects and KWOK (``kwok``) plays
their kubelets: it turns each node Ready once, and each pod scheduled onto one Running
and Ready, with an address, then removes it when it is deleted. What KWOK does to an
object is configured by its Stage objects, written here as the one configuration file
``twc local up`` hands to ``kwok --config``:

* a node that is not Ready becomes Ready, with an address, a large allocatable capacity
  (the scheduler never runs out of room on a test bed) and node info;
* a pod that is Pending on a node becomes Running: every container running and ready,
  every init container (the worker's wait-for-the-frontend container) completed and
  every sidecar (an init container that restarts Always) running, the Ready condition
  True, a pod IP from the node's pod CIDR;
* a pod with a deletion timestamp is deleted (the kubelet's confirmation that its
  containers stopped; the real worker process of ``--run-workers`` stops with it).

No node heartbeat is played: the node lifecycle controller does not run here, so nothing
marks a quiet node NotReady or evicts its pods. Every address is on loopback (nothing is
ever dialled at them; a pod IP is only a status field here).
"""

from __future__ import annotations

from typing import Any

from twc.kube.client import status_of
from twc.local.kube import Kube

NODE_ANNOTATION = "kwok.x-k8s.io/node"
"""KWOK manages the nodes carrying this annotation with the value ``fake``."""
MANAGE_SELECTOR = f"{NODE_ANNOTATION}=fake"
NODES = ("twc-node-0", "twc-node-1", "twc-node-2")
"""A few nodes, so a Deployment's replicas really are spread by the scheduler."""
NODE_IP = "127.0.0.1"
DEFAULT_POD_CIDR = "127.9.0.0/16"
"""Pod IPs for a node without a pod CIDR of its own (each of ``NODES`` has one)."""

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
- type: InternalIP
  address: {{ NodeIP | Quote }}
- type: Hostname
  address: {{ .metadata.name | Quote }}
capacity:
  cpu: "1000"
  memory: 4Ti
  pods: "10000"
allocatable:
  cpu: "1000"
  memory: 4Ti
  pods: "10000"
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: {{ printf "kwok-v%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-v%s" Version | Quote }}
  containerRuntimeVersion: {{ printf "kwok-v%s" Version | Quote }}
  kernelVersion: ""
  osImage: ""
  machineID: ""
  systemUUID: ""
  bootID: ""
phase: Running
"""

_POD_RUNNING = """\
{{ $now := Now }}
conditions:
- type: Initialized
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: ContainersReady
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
- type: Ready
  status: "True"
  lastTransitionTime: {{ $now | Quote }}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
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
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ else }}
  state:
    terminated:
      exitCode: 0
      reason: Completed
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
{{ end }}
{{ end }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _stage(name: str, kind: str, expressions: list[dict[str, Any]], nxt: dict[str, Any]) -> Any:
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
_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}


def stages() -> list[dict[str, Any]]:
    """KWOK's Stage objects for the local environment (see the module docstring)."""
    return [
        _stage("twc-node-ready", "Node", [_NOT_READY], {"statusTemplate": _NODE_READY}),
        _stage(
            "twc-pod-running",
            "Pod",
            [
                _NOT_DELETED,
                {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                _NOT_READY,
            ],
            {"statusTemplate": _POD_RUNNING},
        ),
        _stage(
            "twc-pod-deleted",
            "Pod",
            [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
            {"delete": True},
        ),
    ]


def config_yaml() -> str:
    """The file ``kwok --config`` reads: the stages as one YAML stream."""
    import yaml

    return yaml.safe_dump_all(stages(), sort_keys=False)


def node_object(index: int, name: str) -> dict[str, Any]:
    """One simulated node: annotated for KWOK, with a loopback pod CIDR of its own."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {NODE_ANNOTATION: "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {"podCIDR": f"127.{10 + index}.0.0/16"},
    }


def ensure_nodes(kube: Kube) -> None:
    """Create the simulated nodes that do not exist yet (``up`` is idempotent)."""
    for index, name in enumerate(NODES):
        try:
            kube.core.create_node(node_object(index, name))
        except Exception as exc:
            if status_of(exc) != 409:
                raise


NOT_READY_TAINT = "node.kubernetes.io/not-ready"


def nodes_ready(kube: Kube) -> bool:
    """True once every simulated node is Ready and schedulable.

    The API server taints each new node not-ready; the node lifecycle controller lifts
    the taint once the node reports Ready. That controller does not run here (it would
    also need node heartbeats, and evict pods without them), so this does its one step
    for the simulated nodes: a node KWOK has turned Ready loses the taint.
    """
    usable = set()
    for node in kube.core.list_node().items:
        name = node.metadata.name
        if name not in NODES:
            continue
        conditions = (node.status.conditions if node.status else None) or []
        if not any(c.type == "Ready" and c.status == "True" for c in conditions):
            continue
        taints = node.spec.taints or []
        if any(t.key == NOT_READY_TAINT for t in taints):
            kept = [kube.api_client.sanitize_for_serialization(t) for t in taints]
            kept = [t for t in kept if t["key"] != NOT_READY_TAINT]
            kube.core.patch_node(name, {"spec": {"taints": kept}})
            continue
        usable.add(name)
    return set(NODES) <= usable
