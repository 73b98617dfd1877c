"""An object the API server refuses is refused alone: a cluster policy twc cannot check
ahead (a ValidatingAdmissionPolicy) refuses tenant A's Deployments with a "forbidden"
image. A's new TemporalWorker of such an image gets ``InvalidSpec`` with the policy's
message and no Deployment, A's edited worker keeps its running Deployment unchanged, and
tenant B's change is applied meanwhile; the stack's ups keep succeeding."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from tests.e2e.native import Kubectl, conditions, object_ref, second_tenant, temporal_worker
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

POLICY_MESSAGE = "images named forbidden are not allowed in this namespace"
FORBIDDEN = "registry.example/forbidden:1.0.0"


def _policy(namespace: str) -> list[dict[str, Any]]:
    name = f"twc-e2e-forbidden-{namespace}"
    group = "admissionregistration.k8s.io/v1"
    return [
        {
            "apiVersion": group,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["apps"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["deployments"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!object.spec.template.spec.containers.exists("
                        "c, c.image.contains('forbidden'))",
                        "message": POLICY_MESSAGE,
                    }
                ],
            },
        },
        {
            "apiVersion": group,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    ]


def _enforced(kube: Any, namespace: str) -> bool:
    # A server-side dry run of a Deployment the policy refuses.
    labels = {"app": "policy-probe"}
    body = {
        "metadata": {"name": "policy-probe"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": FORBIDDEN}]},
            },
        },
    }
    try:
        kube.apps.create_namespaced_deployment(namespace, body, dry_run="All")
    except Exception as exc:  # noqa: BLE001 - the refusal is what is waited for
        return POLICY_MESSAGE in str(getattr(exc, "body", exc))
    return False


def _invalid_spec(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    # The condition that carries the API server's refusal, once the status has it.
    obj = kubectl.get_json("temporalworker", name, "-n", namespace)
    found = [c for c in conditions(obj).values() if c.get("reason") == "InvalidSpec"]
    return found[0] if found and POLICY_MESSAGE in found[0].get("message", "") else None


def _image(deployment: dict[str, Any] | None) -> str | None:
    if deployment is None:
        return None
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


def test_a_refused_object_is_refused_alone_while_the_rest_of_the_stack_applies(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    request: pytest.FixtureRequest,
) -> None:
    kubectl = Kubectl(local_env)
    other, daemon = second_tenant(local_env, kube, namespace, daemons, request)
    ref = object_ref("ClusterConnection", "local")
    kept = temporal_worker(namespace, "kept", f"{task_queue}-k", ref)
    fine = temporal_worker(other, "fine", task_queue, ref)
    kubectl.apply(kept, fine)
    for ns, name in ((namespace, "kept"), (other, "fine")):
        eventually(
            lambda ns=ns, name=name: kube.get_deployment(ns, name),
            timeout=120,
            message=f"{ns}/{name} never got its Deployment",
        )

    policy = _policy(namespace)
    request.addfinalizer(
        lambda: [kubectl("delete", o["kind"], o["metadata"]["name"], check=False) for o in policy]
    )
    kubectl.apply(*policy)
    eventually(  # the API server enforces a new policy after a moment
        lambda: _enforced(kube, namespace),
        timeout=60,
        message="the admission policy never took effect",
    )

    # (1) A's new refused worker is left out; B's image change is applied meanwhile.
    evil = temporal_worker(namespace, "evil", f"{task_queue}-e", ref)
    evil["spec"]["image"] = FORBIDDEN
    fine["spec"]["image"] = "registry.example/worker:1.4.3"
    started = time.monotonic()
    kubectl.apply(evil, fine)
    eventually(
        lambda: _image(kube.get_deployment(other, "fine")) == "registry.example/worker:1.4.3",
        timeout=120,
        message="the other tenant's image change was never applied",
    )
    applied = time.monotonic() - started
    refused = eventually(
        lambda: _invalid_spec(kubectl, namespace, "evil"),
        timeout=60,
        message="the refused worker never got InvalidSpec with the policy's message",
    )
    status = (kubectl.get_json("temporalworker", "evil", "-n", namespace) or {})["status"]
    assert status["phase"] == "Failed", status
    assert conditions({"status": status})["WorkerDeploymentReady"]["reason"] == "InvalidSpec"
    assert POLICY_MESSAGE in refused["message"]
    assert kube.get_deployment(namespace, "evil") is None

    # (2) A's accepted worker edited to a refused image keeps what runs for it.
    before = kube.get_deployment(namespace, "kept")
    assert before is not None
    kept["spec"]["image"] = FORBIDDEN
    kubectl.apply(kept)
    eventually(
        lambda: _invalid_spec(kubectl, namespace, "kept"),
        timeout=60,
        message="the refused edit never got InvalidSpec with the policy's message",
    )
    # (3) The stack keeps applying successfully: no failed ups loop on the refusals.
    wait_for_success(daemon, after=daemon.successes())
    answer = daemon.status()
    assert answer["consecutiveFailures"] == 0, answer
    assert answer["lastOutcome"]["kind"] == "success", answer
    after = kube.get_deployment(namespace, "kept")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]
    assert _image(after) == "registry.example/worker:1.4.2"
    assert kube.get_deployment(namespace, "evil") is None
    print(f"the other tenant's image change applied after {applied:.1f} s")
