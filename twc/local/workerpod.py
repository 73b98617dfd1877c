"""A worker "pod": a real temporalio worker configured only from the Deployment's env.

``WorkerPod`` reads a Deployment from the API server and does what a kubelet would for
its worker container (the one named ``worker``, else the first): resolves the env
(``envFrom`` ConfigMaps and Secrets first, then plain values, ``secretKeyRef``,
``configMapKeyRef`` and the downward API, which win, as in Kubernetes), mounts Secret
and ConfigMap volumes (written to a private temporary directory, with the env paths that
point into a mount rewritten to it), and starts this module as a process. The process
loads its client settings with ``temporalio.envconfig`` from that env alone, exactly as
a worker image would, and serves ``EchoWorkflow`` on ``TEMPORAL_TASK_QUEUE`` (with the
rollout samples ``GateWorkflow`` and ``WaitWorkflow``). A version's pod
(``TEMPORAL_DEPLOYMENT_NAME`` and ``TEMPORAL_WORKER_BUILD_ID`` set) polls with Worker
Versioning on, as that version.
"""

from __future__ import annotations

import base64
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twc.kube.client import status_of
from twc.local.environment import project_root
from twc.local.kube import Kube

log = logging.getLogger(__name__)


class WorkerPod:
    """One simulated pod of a worker Deployment, running a real temporalio worker."""

    def __init__(self, kube: Kube, namespace: str, deployment: str, index: int = 0) -> None:
        self.kube = kube
        self.namespace = namespace
        self.deployment = deployment
        self.pod_name = f"{deployment}-sim-{index}"
        self._dir = tempfile.TemporaryDirectory(prefix=f"twc-pod-{deployment}-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] = {}

    def build_env(self) -> dict[str, str]:
        """The worker container's environment as the kubelet would resolve it."""
        dep = self.kube.get_deployment(self.namespace, self.deployment)
        if dep is None:
            raise LookupError(f"deployment {self.namespace}/{self.deployment} not found")
        pod_spec = dep["spec"]["template"]["spec"]
        containers = pod_spec["containers"]
        container = next((c for c in containers if c.get("name") == "worker"), containers[0])
        mounts = self._mount_volumes(pod_spec, container)
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            env.update(self._env_from(source))
        for item in container.get("env") or []:
            value = self._resolve(item)
            if value is None:
                continue
            for mount_path, local in mounts.items():
                if value.startswith(mount_path.rstrip("/") + "/"):
                    value = str(local) + value[len(mount_path.rstrip("/")) :]
            env[item["name"]] = value
        self.env = env
        return env

    def _resolve(self, item: dict[str, Any]) -> str | None:
        if "value" in item:
            return str(item["value"])
        source = item.get("valueFrom") or {}
        if "fieldRef" in source:
            field = source["fieldRef"]["fieldPath"]
            return {
                "metadata.name": self.pod_name,
                "metadata.namespace": self.namespace,
                "spec.nodeName": "twc-local-node",
                "status.podIP": "127.0.0.1",
            }.get(field, "")
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            data = self._data("secret", ref["name"])
            return data.get(ref["key"])
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            return self._data("configMap", ref["name"]).get(ref["key"])
        return None

    def _data(self, kind: str, name: str) -> dict[str, str]:
        """A Secret's (decoded) or ConfigMap's data; empty when it does not exist."""
        try:
            if kind == "secret":
                secret = self.kube.core.read_namespaced_secret(name, self.namespace)
                return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
            config_map = self.kube.core.read_namespaced_config_map(name, self.namespace)
            return dict(config_map.data or {})
        except Exception as exc:
            if status_of(exc) == 404:
                return {}
            raise

    def _env_from(self, source: dict[str, Any]) -> dict[str, str]:
        prefix = source.get("prefix") or ""
        if "secretRef" in source:
            data = self._data("secret", source["secretRef"]["name"])
        elif "configMapRef" in source:
            data = self._data("configMap", source["configMapRef"]["name"])
        else:
            return {}
        return {f"{prefix}{k}": v for k, v in data.items()}

    def _mount_volumes(
        self, pod_spec: dict[str, Any], container: dict[str, Any]
    ) -> dict[str, Path]:
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        mounted: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"]) or {}
            if "secret" in volume:
                data = self._data("secret", volume["secret"]["secretName"])
            elif "configMap" in volume:
                data = self._data("configMap", volume["configMap"]["name"])
            else:
                continue
            local = Path(self._dir.name) / mount["name"]
            local.mkdir(mode=0o700, exist_ok=True)
            for key, value in data.items():
                path = local / key
                path.write_text(value)
                path.chmod(0o600)
            mounted[mount["mountPath"]] = local
        return mounted

    def start(self) -> WorkerPod:
        """Start the worker process with exactly the resolved env (plus PATH/Python)."""
        env = self.build_env()
        proc_env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        proc_env.update(env)
        proc_env["PYTHONPATH"] = str(project_root())
        log_path = Path(self._dir.name) / "worker.log"
        self._log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "twc.local.workerpod"],
            env=proc_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    def log_text(self) -> str:
        return (Path(self._dir.name) / "worker.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "_log"):
            self._log.close()
        self._dir.cleanup()


async def _serve() -> None:
    import asyncio

    from temporalio.client import Client
    from temporalio.envconfig import ClientConfigProfile
    from temporalio.worker import Worker

    from twc.local.sample import EchoWorkflow, GateWorkflow, WaitWorkflow, echo

    profile = ClientConfigProfile.load()  # from TEMPORAL_* env, as a worker image would
    client = await Client.connect(**profile.to_client_connect_config())
    task_queue = os.environ["TEMPORAL_TASK_QUEUE"]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    config = deployment_config(os.environ)
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[EchoWorkflow, GateWorkflow, WaitWorkflow],
        activities=[echo],
        deployment_config=config,
    ):
        version = f" as {config.version.to_canonical_string()}" if config else ""
        print(f"worker polling {task_queue} on {profile.address}{version}", flush=True)
        await stop.wait()


def deployment_config(env: Mapping[str, str]) -> Any:
    """The ``WorkerDeploymentConfig`` a versioned worker builds from its pod's env
    (``TEMPORAL_DEPLOYMENT_NAME``, ``TEMPORAL_WORKER_BUILD_ID``), as a worker image
    would: Worker Versioning on, workflows pinned to the version they start on. ``None``
    for an unversioned worker."""
    from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
    from temporalio.worker import WorkerDeploymentConfig

    name, build = env.get("TEMPORAL_DEPLOYMENT_NAME"), env.get("TEMPORAL_WORKER_BUILD_ID")
    if not name or not build:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


if __name__ == "__main__":
    import asyncio

    asyncio.run(_serve())
