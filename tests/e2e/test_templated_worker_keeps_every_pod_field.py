"""A worker written as a full pod template gets all of it, twc's env beside it, and polls.

Through ``twc up`` on the real engine and API server: command and args, env from a
Secret and a ConfigMap (``valueFrom`` and ``envFrom``), a volume, a readiness probe, a
sidecar and a native sidecar all reach the Deployment next to twc's TEMPORAL_* env; a
real temporalio worker started from that Deployment's env polls the task queue; and the
Secret's value never shows in the preview nor in the stack's state (the Deployment holds
a reference, not the value).
"""

from __future__ import annotations

import base64
import io
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc
from tests.helpers import assert_eventually
from twc.cli import preview as preview_cmd
from twc.cli import up as up_cmd
from twc.kube.client import status_of
from twc.local import workerpod
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

SECRET_VALUE = f"TEMPLATECANARY-{uuid.uuid4().hex}"


def _template() -> dict[str, Any]:
    return {
        "metadata": {"labels": {"team": "payments"}, "annotations": {"example.com/owner": "pay"}},
        "spec": {
            "priorityClassName": "workers",
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"team": "payments"}},
                }
            ],
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 2000},
            "volumes": [{"name": "app-config", "configMap": {"name": "app-config"}}],
            "initContainers": [
                {"name": "mesh", "image": "registry.example/mesh:1", "restartPolicy": "Always"}
            ],
            "containers": [
                {"name": "metrics", "image": "registry.example/metrics:1"},
                {
                    "name": "worker",
                    "image": "registry.example/payments:2.1.0",
                    "command": ["python", "-m", "payments.worker"],
                    "args": ["--log-level", "debug"],
                    "env": [
                        {
                            "name": "DB_PASSWORD",
                            "valueFrom": {
                                "secretKeyRef": {"name": "app-secret", "key": "password"}
                            },
                        },
                        {
                            "name": "REGION",
                            "valueFrom": {
                                "configMapKeyRef": {"name": "app-config", "key": "region"}
                            },
                        },
                    ],
                    "envFrom": [{"configMapRef": {"name": "app-config"}, "prefix": "APP_"}],
                    "volumeMounts": [{"name": "app-config", "mountPath": "/etc/payments"}],
                    "ports": [{"name": "health", "containerPort": 8080}],
                    "readinessProbe": {
                        "httpGet": {"path": "/ready", "port": "health"},
                        "periodSeconds": 5,
                    },
                    "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}},
                },
            ],
        },
    }


def _ensure_priority_class(kube: Any, name: str) -> None:
    """The cluster's PriorityClass the template names: without it the API server refuses
    the worker's pods, and the Deployment never turns available."""
    from kubernetes import client

    body = {"metadata": {"name": name}, "value": 1000, "description": "worker pods"}
    try:
        client.SchedulingV1Api(kube.api_client).create_priority_class(body)
    except Exception as exc:
        if status_of(exc) != 409:
            raise


