"""Helpers for the Kubernetes-native end-to-end tests: kubectl and the objects it applies."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import subprocess
from typing import Any

import yaml
from temporalio.client import Client

from tests.conftest import require_tools
from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import wait_for_success
from tests.helpers import delete_twc_objects
from twc.cli.status import run_status
from twc.local.environment import LocalEnvironment, find_tool
from twc.local.podworkers import PodWorkers
from twc.rollout import BUILD_ID_LABEL
from twc.spec import ALLOWED_NAMESPACES_ANNOTATION, SOURCE_NAMESPACE_ANNOTATION


class Kubectl:
    """The real kubectl, pointed at the local environment's kubeconfig."""

    def __init__(self, local_env: LocalEnvironment) -> None:
        require_tools("kubectl")
        self.binary = str(find_tool("kubectl"))
        self.kubeconfig = str(local_env.kubeconfig)

    def __call__(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        """Run ``kubectl ARGS`` and return its stdout."""
        done = subprocess.run(
            [self.binary, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def apply(self, *objects: dict[str, Any]) -> str:
        """``kubectl apply -f -`` of the objects as one YAML stream."""
        return self("apply", "-f", "-", stdin=yaml.safe_dump_all(objects, sort_keys=False))

    def get_json(self, *args: str) -> dict[str, Any] | None:
        """``kubectl get ARGS -o json``, or ``None`` when the object does not exist."""
        out = self("get", *args, "-o", "json", "--ignore-not-found", check=True)
        return json.loads(out) if out.strip() else None


def cluster_connection(
    name: str,
    host_port: str,
    *,
    secret_source: str | None = None,
    allowed: list[str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A ClusterConnection object (twc's ``secretSource`` and ``allowedNamespaces`` as
    its annotations)."""
    annotations = {SOURCE_NAMESPACE_ANNOTATION: secret_source} if secret_source else {}
    if allowed is not None:
        annotations[ALLOWED_NAMESPACES_ANNOTATION] = ",".join(allowed)
    metadata = {"name": name} | ({"annotations": annotations} if annotations else {})
    return {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "ClusterConnection",
        "metadata": metadata,
        "spec": {"hostPort": host_port, **spec},
    }


def connection(namespace: str, name: str, host_port: str, **spec: Any) -> dict[str, Any]:
    """A namespaced Connection object."""
    return {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "Connection",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hostPort": host_port, **spec},
    }


def temporal_worker(
    namespace: str, name: str, task_queue: str, connection_ref: dict[str, Any]
) -> dict[str, Any]:
    """A TemporalWorker object."""
    return {
        "apiVersion": "temporal.kmsvc.io/v1",
        "kind": "TemporalWorker",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "image": "registry.example/worker:1.4.2",
            "taskQueueName": task_queue,
            "connectionRef": connection_ref,
        },
    }


def object_ref(kind: str, name: str) -> dict[str, Any]:
    """A connectionRef by objectRef."""
    return {"objectRef": {"apiGroup": "temporal.io", "kind": kind, "name": name}}


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The object's status conditions by type."""
    found = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c["type"]: c for c in found}


def second_tenant(
    local_env: LocalEnvironment, kube: Any, namespace: str, daemons: Any, request: Any
) -> tuple[str, Any]:
    """A second tenant's namespace beside ``namespace`` (its objects deleted at the end), and
    a daemon, already applied once, on a fleet of ``namespace`` that takes both tenants'."""
    other = f"{namespace}-b"
    kube.ensure_namespace(other)
    request.addfinalizer(functools.partial(delete_twc_objects, kube, other))
    daemon = daemons.start(
        daemons.stack(fleet_doc(namespace, host_port=local_env.temporal_address()))
    )
    wait_for_success(daemon)
    return other, daemon


class Kubelet:
    """The pod runner of ``twc local up --run-workers`` (``twc.local.podworkers``) for
    this worker's pods: a real worker process per Running pod of each version
    Deployment, which the real controllers create, scale to 0 and delete; a pod that goes
    takes its worker process with it."""

    def __init__(self, kube: Any, namespace: str, worker: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.worker = worker
        self.runner = PodWorkers(
            kube, namespace=namespace, selector=f"twc.temporal.io/worker={worker}"
        )

    def __enter__(self) -> Kubelet:
        self.runner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.stop()

    def deployments(self) -> dict[str, dict[str, Any]]:
        """The worker's version Deployments, by build ID."""
        selector = f"twc.temporal.io/worker={self.worker}"
        response = self.kube.apps.list_namespaced_deployment(
            self.namespace, label_selector=selector, _preload_content=False
        )
        out = {}
        for dep in json.loads(response.data)["items"]:
            build = (dep["metadata"].get("labels") or {}).get(BUILD_ID_LABEL)
            if build:
                out[build] = dep
        return out

    def running(self) -> set[str]:
        """The builds whose pods have a worker process running now."""
        return {
            (w.pod["metadata"].get("labels") or {}).get(BUILD_ID_LABEL, "")
            for w in self.runner.workers().values()
        }


def start_wait(address: str, workflow_id: str, task_queue: str, namespace: str = "default") -> None:
    """Start the sample worker's ``WaitWorkflow`` (pinned to the version that takes it)."""

    async def start() -> None:
        client = await Client.connect(address, namespace=namespace)
        await client.start_workflow("WaitWorkflow", id=workflow_id, task_queue=task_queue)

    asyncio.run(start())


def finish(address: str, workflow_id: str, namespace: str = "default") -> str:
    """Signal a ``WaitWorkflow`` to finish; its result: the build ID that ran it."""

    async def signal() -> str:
        client = await Client.connect(address, namespace=namespace)
        handle = client.get_workflow_handle(workflow_id)
        await handle.signal("finish")
        result: str = await handle.result()
        return result

    return asyncio.run(signal())


def rollout_of(stack: str, key: str) -> dict[str, Any]:
    """Worker ``key``'s ``rollout`` as ``twc status`` shows it; an assertion (so a wait asks
    again) while it lists no such worker yet, as before the stack's first ``up`` ends."""
    out = io.StringIO()
    assert run_status(stack, "json", out) == 0
    workers: dict[str, Any] = json.loads(out.getvalue())["workers"]
    assert key in workers, f"twc status lists no {key} yet (its first up still runs); again"
    rollout: dict[str, Any] = workers[key]["rollout"]
    return rollout
