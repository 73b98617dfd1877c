"""Separate credentials for twc and for workers (``twcCredentials``), on the real daemon,
engine, controllers and Temporal, with a real temporalio worker per pod.

Temporal sits behind a TLS front that demands a client certificate and records which
certificate each call came with. The connection gives workers the certificate ``worker``
and twc the certificate ``twc``. A versioned worker rolls out: twc's own calls (the
task-queue check, describing and routing the worker deployment) all come with ``twc``'s
certificate, the worker's polls with ``worker``'s, and the worker never makes a routing
call; a workflow runs on it; its Deployment names only the workers' secret.

Then twc's credential is revoked (its Secret deleted): the worker's status says
``TwcCredentialInvalid``, naming twc's secret, while its pods, untouched, still run
workflows; restored, the status says the pollers are registered again.

Then twc's credential is rotated (a certificate of another name in the same Secret): twc's
calls move to the new certificate, the client of the old one is dropped from the cache,
and no call comes with the old certificate any more.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually
from tests.e2e.mtls_front import SERVER_NAME, Authority, MutualTLSFront
from tests.e2e.native import Kubectl, Kubelet
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

ONE_UP = 180.0
ROUTING = {
    "DescribeWorkerDeployment",
    "SetWorkerDeploymentCurrentVersion",
    "SetWorkerDeploymentRampingVersion",
    "DescribeTaskQueue",
}


@pytest.fixture
def front(local_env: LocalEnvironment) -> Iterator[tuple[Authority, MutualTLSFront]]:
    authority = Authority()
    served = MutualTLSFront(authority, local_env.temporal_address())
    yield authority, served
    served.close()


async def _echo(address: str, task_queue: str) -> str:
    client = await Client.connect(address)
    result: str = await client.execute_workflow(
        "EchoWorkflow", "hi", id=f"echo-{uuid.uuid4().hex}", task_queue=task_queue
    )
    return result


def _queue_condition(kubectl: Kubectl, namespace: str) -> dict[str, Any]:
    view = kubectl.get_json("temporalworker", "orders", "-n", namespace) or {}
    conditions = view.get("status", {}).get("conditions") or []
    found = [c for c in conditions if c["type"] == "TemporalTaskQueueRegistered"]
    assert found, f"no task-queue condition on {view}"  # polled until its status is written
    return dict(found[0])


def test_twc_calls_with_its_own_certificate_and_workers_with_theirs(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    front: tuple[Authority, MutualTLSFront],
) -> None:
    authority, served = front
    for name, common_name in (("worker-mtls", "worker"), ("twc-mtls", "twc")):
        kube.core.create_namespaced_secret(
            namespace,
            {
                "metadata": {"name": name},
                "type": "kubernetes.io/tls",
                "stringData": authority.issue(common_name),
            },
        )
    connection = {
        "tls": {"serverName": SERVER_NAME},
        "mutualTLSSecretRef": {"name": "worker-mtls"},
        "twcCredentials": {"mutualTLSSecretRef": {"name": "twc-mtls"}},
    }
    worker = {
        "name": "orders",
        "namespace": namespace,
        "taskQueueName": task_queue,
        "rollout": {"strategy": "AllAtOnce"},
    }
    fleet = fleet_doc(namespace, host_port=served.address, workers=[worker], connection=connection)
    fs = daemons.stack(fleet)
    with Kubelet(kube, namespace, "orders") as kubelet:
        daemon = daemons.start(fs, settings=FAST)
        eventually(
            lambda: "SetWorkerDeploymentCurrentVersion" in served.methods("twc"),
            timeout=ONE_UP,
            message=lambda: f"twc never routed: {dict(served.calls)}\n{daemon.text()[-3000:]}",
        )
        # The worker's pods poll through the front with their own certificate.
        result = asyncio.run(_echo(local_env.temporal_address(), task_queue))
        assert "(from orders-" in result, result
        twc, workers = served.methods("twc"), served.methods("worker")
        assert "PollWorkflowTaskQueue" in workers, workers
        assert "DescribeTaskQueue" in twc, twc
        assert not workers & ROUTING, workers
        assert not {m for m in twc if m.startswith("Poll")}, twc
        assert set(served.calls) == {"twc", "worker"}, dict(served.calls)
        (deployment,) = kubelet.deployments().values()
        pods = json.dumps(deployment["spec"]["template"])
        assert "worker-mtls" in pods
        assert "twc-mtls" not in pods

        # twc's credential revoked: the status blames twc's, the workers run on.
        twc_secret = kube.core.read_namespaced_secret("twc-mtls", namespace)
        kube.core.delete_namespaced_secret("twc-mtls", namespace)
        kubectl = Kubectl(local_env)
        eventually(
            lambda: _queue_condition(kubectl, namespace)["reason"] == "TwcCredentialInvalid",
            timeout=ONE_UP,
            message=lambda: f"never blamed twc's credential\n{daemon.text()[-3000:]}",
        )
        assert "twc-mtls" in _queue_condition(kubectl, namespace)["message"]
        result = asyncio.run(_echo(local_env.temporal_address(), task_queue))
        assert "(from orders-" in result, result
        (after,) = kubelet.deployments().values()
        assert after["metadata"]["generation"] == deployment["metadata"]["generation"]
        assert after["spec"]["template"] == deployment["spec"]["template"]

        restored = {
            "metadata": {"name": "twc-mtls"},
            "type": twc_secret.type,
            "data": twc_secret.data,
        }
        kube.core.create_namespaced_secret(namespace, restored)
        eventually(
            lambda: _queue_condition(kubectl, namespace)["reason"] == "PollersRegistered",
            timeout=ONE_UP,
            message=lambda: f"never registered again\n{daemon.text()[-3000:]}",
        )

        # Rotated: the old certificate's client is dropped and never called again.
        rotated = authority.issue("twc-rotated")
        kube.core.patch_namespaced_secret("twc-mtls", namespace, {"stringData": rotated})
        patched = time.monotonic()
        eventually(
            lambda: served.count("twc-rotated") >= 3,
            timeout=ONE_UP,
            message=lambda: f"twc never called with its new certificate\n{daemon.text()[-3000:]}",
        )
        took = time.monotonic() - patched
        assert "Temporal client(s) of rotated credentials or unused" in daemon.text()
        old, new = served.count("twc"), served.count("twc-rotated")
        eventually(
            lambda: served.count("twc-rotated") >= new + 5,
            timeout=ONE_UP,
            message="twc stopped calling Temporal after the rotation",
        )
        assert served.count("twc") == old, "a call still came with the rotated-out certificate"
    print(
        f"twc's certificate rotated: 3 calls with the new one {took:.1f} s after the patch, "
        f"then {served.count('twc-rotated') - new} more, none with the old one"
    )
