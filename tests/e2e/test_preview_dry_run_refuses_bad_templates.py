"""Pod fields Kubernetes rejects fail ``twc preview`` and ``twc up`` before anything is applied.

twc passes a worker's ``template`` through, so the real kube-apiserver judges it: each
worker's Deployment is sent as a server-side dry run, and its refusal names the fleet
file, the worker and the field where the user wrote it. The shorthand ``resources``
never gets that far (the fleet validation refuses requests above limits itself).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc
from tests.e2e.native import temporal_worker
from twc.cli import preview as preview_cmd
from twc.cli import up as up_cmd
from twc.kube.dryrun import dry_run_fleet
from twc.local.environment import LocalEnvironment
from twc.spec import load_fleet_file

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]


def _worker(namespace: str, task_queue: str, **container: Any) -> dict[str, Any]:
    return {
        "name": "bad",
        "namespace": namespace,
        "taskQueueName": task_queue,
        "template": {
            "spec": {
                "containers": [
                    {"name": "sidecar", "image": "registry.example/sidecar:1"},
                    {"name": "worker", "image": "registry.example/worker:1.4.2", **container},
                ]
            }
        },
    }


def _preview(fs: FleetStack) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        fs.name, fleet_file=str(fs.fleet_file), out=out, err=err, cluster_objects=False
    )
    return code, out.getvalue(), err.getvalue()


CASES = [
    pytest.param(
        {"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
        "workers[0].template.spec.containers[1].resources.requests",
        "must be less than or equal to cpu limit",
        id="requests above limits",
    ),
    pytest.param(
        {"readinessProbe": {"periodSeconds": 5}},
        "workers[0].template.spec.containers[1].readinessProbe",
        "must specify a handler type",
        id="a probe without a handler",
    ),
    pytest.param(
        {"readinessProb": {"exec": {"command": ["true"]}}},
        "workers[0].template.spec.containers[1].readinessProb",
        "unknown field",
        id="an unknown field",
    ),
]


@pytest.mark.parametrize(("container", "field", "reason"), CASES)
def test_preview_and_up_refuse_what_the_api_server_refuses_and_apply_nothing(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
    container: dict[str, Any],
    field: str,
    reason: str,
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[_worker(namespace, task_queue, **container)],
    )
    fs = fleet_stack(fleet)
    code, out, err = _preview(fs)
    assert code == 1, err
    (line,) = [line for line in err.splitlines() if field in line]
    assert line.startswith(f"{fs.fleet_file}: {field}")
    assert f"worker {namespace}/bad: the API server refuses its Deployment" in line
    assert reason in line
    assert "nothing was applied" in err
    assert out == ""  # the engine never ran

    assert up_cmd.run_up(fs.name, str(fs.fleet_file), out=io.StringIO(), cluster_objects=False) == 1
    assert kube.get_deployment(namespace, "bad") is None
    assert not (fs.stack().export_stack().deployment or {}).get("resources")


def test_shorthand_resources_are_refused_by_validation_before_any_dry_run(
    local_env: LocalEnvironment,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    worker = {
        "name": "short",
        "namespace": namespace,
        "taskQueueName": task_queue,
        "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
    }
    fs = fleet_stack(fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[worker]))
    code, _, err = _preview(fs)
    assert code == 1
    assert "workers[0].resources: requests.cpu (2) must not exceed limits.cpu (1)" in err
    assert "the API server refuses" not in err


def test_only_changed_workers_are_sent_again(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    good = _worker(
        namespace, task_queue, resources={"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}
    )
    fleet = fleet_doc(namespace, host_port=local_env.temporal_address(), workers=[good])
    fs = fleet_stack(fleet)
    assert up_cmd.run_up(fs.name, str(fs.fleet_file), out=io.StringIO(), cluster_objects=False) == 0
    fleet_model = load_fleet_file(str(fs.fleet_file))
    key = f"{namespace}/bad"

    def run() -> Any:
        return dry_run_fleet(fleet_model, file="f.yaml", api_client=kube.api_client)

    result = run()
    # Applied as desired: the live Deployment holds every field, nothing is sent.
    assert key in result.unchanged, result
    assert key not in result.checked, result
    assert not result.issues

    good["template"]["spec"]["containers"][1]["args"] = ["--once"]
    fs.write(fleet)
    fleet_model = load_fleet_file(str(fs.fleet_file))
    result = run()
    assert key in result.checked, result
    assert not result.issues, result
    # The replace was a dry run: the live Deployment still has no args.
    dep = kube.get_deployment(namespace, "bad")
    assert dep is not None
    assert "args" not in next(
        c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "worker"
    )


def test_a_temporalworker_objects_bad_template_fails_preview_named_in_the_object(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
) -> None:
    # The CRD keeps a template as written; the API server's dry run is what judges it.
    body = temporal_worker(namespace, "native-bad", task_queue, {"name": "unused"})
    body["spec"] = {
        "taskQueueName": task_queue,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "worker",
                        "image": "registry.example/worker:1.4.2",
                        "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
                    }
                ]
            }
        },
    }
    kube.custom.create_namespaced_custom_object(
        "temporal.kmsvc.io", "v1", namespace, "temporalworkers", body
    )
    fs = fleet_stack(fleet_doc(namespace, host_port=local_env.temporal_address()))
    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        fs.name, fleet_file=str(fs.fleet_file), out=out, err=err, cluster_objects=True
    )
    assert code == 1, err.getvalue()
    expected = (
        f"temporal.kmsvc.io/v1 TemporalWorker {namespace}/native-bad: "
        "spec.template.spec.containers[0].resources.requests: "
        f"worker {namespace}/native-bad: the API server refuses its Deployment: "
    )
    assert expected in err.getvalue()
    assert "must be less than or equal to memory limit" in err.getvalue()
    assert kube.get_deployment(namespace, "native-bad") is None
