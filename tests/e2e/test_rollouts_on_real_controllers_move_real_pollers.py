"""``twc local up --run-workers`` is a real cluster for twc's Deployments, end to end.

On an environment of its own, started and stopped through the ``twc local`` command: a
Deployment created by ``twc up`` gets its ReplicaSet from kube-controller-manager (its
managed fields say so), its pods are placed on KWOK's simulated nodes by kube-scheduler
and turned Ready by KWOK, and a real worker process per pod polls the task queue (the
Temporal CLI's ``task-queue describe`` lists one poller per pod). An image change rolls
the pods with the Deployment's own surge (one extra replica, never one fewer Ready), and
scaling 3 → 1 leaves one poller. ``twc local down`` leaves no worker process behind.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import TEST_BED_TOOLS, require_tools
from tests.helpers import assert_eventually
from twc.local import processes
from twc.local.cluster import NODE_ANNOTATION, NODES, Kube
from twc.local.environment import project_root
from twc.local.processes import recorded

pytestmark = pytest.mark.e2e

NAMESPACE = "rollouts"
WORKER = "echo"
SELECTOR = f"twc.temporal.io/worker={WORKER}"


def _twc(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "twc", *args],
        cwd=project_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"twc {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def env_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An environment of this module's own, with pod workers: `twc local up --run-workers`."""
    require_tools(*TEST_BED_TOOLS)
    directory = tmp_path_factory.mktemp("twc-run-workers")
    try:
        _twc("local", "up", "--run-workers", "--dir", str(directory))
        yield directory
    finally:
        _twc("local", "down", "--dir", str(directory))


@pytest.fixture(scope="module")
def shell_env(env_dir: Path) -> dict[str, str]:
    """A shell's environment after ``eval "$(twc local env)"``."""
    exports = _twc("local", "env", "--dir", str(env_dir))
    env = dict(os.environ)
    for line in exports.splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = shlex.split(value)[0]
    return env


def _fleet(address: str, task_queue: str, image: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "connectionRef": {
                "objectRef": {"apiGroup": "temporal.io", "kind": "ClusterConnection", "name": "l"}
            },
        },
        "clusterConnections": [{"name": "l", "hostPort": address}],
        "workers": [
            {
                "name": WORKER,
                "namespace": NAMESPACE,
                "taskQueueName": task_queue,
                "replicas": replicas,
            }
        ],
    }


def _pods(kube: Kube) -> list[dict[str, Any]]:
    response = kube.core.list_namespaced_pod(
        NAMESPACE, label_selector=SELECTOR, _preload_content=False
    )
    return list(json.loads(response.data)["items"])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _settled(kube: Kube, count: int) -> list[dict[str, Any]]:
    """The live pods once there are ``count`` of them, all Ready (else empty)."""
    pods = _live(_pods(kube))
    return pods if len(pods) == count and all(_ready(p) for p in pods) else []