def test_a_templated_worker_gets_every_field_beside_twcs_env_and_polls(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    fleet_stack: Callable[..., FleetStack],
    worker_pods: Callable[..., Any],
) -> None:
    _ensure_priority_class(kube, "workers")
    kube.core.create_namespaced_secret(
        namespace, {"metadata": {"name": "app-secret"}, "stringData": {"password": SECRET_VALUE}}
    )
    kube.core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {"name": "app-config"},
            "data": {"region": "eu-west-1", "MODE": "batch", "settings.yaml": "a: 1\n"},
        },
    )
    template = _template()
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[
            {
                "name": "payments",
                "namespace": namespace,
                "taskQueueName": task_queue,
                "template": template,
            }
        ],
    )
    fs = fleet_stack(fleet)

    # The preview (the API server's dry run included) shows the new worker, no secret.
    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        fs.name, fmt="json", fleet_file=str(fs.fleet_file), out=out, err=err, cluster_objects=False
    )
    assert code == 0, err.getvalue()
    assert "payments" in out.getvalue()

    assert up_cmd.run_up(fs.name, str(fs.fleet_file), out=io.StringIO(), cluster_objects=False) == 0
    dep = kube.get_deployment(namespace, "payments")
    assert dep is not None
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    worker, user = containers["worker"], template["spec"]["containers"][1]
    for key in ("image", "command", "args", "envFrom"):
        assert worker[key] == user[key], key
    assert worker["ports"] == [{"name": "health", "containerPort": 8080, "protocol": "TCP"}]
    assert worker["readinessProbe"]["httpGet"] == {
        "path": "/ready",
        "port": "health",
        "scheme": "HTTP",
    }
    assert worker["resources"] == user["resources"]
    env = {e["name"]: e for e in worker["env"]}
    assert env["DB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "app-secret",
        "key": "password",
    }
    assert env["REGION"]["valueFrom"]["configMapKeyRef"] == {"name": "app-config", "key": "region"}
    assert env["TEMPORAL_ADDRESS"]["value"] == local_env.temporal_address()
    assert env["TEMPORAL_TASK_QUEUE"]["value"] == task_queue
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert {"name": "app-config", "mountPath": "/etc/payments"}.items() <= worker["volumeMounts"][
        0
    ].items()
    assert containers["metrics"]["image"] == "registry.example/metrics:1"
    assert "env" not in containers["metrics"]
    assert [c["name"] for c in spec["initContainers"]] == ["mesh", "wait-for-temporal"]
    assert spec["initContainers"][0]["restartPolicy"] == "Always"
    assert spec["priorityClassName"] == "workers"
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert spec["securityContext"]["fsGroup"] == 2000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (volume,) = spec["volumes"]
    assert (volume["name"], volume["configMap"]["name"]) == ("app-config", "app-config")
    assert pod["metadata"]["labels"]["team"] == "payments"
    assert pod["metadata"]["labels"]["twc.temporal.io/worker"] == "payments"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "pay"
    assert "temporal.io/connection-spec-hash" in pod["metadata"]["annotations"]

    # A real temporalio worker from that Deployment's env: the Secret and ConfigMap
    # values arrive (through valueFrom and envFrom), and it polls.
    started = worker_pods(namespace, "payments")
    assert started.env["DB_PASSWORD"] == SECRET_VALUE
    assert started.env["REGION"] == "eu-west-1"
    assert started.env["APP_MODE"] == "batch"
    assert started.env["TEMPORAL_TASK_QUEUE"] == task_queue
    assert_eventually(
        lambda: "worker polling" in started.log_text(),
        timeout=60,
        message=f"the worker never polled: {started.log_text()}",
    )
    # It printed each step of its start, in order (what the benchmark's Queue figure
    # reads to say where a worker's start goes).
    steps = workerpod.marks(started.log_text())
    assert list(steps) == ["imported", "connected", "built"]
    assert steps["imported"] <= steps["connected"] <= steps["built"]
    _assert_pollers(local_env, task_queue)

    # Neither the preview of a change nor the stack's state holds the Secret's value.
    template["spec"]["containers"][1]["args"] = ["--log-level", "info"]
    fs.write(fleet)
    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        fs.name,
        fleet_file=str(fs.fleet_file),
        out=out,
        err=err,
        detailed=True,
        cluster_objects=False,
    )
    assert code == 2, err.getvalue()
    state = json.dumps(fs.stack().export_stack().deployment)
    needles = (SECRET_VALUE, base64.b64encode(SECRET_VALUE.encode()).decode())
    for text in (out.getvalue(), err.getvalue(), state):
        assert not [n for n in needles if n in text]
    assert "app-secret" in state  # the reference is there, the value is not


def _assert_pollers(local_env: LocalEnvironment, task_queue: str) -> None:
    import asyncio

    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.client import Client

    async def pollers() -> int:
        client = await Client.connect(local_env.temporal_address())
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace="default",
                task_queue=TaskQueue(name=task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
        return len(response.pollers)

    assert_eventually(
        lambda: asyncio.run(pollers()) > 0, timeout=60, message="no poller on the queue"
    )
