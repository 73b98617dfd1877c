"""The official docs' WorkerDeployment, `kubectl apply`-ed to twc's cluster as it is.

On the real kube-apiserver with twc's ``workerdeployments.temporal.io`` CRD and the real
daemon: the official migration guide's manifest (``tests/fixtures/official``, verbatim)
gets a Deployment per build with real temporalio workers polling as the version (and
through a ClusterConnection of the official shape, named by ``connectionRef.kind``); a new
image ramps by the manifest's own Progressive steps (durations scaled down by the daemon's
``time_scale``) until it is Current; a workflow pinned to the first version finishes
there; and ``kubectl get workerdeployment -o yaml`` shows the official status fields.

Differs from a production cluster: the docs' Connection uses Temporal Cloud over mTLS; here
a Connection of the same name points at the test bed's dev server without TLS.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually
from tests.e2e.native import (
    Kubectl,
    Kubelet,
    cluster_connection,
    connection,
    finish,
    start_wait,
)
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

MANIFEST = (
    Path(__file__).parent.parent / "fixtures" / "official" / "migration-workerdeployment.yaml"
)
NAME, QUEUE, TEMPORAL_NAMESPACE = "payment-processor", "payment-processor", "production"
SETTINGS = {**FAST, "rollout": {"time_scale": 0.05}}
"""Rollout durations a twentieth: the docs' 10 m, 15 m and 20 m steps last 30, 45 and 60 s."""
ONE_UP = 180.0


def test_the_docs_worker_deployment_rolls_out_a_new_image_by_its_own_steps(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    daemons: Daemons,
    real_tool: Callable[[str], str],
) -> None:
    address = local_env.temporal_address()
    create = ("operator", "namespace", "create", "--namespace", TEMPORAL_NAMESPACE)
    made = subprocess.run(
        [real_tool("temporal"), *create, "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0 or "already" in made.stderr.lower(), made.stderr
    kubectl = Kubectl(local_env)
    manifest = MANIFEST.read_text()
    # The same worker as `billing`, through a ClusterConnection of the official shape.
    shared = f"cc-{namespace}"
    billing = yaml.safe_load(manifest)
    billing["metadata"]["name"] = "billing"
    billing["spec"]["workerOptions"]["connectionRef"] = {
        "name": shared,
        "kind": "ClusterConnection",
    }
    billing["spec"]["rollout"] = {"strategy": "AllAtOnce"}
    fs = daemons.stack(fleet_doc(namespace, host_port=address))
    with Kubelet(kube, namespace, NAME) as kubelet, Kubelet(kube, namespace, "billing") as other:
        daemon = daemons.start(fs, settings=SETTINGS)
        kubectl.apply(
            connection(namespace, "production-temporal", address),
            cluster_connection(shared, address),
            {**billing, "metadata": {**billing["metadata"], "namespace": namespace}},
        )
        kubectl("apply", "-n", namespace, "-f", "-", stdin=manifest)

        def status() -> dict[str, Any]:
            obj = kubectl.get_json("workerdeployment", NAME, "-n", namespace) or {}
            found: dict[str, Any] = obj.get("status") or {}
            return found

        def current() -> str | None:
            return (status().get("currentVersion") or {}).get("buildID")

        first = eventually(
            current,
            timeout=ONE_UP,
            message=lambda: f"no version became Current:\n{daemon.text()[-3000:]}",
        )
        assert first.startswith("v1.5.2-")
        dep = kubelet.deployments()[first]
        assert dep["metadata"]["name"] == f"{NAME}-{first.replace('.', '-')}"
        env = {
            e["name"]: e.get("value")
            for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["TEMPORAL_DEPLOYMENT_NAME"] == f"{namespace}/{NAME}"
        assert env["TEMPORAL_WORKER_BUILD_ID"] == first
        assert env["TEMPORAL_NAMESPACE"] == TEMPORAL_NAMESPACE
        eventually(
            lambda: len(kubelet.running()) == 1 and first in kubelet.running(),
            timeout=ONE_UP,
            message="the first version's pods run no worker",
        )
        start_wait(address, f"pinned-{namespace}", QUEUE, TEMPORAL_NAMESPACE)

        # A new image: a new version ramps by the manifest's steps (1, 5, 25 %), then Current.
        image = "[{'op': 'replace', 'path': '/spec/template/spec/containers/0/image', "
        image += "'value': 'payment-processor:v1.5.3'}]"
        kubectl(
            "patch",
            "workerdeployment",
            NAME,
            "-n",
            namespace,
            "--type=json",
            "-p",
            image.replace("'", '"'),
        )
        ramps: set[float] = set()

        def promoted() -> str | None:
            found = status()
            target = found.get("targetVersion") or {}
            if target.get("status") == "Ramping":
                ramps.add(float(target["rampPercentage"]))
            build = current()
            return build if build and build.startswith("v1.5.3-") else None

        second = eventually(
            promoted,
            timeout=4 * ONE_UP,
            interval=1.0,
            message=lambda: f"v1.5.3 never became Current:\n{daemon.text()[-3000:]}",
        )
        assert ramps <= {1.0, 5.0, 25.0}
        assert 1.0 in ramps, ramps
        final = status()
        drained = {v["buildID"]: v for v in final.get("deprecatedVersions") or ()}
        assert drained[first]["status"] == "Draining", final
        ran = finish(address, f"pinned-{namespace}", TEMPORAL_NAMESPACE)
        assert ran == first, final

        # The official status as `kubectl get -o yaml` shows it.
        shown = yaml.safe_load(
            kubectl("get", "workerdeployment", NAME, "-n", namespace, "-o", "yaml")
        )
        official = shown["status"]
        assert official["currentVersion"]["buildID"] == second
        assert official["currentVersion"]["deployment"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": f"{NAME}-{second.replace('.', '-')}",
            "namespace": namespace,
        }
        assert official["targetVersion"]["buildID"] == second
        conditions = {c["type"]: c for c in official["conditions"]}
        eventually(
            lambda: {c["type"]: c for c in status()["conditions"]}["Ready"]["status"] == "True",
            timeout=ONE_UP,
            message=f"never Ready: {conditions}",
        )
        assert "phase" not in official
        billed = kubectl.get_json("workerdeployment", "billing", "-n", namespace) or {}
        assert (billed["status"]["currentVersion"] or {})["buildID"].startswith("v1.5.2-")
        table = kubectl("get", "workerdeployments", "-n", namespace)
        assert table.split("\n")[0].split() == ["NAME", "CURRENT", "TARGET", "RAMP", "%", "AGE"]
        # One at a time: both at once would be more than the deletion guard's share.
        for gone, pods in (("billing", other), (NAME, kubelet)):
            kubectl("delete", "workerdeployment", gone, "-n", namespace)
            eventually(
                lambda pods=pods: not pods.deployments(),
                timeout=ONE_UP,
                message=f"deleting the WorkerDeployment {gone} left its Deployments",
            )
        kubectl("delete", "clusterconnection", shared, "--timeout=60s")
        assert daemon.alive()
