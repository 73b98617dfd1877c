"""A pod's container run for real: a worker process configured only from the pod.

``WorkerPod`` takes a pod object from the API server (one that KWOK reports Running on a
simulated node) and does for its worker container (the one named ``worker``, else the
first) what a kubelet would: resolves the env (``envFrom`` first, then ``env``, which
wins: plain values with ``$(VAR)`` references, secretKeyRef, configMapKeyRef, the
downward API), mounts secret and configMap volumes (written to a private temporary
directory, with the env values that point into a mount rewritten to it), and starts
the worker as a process of its own session with exactly that env (plus this machine's).

Which worker: the container's own ``command`` and ``args`` when they can run on this
machine (:func:`own_command`: the code's directory given by the pod annotation
``twc.temporal.io/local-workdir`` or an existing ``workingDir``, the executable found
here); otherwise this module's sample worker. The sample loads its client settings with
``temporalio.envconfig`` from the env alone, exactly as a worker image would, and serves
``EchoWorkflow`` (with the rollout samples ``GateWorkflow`` and ``WaitWorkflow``) on
``TEMPORAL_TASK_QUEUE`` with the pod's name as its identity, so Temporal's poller list
names the pods that poll. A version's pod (``TEMPORAL_DEPLOYMENT_NAME`` and
``TEMPORAL_WORKER_BUILD_ID`` set) polls with Worker Versioning on, as that version.

The container's image is never run (there is no container runtime). Init containers
count as done (KWOK reports them completed).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twc.kube.client import status_of
from twc.local import processes
from twc.local.environment import project_root
from twc.local.kube import Kube
from twc.local.processes import ProcessRecord

log = logging.getLogger(__name__)

_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
LOCAL_WORKDIR = "twc.temporal.io/local-workdir"
"""Pod annotation: the directory on this machine that holds the worker's code (a relative
one is relative to the project root); the container's own command runs there."""


class PodConfigError(RuntimeError):
    """The container cannot be configured yet (a missing secret, config map or key), as
    a kubelet's CreateContainerConfigError; trying again later may succeed."""