def _poller_pods(temporal: str, address: str, task_queue: str) -> set[str]:
    """The pods (by name) the Temporal CLI lists as workflow pollers of the task queue."""
    out = subprocess.run(
        [
            temporal,
            "task-queue",
            "describe",
            "--task-queue",
            task_queue,
            "--task-queue-type",
            "workflow",
            "--address",
            address,
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pollers = json.loads(out)["pollers"] or []
    # The sample worker's identity is pod@node (the SDK's default would be pid@host).
    return {p["identity"].split("@")[0] for p in pollers if p["taskQueueType"] == "workflow"}


def _managers(obj: dict[str, Any]) -> set[tuple[str, str]]:
    """(manager, subresource) of each managed-fields entry."""
    return {(m["manager"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]}


class Follow:
    """Follows one kind of the worker's objects (a list, then a watch) and, until stopped,
    hands every state of them to ``measure``."""

    def __init__(
        self,
        lister: Callable[..., Any],
        measure: Callable[[list[dict[str, Any]]], None],
    ) -> None:
        self._lister = lister
        self._measure = measure
        self._lock = threading.Lock()
        self._stopped = False
        self._failure: BaseException | None = None
        response = lister(NAMESPACE, label_selector=SELECTOR, _preload_content=False)
        body = json.loads(response.data)
        self._objects = {o["metadata"]["uid"]: o for o in body["items"]}
        self._version = body["metadata"]["resourceVersion"]
        measure(list(self._objects.values()))
        threading.Thread(target=self._follow, daemon=True).start()

    def _follow(self) -> None:
        from kubernetes import watch

        w = watch.Watch()
        try:
            for event in w.stream(
                self._lister,
                NAMESPACE,
                label_selector=SELECTOR,
                resource_version=self._version,
                timeout_seconds=300,
            ):
                obj = event["raw_object"]
                with self._lock:
                    if self._stopped:
                        w.stop()
                        return
                    if event["type"] == "DELETED":
                        self._objects.pop(obj["metadata"]["uid"], None)
                    else:
                        self._objects[obj["metadata"]["uid"]] = obj
                    self._measure(list(self._objects.values()))
        except Exception as exc:  # noqa: BLE001 - a watch that ended early fails stop() below
            with self._lock:
                self._failure = exc
        with self._lock:
            if not self._stopped and self._failure is None:
                self._failure = RuntimeError("the watch ended before the rollout did")

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            assert self._failure is None, f"the watch failed: {self._failure!r}"


class RolloutWatch:
    """The extremes of a rollout: the most replicas the worker's ReplicaSets asked for at
    once (the surge as the Deployment controller keeps it), the most pods alive at once
    and the fewest of them Ready."""

    def __init__(self, kube: Kube) -> None:
        self.most_asked = 0
        self.most_live = 0
        self.fewest_ready = sys.maxsize
        self._sets = Follow(kube.apps.list_namespaced_replica_set, self._count_sets)
        self._pods = Follow(kube.core.list_namespaced_pod, self._count_pods)

    def _count_sets(self, sets: list[dict[str, Any]]) -> None:
        asked = sum(s["spec"]["replicas"] for s in sets)
        self.most_asked = max(self.most_asked, asked)

    def _count_pods(self, pods: list[dict[str, Any]]) -> None:
        live = _live(pods)
        self.most_live = max(self.most_live, len(live))
        self.fewest_ready = min(self.fewest_ready, sum(1 for p in live if _ready(p)))

    def stop(self) -> None:
        self._sets.stop()
        self._pods.stop()


def _forget_stack(pulumi: str, stack: str, env: dict[str, str]) -> None:
    """Remove the stack and its config file from the project (its backend goes with the
    environment's directory)."""
    subprocess.run(
        [pulumi, "stack", "rm", "--yes", "--force", "--stack", stack],
        cwd=project_root(),
        env=env,
        capture_output=True,
        check=False,
    )
    (project_root() / f"Pulumi.{stack}.yaml").unlink(missing_ok=True)


def test_twc_up_on_real_controllers_rolls_and_scales_real_pollers(
    env_dir: Path,
    shell_env: dict[str, str],
    tmp_path: Path,
    real_tool: Callable[[str], str],
    request: pytest.FixtureRequest,
) -> None:
    temporal = real_tool("temporal")
    kube = Kube(shell_env["KUBECONFIG"])
    kube.ensure_namespace(NAMESPACE)
    address = shell_env["TEMPORAL_ADDRESS"]
    task_queue = f"tq-{uuid.uuid4().hex[:10]}"
    fleet_file = tmp_path / "fleet.yaml"
    # Not the `local` stack: its config file in the project is the developer's own.
    stack = f"e2e-rollouts-{uuid.uuid4().hex[:6]}"
    request.addfinalizer(lambda: _forget_stack(real_tool("pulumi"), stack, shell_env))

    def up(image: str, replicas: int) -> None:
        fleet_file.write_text(yaml.safe_dump(_fleet(address, task_queue, image, replicas)))
        _twc("up", "--stack", stack, "--fleet-file", str(fleet_file), env=shell_env)

    # 1. Created by `twc up`: the ReplicaSet and the pods come from the real controllers.
    up("localhost/twc-sample-worker:1", 3)
    dep = kube.get_deployment(NAMESPACE, WORKER)
    assert dep is not None
    assert dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    conditions = {c["type"]: c for c in dep["status"]["conditions"]}
    assert conditions["Available"]["status"] == "True"
    assert conditions["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert ("kube-controller-manager", "status") in _managers(dep)
    (rs,) = kube.apps.list_namespaced_replica_set(NAMESPACE, label_selector=SELECTOR).items
    rs = kube.api_client.sanitize_for_serialization(rs)
    assert rs["metadata"]["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]
    assert ("kube-controller-manager", "") in _managers(rs), _managers(rs)

    pods = _live(_pods(kube))
    assert len(pods) == 3
    for pod in pods:
        assert pod["spec"]["nodeName"] in NODES, pod["spec"]
        assert _ready(pod), pod["status"]
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["podIP"]
        assert ("kwok", "status") in _managers(pod), _managers(pod)
        scheduled = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert scheduled["PodScheduled"] == "True"
    for name in {p["spec"]["nodeName"] for p in pods}:
        node = kube.core.read_node(name)
        assert node.metadata.annotations[NODE_ANNOTATION] == "fake"
    names = {p["metadata"]["name"] for p in pods}

    # A real worker process per pod polls: one poller per replica, named by its pod.
    assert_eventually(
        lambda: _poller_pods(temporal, address, task_queue) == names,
        timeout=60,
        message="the pollers never matched the pods",
    )
    workers = recorded(env_dir / "pod-workers.json")
    assert len(workers) == 3
    assert all(processes.is_alive(r) for r in workers)
    assert {r.name for r in workers} == {f"pod {NAMESPACE}/{n}" for n in names}

    # 2. An image change rolls the pods with the Deployment's surge: maxSurge 25% of 3
    # rounds up to one extra replica, maxUnavailable 0 keeps three Ready throughout. The
    # controller keeps the surge in its ReplicaSets' replicas; the pods follow each
    # ReplicaSet on its own, so for a moment the old set's pod may not yet be deleted
    # when the new set's next one is created (five alive, seen in CI): the pods only
    # show that new ones came before old ones went.
    watch = RolloutWatch(kube)
    up("localhost/twc-sample-worker:2", 3)
    rolled = assert_eventually(
        lambda: _settled(kube, 3), timeout=60, message="the rollout never settled on three pods"
    )
    watch.stop()
    assert watch.most_asked == 4, f"{watch.most_asked} replicas asked at most, not 3 + 1"
    assert watch.most_live >= 4, f"{watch.most_live} pods at most: no pod came before one went"
    assert watch.fewest_ready == 3, f"Ready pods dropped to {watch.fewest_ready}"
    new_names = {p["metadata"]["name"] for p in rolled}
    assert not new_names & names
    assert all(
        p["spec"]["containers"][0]["image"] == "localhost/twc-sample-worker:2" for p in rolled
    )
    sets = {
        r.metadata.annotations["deployment.kubernetes.io/revision"]: r
        for r in kube.apps.list_namespaced_replica_set(NAMESPACE, label_selector=SELECTOR).items
    }
    assert set(sets) == {"1", "2"}
    assert sets["1"].spec.replicas == 0
    assert sets["2"].spec.replicas == 3
    assert_eventually(
        lambda: _poller_pods(temporal, address, task_queue) == new_names,
        timeout=60,
        message="the pollers never moved to the new pods",
    )

    # 3. Scaling 3 → 1 leaves one pod and one poller.
    up("localhost/twc-sample-worker:2", 1)
    (last,) = assert_eventually(
        lambda: _settled(kube, 1), timeout=60, message="the Deployment never scaled to one pod"
    )
    assert_eventually(
        lambda: _poller_pods(temporal, address, task_queue) == {last["metadata"]["name"]},
        timeout=60,
        message="scaled to one pod, but not to one poller",
    )
    assert_eventually(
        lambda: len(recorded(env_dir / "pod-workers.json")) == 1,
        timeout=30,
        message="the scaled-away pods' worker processes were never stopped",
    )

    # 4. `twc local down` stops every worker process with the environment.
    every = recorded(env_dir / "pod-workers.json")
    assert every
    assert all(processes.is_alive(r) for r in every)
    kube.close()
    _twc("local", "down", "--dir", str(env_dir))
    assert not any(processes.is_alive(r) for r in every)
    assert recorded(env_dir / "pod-workers.json") == []
