"""A tenant cannot get a privileged pod: a TemporalWorker whose template asks for one is
refused alone (``InvalidSpec`` naming the field, no Deployment) while another tenant's
worker is provisioned by the same daemon."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.daemon_process import Daemons, eventually
from tests.e2e.native import Kubectl, conditions, object_ref, second_tenant, temporal_worker
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e


def test_a_privileged_temporal_worker_is_refused_while_another_tenants_is_provisioned(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    request: pytest.FixtureRequest,
) -> None:
    kubectl = Kubectl(local_env)
    other, _ = second_tenant(local_env, kube, namespace, daemons, request)

    ref = object_ref("ClusterConnection", "local")
    evil = temporal_worker(namespace, "evil", f"{task_queue}-e", ref)
    evil["spec"]["template"] = {
        "spec": {"containers": [{"name": "worker", "securityContext": {"privileged": True}}]}
    }
    started = time.monotonic()
    kubectl.apply(evil, temporal_worker(other, "fine", task_queue, ref))

    eventually(
        lambda: kube.get_deployment(other, "fine"),
        timeout=120,
        message="the other tenant's worker never got its Deployment",
    )
    provisioned = time.monotonic() - started
    refused = eventually(
        lambda: (
            (s := kubectl.get_json("temporalworker", "evil", "-n", namespace))
            and (s.get("status") or {}).get("phase") == "Failed"
            and s
        ),
        timeout=60,
        message="the privileged worker never got a Failed status",
    )
    cond = conditions(refused)["WorkerDeploymentReady"]
    assert cond["reason"] == "InvalidSpec", cond
    assert "spec.template.spec.containers[0].securityContext.privileged" in cond["message"]
    assert kube.get_deployment(namespace, "evil") is None
    print(f"the other tenant's Deployment after {provisioned:.1f} s")
