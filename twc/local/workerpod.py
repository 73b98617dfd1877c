"""A pod's worker container run for real, configured only from the pod as a kubelet would (env,
secret and config map volumes in a private directory): its own ``command`` when it can run here
(:func:`own_command`), else the sample worker (:mod:`twc.local.sample`), configured from its env
alone as a worker image is. Images are never run; init containers count as done."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from twc.kube.client import unless_404
from twc.kube.workloads import list_json
from twc.local import processes
from twc.local.cluster import Kube
from twc.local.environment import project_root
from twc.local.processes import ProcessRecord
from twc.local.sample import MARK

_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_FIELDS = {
    *(f"metadata.{name}" for name in ("name", "namespace", "uid")),
    *(f"spec.{name}" for name in ("nodeName", "serviceAccountName")),
    *(f"status.{ip}" for ip in ("hostIP", "podIP", "hostIPs", "podIPs")),
}
LOCAL_WORKDIR = "twc.temporal.io/local-workdir"
"""Pod annotation: the directory (under the project root) the container's command runs in."""


class PodConfigError(RuntimeError):
    """A referenced secret, config map or key is missing; trying again later may succeed."""


class WorkerPod:
    """The worker process of one pod."""

    def __init__(self, kube: Kube, pod: Mapping[str, Any], log_dir: Path | None = None) -> None:
        self.kube = kube
        self.pod = pod
        self.namespace: str = pod["metadata"]["namespace"]
        self.pod_name: str = pod["metadata"]["name"]
        self._dir = Path(tempfile.mkdtemp(prefix=f"twc-pod-{self.pod_name}-"))
        name = f"{self.namespace}.{self.pod_name}.log"
        self._log_file = log_dir / name if log_dir else self._dir / "log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.record: ProcessRecord | None = None
        self.env: dict[str, str] = {}  # the container's env the process was started with

    def _fail(self, what: str) -> PodConfigError:
        return PodConfigError(f"pod {self.namespace}/{self.pod_name}: {what}")

    def build_env(self) -> dict[str, str]:
        """The worker container's env as a kubelet resolves it (writing volumes on the way)."""
        container = worker_container(self.pod["spec"])
        mounts = self._mount_volumes(container)
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            kind = "secret" if "secretRef" in source else "config map"
            ref = source.get("secretRef") or source.get("configMapRef") or {}
            data = self._data(kind, ref) or {}
            env.update({source.get("prefix", "") + k: v.decode() for k, v in data.items()})
        for item in container.get("env") or []:
            if (value := self._resolve(item, env)) is None:
                continue
            for mount_path, local in mounts.items():
                root = mount_path.rstrip("/")
                if value == root or value.startswith(root + "/"):
                    value = str(local) + value[len(root) :]
            env[item["name"]] = value
        return env

    def _resolve(self, item: Mapping[str, Any], defined: Mapping[str, str]) -> str | None:
        if "valueFrom" not in item:
            return _expand(str(item.get("value", "")), defined)
        source = item["valueFrom"]
        if "fieldRef" in source:
            return self._field(source["fieldRef"]["fieldPath"])
        kind = "secret" if "secretKeyRef" in source else "config map"
        ref = source.get("secretKeyRef") or source.get("configMapKeyRef")
        if ref is None:
            raise self._fail(f"env {item['name']}: unsupported source {sorted(source)}")
        data = self._data(kind, ref)
        if data is not None and ref["key"] in data:
            return data[ref["key"]].decode()
        if ref.get("optional"):
            return None
        raise self._fail(f"key {ref['key']!r} not in {ref['name']}")

    def _field(self, path: str) -> str:
        if match := _FIELD_LABEL.match(path):
            return str((self.pod["metadata"].get(match.group(1)) or {}).get(match.group(2), ""))
        if path not in _FIELDS:
            raise self._fail(f"fieldRef {path}")
        top, _, name = path.partition(".")
        value = (self.pod.get(top) or {}).get(name)
        return ",".join(i["ip"] for i in value or []) if name.endswith("IPs") else str(value or "")

    def _data(self, kind: str, ref: Mapping[str, Any]) -> dict[str, bytes] | None:
        """The data of the secret or config map ``ref`` names (a volume's or an env's)."""
        name = ref["secretName"] if "secretName" in ref else ref["name"]
        core = self.kube.core
        read = core.read_namespaced_secret if kind == "secret" else core.read_namespaced_config_map
        if (obj := unless_404(read, name, self.namespace)) is None:
            if ref.get("optional"):
                return None
            raise self._fail(f"{kind} {name} not found")
        if kind == "secret":
            return {k: base64.b64decode(v) for k, v in (obj.data or {}).items()}
        binary = {k: base64.b64decode(v) for k, v in (obj.binary_data or {}).items()}
        return {**{k: v.encode() for k, v in (obj.data or {}).items()}, **binary}

    def _mount_volumes(self, container: Mapping[str, Any]) -> dict[str, Path]:
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes") or []}
        mounted: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"]) or {}
            source = volume.get("secret", volume.get("configMap"))
            if source is None:
                continue  # e.g. projected service-account tokens: not used by workers
            data = self._data("secret" if "secret" in volume else "config map", source) or {}
            local = self._dir / "volumes" / mount["name"]
            for item in source.get("items") or [{"key": k, "path": k} for k in data]:
                if item["key"] not in data:
                    raise self._fail(f"volume {mount['name']}: no key {item['key']!r}")
                path = local / item["path"]
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                path.write_bytes(data[item["key"]])
                path.chmod(0o600)
            mounted[mount["mountPath"]] = local
        return mounted

    def start(self) -> WorkerPod:
        """Start the worker process with the resolved env."""
        env = self.env = self.build_env()
        proc_env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")} | env
        own = own_command(self.pod, env)
        if own is None:
            proc_env["PYTHONPATH"] = str(project_root())
            own = [sys.executable, "-m", "twc.local.sample"], self._dir
        argv, cwd = own
        self.proc = processes.popen(argv, self._log_file, env=proc_env, cwd=cwd)
        name = f"pod {self.namespace}/{self.pod_name}"
        self.record = processes.record(name, self.proc.pid, argv, self._log_file)
        return self

    def exited(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def log_text(self) -> str:
        return self._log_file.read_text(errors="replace")

    def terminate(self) -> None:
        """SIGTERM the worker; :meth:`stop` waits for it."""
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the worker (SIGTERM, SIGKILL after ``timeout``) and remove its files."""
        if self.record is not None:
            processes.stop(self.record, timeout)
        shutil.rmtree(self._dir, ignore_errors=True)


def worker_container(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's worker container: the one named ``worker``, else the first."""
    containers = pod_spec["containers"]
    return dict(next((c for c in containers if c.get("name") == "worker"), containers[0]))


def own_command(pod: Mapping[str, Any], env: Mapping[str, str]) -> tuple[list[str], Path] | None:
    """The worker container's command and directory (:data:`LOCAL_WORKDIR`, else
    ``workingDir``) when both exist here; ``None``: the pod runs the sample worker."""
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
    """``$(VAR)`` references expanded as a kubelet does (``$$`` escapes, undefined stay)."""

    def sub(match: re.Match[str]) -> str:
        return "$" if match.group(0) == "$$" else defined.get(match.group(1), match.group(0))

    return _VAR_REF.sub(sub, value)


def list_pods(kube: Kube, namespace: str | None, selector: str) -> list[dict[str, Any]]:
    """Pods as the API server's JSON (camelCase, as in a manifest)."""
    if namespace:
        return list_json(partial(kube.core.list_namespaced_pod, namespace), selector)
    return list_json(kube.core.list_pod_for_all_namespaces, selector)


def is_running(pod: Mapping[str, Any]) -> bool:
    """True for a pod on a node, Running, not being deleted: one a kubelet runs."""
    return bool(
        (pod.get("spec") or {}).get("nodeName")
        and (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    )


def marks(log_text: str) -> dict[str, float]:
    """The start steps a sample worker printed, with their wall-clock times."""
    found: dict[str, float] = {}
    for parts in (line.split() for line in log_text.splitlines()):
        if len(parts) == 3 and parts[0] == MARK:
            found.setdefault(parts[1], float(parts[2]))  # in order, each step's first time
    return found
