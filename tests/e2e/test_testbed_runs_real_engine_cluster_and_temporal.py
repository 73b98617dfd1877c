"""The test bed itself, end to end: the real Pulumi engine (CLI + language host + kubernetes
provider + a Python dynamic provider) against the real kube-apiserver, whose Deployment
is rolled out by the real controllers onto KWOK's simulated nodes, and a real temporalio
worker started from the pod's env executing a workflow on the real Temporal dev
server."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from pulumi import automation as auto

from tests.helpers import assert_eventually
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

PROGRAM = Path(__file__).parent / "programs" / "testbed"


def _stack(pulumi_env: dict[str, str], name: str) -> auto.Stack:
    return auto.create_stack(
        name,
        work_dir=str(PROGRAM),
        opts=auto.LocalWorkspaceOptions(env_vars=pulumi_env),
    )


def test_up_preview_destroy_and_a_workflow_on_a_fixture_worker(
    local_env: LocalEnvironment,
    kube: object,
    pulumi_env: dict[str, str],
    namespace: str,
    task_queue: str,
    worker_pods: object,
) -> None:
    stack = _stack(pulumi_env, f"testbed-{uuid.uuid4().hex[:6]}")
    try:
        stack.set_all_config(
            {
                "namespace": auto.ConfigValue(namespace),
                "temporalAddress": auto.ConfigValue(local_env.temporal_address()),
                "taskQueue": auto.ConfigValue(task_queue),
                "greeting": auto.ConfigValue("hello"),
            }
        )
        up = stack.up(on_output=print)
        assert up.summary.result == "succeeded"
        changes: dict[str, int] = dict(up.summary.resource_changes or {})  # type: ignore[arg-type]
        assert changes.get("create", 0) >= 4  # stack + 3 resources

        # The objects really exist in the API server, with the program's values.
        cm = kube.core.read_namespaced_config_map("greeting", namespace)  # type: ignore[attr-defined]
        assert cm.data == {"greeting": "hello"}
        dep = kube.get_deployment(namespace, "testbed-worker")  # type: ignore[attr-defined]
        env = {
            e["name"]: e.get("value")
            for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["TEMPORAL_TASK_QUEUE"] == task_queue
        # The dynamic provider ran in the engine's provider process, and its output
        # flowed into the Deployment.
        digest = up.outputs["digest"].value
        assert dep["spec"]["template"]["metadata"]["annotations"]["testbed/digest"] == digest
        assert up.outputs["providerPid"].value != os.getpid()
        # pulumi-kubernetes' await saw the controllers' rollout complete.
        assert dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
        assert dep["status"]["availableReplicas"] == 1

        # A change shows in a real preview, and nothing is applied by it.
        stack.set_config("greeting", auto.ConfigValue("bonjour"))
        preview = stack.preview()
        summary: dict[str, int] = dict(preview.change_summary)  # type: ignore[arg-type]
        assert summary.get("update", 0) >= 2  # ConfigMap, probe, Deployment
        cm = kube.core.read_namespaced_config_map("greeting", namespace)  # type: ignore[attr-defined]
        assert cm.data == {"greeting": "hello"}

        # A real worker started from the Deployment's env runs a workflow.
        pod = worker_pods(namespace, "testbed-worker")  # type: ignore[operator]
        result = asyncio.run(_run_echo(local_env.temporal_address(), task_queue))
        assert pod.pod_name.startswith("testbed-worker-")
        assert result == f"ping (from {pod.pod_name})", pod.log_text()

        destroy = stack.destroy()
        assert destroy.summary.result == "succeeded"
        assert kube.get_deployment(namespace, "testbed-worker") is None  # type: ignore[attr-defined]
        names = [c.metadata.name for c in kube.core.list_namespaced_config_map(namespace).items]  # type: ignore[attr-defined]
        assert "greeting" not in names
    finally:
        stack.workspace.remove_stack(stack.name, force=True)


async def _run_echo(address: str, task_queue: str) -> str:
    from temporalio.client import Client

    from twc.local.sample import EchoWorkflow

    client = await Client.connect(address)
    return await client.execute_workflow(
        EchoWorkflow.run,
        "ping",
        id=f"echo-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        execution_timeout=__import__("datetime").timedelta(seconds=60),
    )


def test_local_up_is_idempotent_and_reports_a_crashed_component(
    local_env: LocalEnvironment,
) -> None:
    before = {s.name: s.pid for s in local_env.status()}
    assert all(s.running for s in local_env.status())

    # A second `up` changes nothing.
    assert local_env.up(progress=lambda m: None) == []
    assert {s.name: s.pid for s in local_env.status()} == before

    # A crash is reported (with the log tail) and the component is started again.
    local_env.stop_component("kube-scheduler")
    assert not next(s for s in local_env.status() if s.name == "kube-scheduler").running
    crashes = local_env.up(progress=lambda m: None)
    assert len(crashes) == 1
    assert crashes[0].startswith("kube-scheduler (pid")
    assert_eventually(lambda: all(s.running for s in local_env.status()), timeout=10)


def test_the_test_beds_temporal_gives_each_task_queue_one_partition(
    local_env: LocalEnvironment,
) -> None:
    # Asking about a queue loads all of its partitions; with the default four, the dev
    # server could not hold the 5000 queues of the benchmark's largest fleet.
    counts = asyncio.run(_partitions(local_env.temporal_address(), f"tq-{uuid.uuid4().hex[:8]}"))
    assert counts == {"workflow": 1, "activity": 1}


async def _partitions(address: str, task_queue: str) -> dict[str, int]:
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import ListTaskQueuePartitionsRequest
    from temporalio.client import Client

    client = await Client.connect(address)
    response = await client.workflow_service.list_task_queue_partitions(
        ListTaskQueuePartitionsRequest(namespace="default", task_queue=TaskQueue(name=task_queue))
    )
    return {
        "workflow": len(response.workflow_task_queue_partitions),
        "activity": len(response.activity_task_queue_partitions),
    }


def test_the_test_beds_temporal_persists_idle_queues_every_five_minutes(
    local_env: LocalEnvironment,
) -> None:
    # Every loaded queue writes its ack level on this interval, moved or not: at 5000
    # workers, once a minute was 167 SQLite transactions a second on the daemon's cores.
    temporal = next(s for s in local_env.status() if s.name == "temporal")
    assert temporal.running
    assert temporal.pid is not None
    argv = Path(f"/proc/{temporal.pid}/cmdline").read_bytes().split(b"\0")
    assert b'--dynamic-config-value=matching.updateAckInterval="5m"' in argv
