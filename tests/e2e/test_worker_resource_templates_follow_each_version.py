"""The official ``WorkerResourceTemplate``, `kubectl apply`-ed to twc's cluster as it is.

On the real kube-apiserver, kube-controller-manager (its HPA and disruption controllers)
and the real daemon, with a real temporalio worker per pod: the official docs' HPA and
PDB templates get one copy per running version of their WorkerDeployment; the real HPA
controller scales the version named in its ``scaleTargetRef`` to ``minReplicas`` and twc
keeps that count through its later applies; the real disruption controller counts the
version's pods through the injected selector; the template's status lists each
version's copy in the official shape; a new image gets its own copies; the old
version, Draining behind a pinned workflow and scaled to 0 by hand, is scaled back until
the workflow finishes there; and its HPA goes when sunset scales it to 0, its PDB when
sunset deletes it.

Differs from a production cluster: no metrics server (the HPA acts on ``minReplicas``
alone) and rollout durations a twentieth (``time_scale``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually
from tests.e2e.native import Kubectl, Kubelet, connection, finish, start_wait
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

NAME, TEMPORAL_NAMESPACE = "ledger", "default"
SETTINGS = {**FAST, "rollout": {"time_scale": 0.05}}
ONE_UP = 180.0


def _worker_deployment(namespace: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "WorkerDeployment",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "minReadySeconds": 1,
            "progressDeadlineSeconds": 300,
            "workerOptions": {
                "connectionRef": {"name": "dev"},
                "temporalNamespace": TEMPORAL_NAMESPACE,
            },
            "rollout": {"strategy": "AllAtOnce"},
            # A twentieth: scaled to 0 three seconds after drained, deleted three later.
            "sunset": {"scaledownDelay": "60s", "deleteDelay": "60s"},
            "template": {"spec": {"containers": [{"name": "worker", "image": image}]}},
        },
    }


def _template(namespace: str, name: str, template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "WorkerResourceTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"workerDeploymentRef": {"name": NAME}, "template": template},
    }


# The official docs' examples, as they are.
HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "spec": {
        "scaleTargetRef": {},
        "minReplicas": 2,
        "maxReplicas": 3,
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 70},
                },
            }
        ],
    },
}
PDB = {
    "apiVersion": "policy/v1",
    "kind": "PodDisruptionBudget",
    "spec": {"minAvailable": 1, "selector": {"matchLabels": {}}},
}


def test_each_version_gets_its_own_autoscaler_and_budget_until_its_sunset(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    daemons: Daemons,
) -> None:
    address = local_env.temporal_address()
    kubectl = Kubectl(local_env)
    fs = daemons.stack(fleet_doc(namespace, host_port=address))

    def copies(kind: str) -> dict[str, dict[str, Any]]:
        # `--ignore-not-found` prints nothing for an empty list: no copies.
        found = kubectl.get_json(kind, "-n", namespace) or {"items": []}
        return {o["metadata"]["labels"]["temporal.io/build-id"]: o for o in found["items"]}

    with Kubelet(kube, namespace, NAME) as kubelet:
        daemon = daemons.start(fs, settings=SETTINGS)
        kubectl.apply(
            connection(namespace, "dev", address),
            _template(namespace, "ledger-hpa", HPA),
            _template(namespace, "ledger-pdb", PDB),
            _worker_deployment(namespace, "ledger:v1"),
        )

        def deployment_replicas(build: str) -> int | None:
            dep = kubelet.deployments().get(build)
            return None if dep is None else dep["spec"].get("replicas")

        def version(prefix: str) -> str | None:
            builds = [b for b in kubelet.deployments() if b.startswith(prefix)]
            return builds[0] if builds else None

        first = eventually(
            lambda: version("v1-"),
            timeout=ONE_UP,
            message=lambda: f"no v1:\n{daemon.text()[-3000:]}",
        )
        first_name = kubelet.deployments()[first]["metadata"]["name"]
        made = kubelet.deployments()[first]["spec"]
        assert (made["minReadySeconds"], made["progressDeadlineSeconds"]) == (1, 300)
        hpa = eventually(lambda: copies("hpa").get(first), timeout=ONE_UP, message="no HPA")
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": first_name,
        }
        # The real HPA controller scales the version it names up to minReplicas.
        eventually(
            lambda: deployment_replicas(first) == 2,
            timeout=ONE_UP,
            message=f"the HPA never scaled {first_name}: {copies('hpa').get(first)}",
        )
        # The real disruption controller counts the version's pods through the selector.
        eventually(
            lambda: (copies("pdb").get(first) or {}).get("status", {}).get("expectedPods") == 2,
            timeout=ONE_UP,
            message=f"the PDB never counted the pods: {copies('pdb').get(first)}",
        )

        # Its status in the official shape: the copy per build ID, the generation applied.
        def template_status() -> dict[str, Any]:
            found = kubectl.get_json("wrt", "ledger-hpa", "-n", namespace) or {}
            status: dict[str, Any] = found.get("status") or {}
            return status

        status = eventually(
            lambda: (s := template_status()).get("versions") and s,
            timeout=ONE_UP,
            message="the WorkerResourceTemplate got no status",
        )
        (entry,) = status["versions"]
        assert (entry["buildID"], entry["resourceName"]) == (first, hpa["metadata"]["name"])
        eventually(
            lambda: (
                (template_status().get("versions") or [{}])[0].get("lastAppliedGeneration") == 1
            ),
            timeout=ONE_UP,
            message=f"never applied: {template_status()}",
        )
        table = kubectl("get", "wrt", "-n", namespace)
        assert table.split("\n")[0].split() == ["NAME", "WORKER", "KIND", "AGE"]

        # A workflow pinned to v1 keeps it Draining once a new image is Current.
        eventually(lambda: first in kubelet.running(), timeout=ONE_UP, message="v1 runs no worker")
        start_wait(address, f"pinned-{namespace}", NAME)
        kubectl.apply(_worker_deployment(namespace, "ledger:v2"))
        second = eventually(
            lambda: version("v2-"),
            timeout=ONE_UP,
            message=lambda: f"no v2:\n{daemon.text()[-3000:]}",
        )
        eventually(
            lambda: deployment_replicas(second) == 2,
            timeout=ONE_UP,
            message=f"the new version's HPA never scaled it: {copies('hpa')}",
        )
        # Draining at 0 (by hand; the HPA never scales from 0): twc scales it back (#587).
        kubectl("scale", "deployment", first_name, "-n", namespace, "--replicas=0")
        eventually(
            lambda: (deployment_replicas(first) or 0) >= 1 and first in kubelet.running(),
            timeout=ONE_UP,
            message=lambda: f"the Draining version stayed at 0:\n{daemon.text()[-3000:]}",
        )
        assert finish(address, f"pinned-{namespace}") == first
        eventually(
            lambda: set(copies("hpa")) == {second},
            timeout=2 * ONE_UP,
            message=lambda: (
                f"the old version's HPA outlived its scale-down:\n{daemon.text()[-3000:]}"
            ),
        )
        assert deployment_replicas(first) in (0, None)
        eventually(
            lambda: set(copies("pdb")) == {second} and first not in kubelet.deployments(),
            timeout=2 * ONE_UP,
            message=lambda: f"the old version's PDB outlived it:\n{daemon.text()[-3000:]}",
        )
        # twc's own applies since (the scale-down, the deletion) kept the HPA's count.
        assert deployment_replicas(second) == 2

        kubectl("delete", "workerdeployment", NAME, "-n", namespace)
        eventually(
            lambda: not kubelet.deployments() and not copies("hpa") and not copies("pdb"),
            timeout=ONE_UP,
            message="deleting the WorkerDeployment left its Deployments or copies",
        )
        assert daemon.alive()
