"""On the embedded environment a pod's worker container runs its own command when that
can run on this machine, with the pod's resolved env, in the code's directory; any
other pod runs the built-in sample worker.

The decision (:func:`own_command`) on pod objects, and one real process started from a
pod (a shell command writing what it got), with a fake API serving the pod's secret.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.helpers import assert_eventually
from tests.unit.test_worker_pod_env_resolves_like_a_kubelet import _worker_pod
from twc.local.environment import project_root
from twc.local.workerpod import LOCAL_WORKDIR, own_command


def _pod(container: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "greeter-5d8c-x2x",
            "namespace": "apps",
            "uid": "u-1",
            "annotations": annotations or {},
        },
        "spec": {
            "nodeName": "twc-node-1",
            "containers": [
                {"name": "metrics", "image": "m:1", "command": ["exporter"]},
                {"name": "worker", "image": "registry.example/greeter:1.0", **container},
            ],
        },
        "status": {"phase": "Running"},
    }


def test_a_python_command_runs_in_the_annotated_directory_on_this_environments_python() -> None:
    pod = _pod(
        {"command": ["python", "-m", "greeting_worker"], "workingDir": "/app"},
        {LOCAL_WORKDIR: "examples/greeting"},
    )
    assert own_command(pod, {}) == (
        [sys.executable, "-m", "greeting_worker"],
        project_root() / "examples" / "greeting",
    )


def test_an_existing_working_dir_is_the_code_directory_and_vars_expand(tmp_path: Path) -> None:
    container = {
        "command": ["sh", "-c"],
        "args": ["echo $(TEMPORAL_TASK_QUEUE) $$(HOME)"],
        "workingDir": str(tmp_path),
    }
    found = own_command(_pod(container), {"TEMPORAL_TASK_QUEUE": "greetings"})
    assert found is not None
    argv, directory = found
    assert argv[1:] == ["-c", "echo greetings $(HOME)"]
    assert Path(argv[0]).name == "sh"
    assert directory == tmp_path


def test_pods_whose_command_cannot_run_here_run_the_sample_worker(tmp_path: Path) -> None:
    cases: list[dict[str, Any]] = [
        {"image": "registry.example/greeter:1.0"},  # the image's own entrypoint
        {"command": ["python", "-m", "payments.worker"]},  # no code directory
        {"command": ["python", "-m", "payments.worker"], "workingDir": "/app/not-here"},
        {"command": ["greeter-that-is-not-installed"], "workingDir": str(tmp_path)},
        {"command": ["./bin/greeter"], "workingDir": str(tmp_path)},
    ]
    for container in cases:
        assert own_command(_pod(container), {}) is None, container


def test_the_own_command_gets_the_pods_resolved_env_in_its_directory(tmp_path: Path) -> None:
    script = 'printf "%s %s %s" "$TEMPORAL_TASK_QUEUE" "$KEY" "$POD_NAME" > got'
    pod = _pod(
        {
            "command": ["sh", "-c", script],
            "env": [
                {"name": "TEMPORAL_TASK_QUEUE", "value": "greetings"},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "key", "key": "api-key"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
        },
        {LOCAL_WORKDIR: str(tmp_path)},
    )
    worker = _worker_pod(pod).start()
    try:
        got = tmp_path / "got"
        assert_eventually(lambda: worker.exited() and got.exists(), timeout=30)
        assert got.read_text() == "greetings k-1 greeter-5d8c-x2x"
    finally:
        worker.stop()