class WorkerPod:
    """The worker process of one pod."""

    def __init__(self, kube: Kube, pod: Mapping[str, Any], log_dir: Path | None = None) -> None:
        self.kube = kube
        self.pod = pod
        meta = pod["metadata"]
        self.namespace: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.uid: str = meta.get("uid", "")
        self._dir = Path(tempfile.mkdtemp(prefix=f"twc-pod-{self.pod_name}-"))
        self._log_file = (
            log_dir / f"{self.namespace}.{self.pod_name}.log" if log_dir else self._dir / "log"
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.record: ProcessRecord | None = None
        self.env: dict[str, str] = {}

    @classmethod
    def of_deployment(
        cls,
        kube: Kube,
        namespace: str,
        deployment: str,
        index: int = 0,
        timeout: float = 60,
        interval: float = 0.5,
    ) -> WorkerPod:
        """The ``index``-th Running pod (by name) of a Deployment, once there is one,
        looking every ``interval`` seconds (a kubelet is told by its watch; a benchmark
        looks often so as not to add its own wait).

        Raises:
            LookupError: no such pod became Running within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            dep = kube.get_deployment(namespace, deployment)
            if dep is not None:
                labels = dep["spec"]["selector"].get("matchLabels") or {}
                selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                pods = sorted(
                    (p for p in list_pods(kube, namespace, selector) if is_running(p)),
                    key=lambda p: p["metadata"]["name"],
                )
                if len(pods) > index:
                    return cls(kube, pods[index])
            if time.monotonic() >= deadline:
                raise LookupError(
                    f"deployment {namespace}/{deployment} has no Running pod #{index} "
                    f"after {timeout:.0f} s"
                )
            time.sleep(interval)

    # ------------------------------------------------------------------ env
    def build_env(self) -> dict[str, str]:
        """The worker container's environment as a kubelet would resolve it.

        Raises:
            PodConfigError: a referenced secret, config map or key does not exist.
        """
        spec = self.pod["spec"]
        container = worker_container(spec)
        mounts = self._mount_volumes(spec, container)
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            for key, value in self._env_from(source).items():
                env[prefix + key] = value
        for item in container.get("env") or []:
            resolved = self._resolve(item, env)
            if resolved is None:
                continue
            value = resolved
            for mount_path, local in mounts.items():
                root = mount_path.rstrip("/")
                if value == root or value.startswith(root + "/"):
                    value = str(local) + value[len(root) :]
            env[item["name"]] = value
        self.env = env
        return env

    def _resolve(self, item: Mapping[str, Any], defined: Mapping[str, str]) -> str | None:
        if "valueFrom" not in item:
            return _expand(str(item.get("value", "")), defined)
        source = item["valueFrom"]
        if "fieldRef" in source:
            return self._field(source["fieldRef"]["fieldPath"])
        if "secretKeyRef" in source:
            return self._key(source["secretKeyRef"], self._secret)
        if "configMapKeyRef" in source:
            return self._key(source["configMapKeyRef"], self._config_map)
        raise PodConfigError(
            f"pod {self.namespace}/{self.pod_name}: env {item['name']}: "
            f"unsupported source {sorted(source)} on the test bed"
        )

    def _field(self, path: str) -> str:
        """The downward API: the pod's own fields, as the API server holds them."""
        meta, spec = self.pod["metadata"], self.pod["spec"]
        status = self.pod.get("status") or {}
        match = _FIELD_LABEL.match(path)
        if match:
            return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
        values = {
            "metadata.name": meta.get("name"),
            "metadata.namespace": meta.get("namespace"),
            "metadata.uid": meta.get("uid"),
            "spec.nodeName": spec.get("nodeName"),
            "spec.serviceAccountName": spec.get("serviceAccountName"),
            "status.hostIP": status.get("hostIP"),
            "status.podIP": status.get("podIP"),
            "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
            "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
        }
        if path not in values:
            raise PodConfigError(f"pod {self.namespace}/{self.pod_name}: fieldRef {path}")
        return str(values[path] or "")

    def _key(self, ref: Mapping[str, Any], read: Any) -> str | None:
        data: dict[str, bytes] | None = read(ref["name"], optional=bool(ref.get("optional")))
        if data is None or ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise PodConfigError(
                f"pod {self.namespace}/{self.pod_name}: key {ref['key']!r} not in {ref['name']}"
            )
        return data[ref["key"]].decode()

    def _env_from(self, source: Mapping[str, Any]) -> dict[str, str]:
        ref = source.get("secretRef") or source.get("configMapRef") or {}
        read = self._secret if "secretRef" in source else self._config_map
        data = read(ref["name"], optional=bool(ref.get("optional"))) or {}
        return {k: v.decode() for k, v in data.items()}

    def _secret(self, name: str, optional: bool = False) -> dict[str, bytes] | None:
        try:
            secret = self.kube.core.read_namespaced_secret(name, self.namespace)
        except Exception as exc:
            if status_of(exc) == 404:
                self._missing("secret", name, optional)
                return None
            raise
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    def _config_map(self, name: str, optional: bool = False) -> dict[str, bytes] | None:
        try:
            cm = self.kube.core.read_namespaced_config_map(name, self.namespace)
        except Exception as exc:
            if status_of(exc) == 404:
                self._missing("config map", name, optional)
                return None
            raise
        data = {k: v.encode() for k, v in (cm.data or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
        return data

    def _missing(self, kind: str, name: str, optional: bool) -> None:
        """Raises for a missing object that is not optional (a kubelet would not start
        the container); an optional one reads as absent."""
        if optional:
            return
        raise PodConfigError(f"pod {self.namespace}/{self.pod_name}: {kind} {name} not found")

    def _mount_volumes(
        self, pod_spec: Mapping[str, Any], container: Mapping[str, Any]
    ) -> dict[str, Path]:
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        mounted: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"]) or {}
            if "secret" in volume:
                source = volume["secret"]
                data = self._secret(source["secretName"], bool(source.get("optional")))
            elif "configMap" in volume:
                source = volume["configMap"]
                data = self._config_map(source["name"], bool(source.get("optional")))
            else:
                continue  # e.g. projected service-account tokens: not used by workers
            local = self._dir / "volumes" / mount["name"]
            local.mkdir(mode=0o700, parents=True, exist_ok=True)
            items = source.get("items") or [{"key": k, "path": k} for k in data or {}]
            for item in items:
                if item["key"] not in (data or {}):
                    raise PodConfigError(
                        f"pod {self.namespace}/{self.pod_name}: volume {mount['name']}: "
                        f"no key {item['key']!r}"
                    )
                path = local / item["path"]
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                path.write_bytes((data or {})[item["key"]])
                path.chmod(0o600)
            mounted[mount["mountPath"]] = local
        return mounted

    # ------------------------------------------------------------- process
    def start(self) -> WorkerPod:
        """Start the worker process with exactly the resolved env (plus this machine's):
        the container's own command where it can run here, else the sample worker.

        Raises:
            PodConfigError: see :meth:`build_env`.
        """
        env = self.build_env()
        proc_env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
        proc_env.update(env)
        own = own_command(self.pod, env)
        if own is None:
            proc_env["PYTHONPATH"] = str(project_root())
            argv, cwd = [sys.executable, "-m", "twc.local.workerpod"], self._dir
        else:
            argv, cwd = own
        self._log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_file, "ab") as out:
            # A session of its own: `twc local down` can stop it by pid and start time
            # even when the process that started it is gone.
            self.proc = subprocess.Popen(
                argv,
                env=proc_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
            )
        self.record = processes.record(
            f"pod {self.namespace}/{self.pod_name}", self.proc.pid, argv, self._log_file
        )
        return self

    def exited(self) -> bool:
        """True once a started worker process has ended on its own."""
        return self.proc is not None and self.proc.poll() is not None

    def log_text(self) -> str:
        return self._log_file.read_text(errors="replace")

    def terminate(self) -> None:
        """Ask the worker to stop (SIGTERM); :meth:`stop` waits for it."""
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the worker (SIGTERM, SIGKILL after ``timeout``) and remove its files."""
        if self.proc:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def worker_container(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's worker container: the one named ``worker``, else the first."""
    containers = pod_spec["containers"]
    return dict(next((c for c in containers if c.get("name") == "worker"), containers[0]))


def own_command(pod: Mapping[str, Any], env: Mapping[str, str]) -> tuple[list[str], Path] | None:
    """The worker container's own ``command`` + ``args`` (``$(VAR)`` expanded from ``env``
    as a kubelet does) and the directory to run them in, when both exist on this machine:
    the directory is the pod's ``twc.temporal.io/local-workdir`` annotation, else the
    container's ``workingDir``; the executable is found on PATH (or in that directory
    for a path), ``python`` and ``python3`` being this environment's interpreter, which
    has temporalio. ``None`` otherwise: the pod runs the sample worker."""
    container = worker_container(pod["spec"])
    annotations = pod["metadata"].get("annotations") or {}
    workdir = annotations.get(LOCAL_WORKDIR) or container.get("workingDir")
    if not container.get("command") or not workdir:
        return None
    directory = project_root() / workdir
    argv = [_expand(str(a), env) for a in [*container["command"], *container.get("args", [])]]
    if argv[0] in ("python", "python3"):
        executable: str | None = sys.executable
    else:
        executable = shutil.which(str(directory / argv[0]) if "/" in argv[0] else argv[0])
    if executable is None or not directory.is_dir():
        return None
    return [executable, *argv[1:]], directory


def _expand(value: str, defined: Mapping[str, str]) -> str:
    """``$(VAR)`` references to variables defined before, as the kubelet expands them
    (``$$`` escapes; an undefined reference stays as written)."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return defined.get(name, match.group(0))

    return _VAR_REF.sub(sub, value)


def list_pods(kube: Kube, namespace: str | None, selector: str) -> list[dict[str, Any]]:
    """Pods as the API server's JSON (camelCase, as in a manifest)."""
    if namespace:
        response = kube.core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
    else:
        response = kube.core.list_pod_for_all_namespaces(
            label_selector=selector, _preload_content=False
        )
    return list(json.loads(response.data).get("items") or [])


def is_running(pod: Mapping[str, Any]) -> bool:
    """True for a pod on a node, Running, and not being deleted: one a kubelet runs."""
    return bool(
        (pod.get("spec") or {}).get("nodeName")
        and (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    )


MARK = "twc-worker-mark"
"""The prefix of the lines a worker process prints as it passes each step of its start
(:func:`marks`): where a benchmark's "started → polling" goes."""


def _mark(step: str) -> None:
    print(f"{MARK} {step} {time.time():.6f}", flush=True)


def marks(log_text: str) -> dict[str, float]:
    """The steps a worker process printed in its log, each with its wall-clock time:
    ``imported`` (Python, temporalio and the sample workflows loaded), ``connected``
    (its client connected to Temporal), ``built`` (its ``Worker`` built, the workflows
    validated), in that order; a step not printed is absent."""
    found: dict[str, float] = {}
    for line in log_text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == MARK:
            found.setdefault(parts[1], float(parts[2]))
    return found


async def _serve() -> None:
    import asyncio

    from temporalio.client import Client
    from temporalio.envconfig import ClientConfigProfile
    from temporalio.worker import Worker

    from twc.local.sample import EchoWorkflow, GateWorkflow, WaitWorkflow, echo

    _mark("imported")
    profile = ClientConfigProfile.load()  # from TEMPORAL_* env, as a worker image would
    identity = None
    if os.environ.get("POD_NAME"):
        # pod@node, as the SDK's default is pid@host: the poller list names the pods.
        identity = f"{os.environ['POD_NAME']}@{os.environ.get('NODE_NAME', '')}"
    client = await Client.connect(**profile.to_client_connect_config(), identity=identity)
    _mark("connected")
    task_queue = os.environ["TEMPORAL_TASK_QUEUE"]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    config = deployment_config(os.environ)
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[EchoWorkflow, GateWorkflow, WaitWorkflow],
        activities=[echo],
        deployment_config=config,
    )
    _mark("built")
    async with worker:
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
