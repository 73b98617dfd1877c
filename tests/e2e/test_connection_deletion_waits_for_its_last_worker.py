"""Delete protection with five namespaces sharing one ClusterConnection.

The ClusterConnection copies its mTLS secret from a source namespace into every
namespace whose workers use it, and only those its allow-list names: a worker in another
namespace is refused (``NamespaceNotAllowed``) and gets neither a copy nor a Deployment.
Deleting it while workers use it leaves it in place
(deletionTimestamp set, finalizer kept, workers untouched); it goes only once the last
worker has moved away: four move to a namespaced Connection, the fifth moves to another
namespace (deleted here, re-created there on a Connection).
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.e2e.conftest import create_tls_secret, fleet_doc
from tests.e2e.daemon_process import (
    Daemons,
    eventually,
    settle,
    wait_for_success,
)
from tests.e2e.native import Kubectl, cluster_connection, connection, object_ref, temporal_worker
from tests.helpers import delete_twc_objects
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

FINALIZER = "temporal.io/delete-protection"


@pytest.fixture
def kubectl(local_env: LocalEnvironment) -> Kubectl:
    return Kubectl(local_env)


def _finalizers(obj: dict[str, Any] | None) -> list[str]:
    return list(((obj or {}).get("metadata") or {}).get("finalizers") or [])


def test_a_shared_cluster_connection_is_deleted_only_after_its_last_worker_moves_away(
    local_env: LocalEnvironment,
    kube: Any,
    kubectl: Kubectl,
    task_queue: str,
    daemons: Daemons,
    request: pytest.FixtureRequest,
) -> None:
    address = local_env.temporal_address()
    run = uuid.uuid4().hex[:6]
    shared = f"shared-{run}"
    source = f"src-{run}"
    namespaces = [f"n{i}-{run}" for i in range(5)]
    elsewhere = f"moved-{run}"
    for ns in (source, elsewhere, *namespaces):
        kube.ensure_namespace(ns)
        # Daemons in later tests list these kinds cluster-wide.
        request.addfinalizer(functools.partial(delete_twc_objects, kube, ns))
    create_tls_secret(kube, source)
    fs = daemons.stack(fleet_doc(namespaces[0], host_port=address))
    daemon = daemons.start(fs)
    wait_for_success(daemon)

    ref = object_ref("ClusterConnection", shared)
    kubectl.apply(
        cluster_connection(
            shared,
            address,
            mutualTLSSecretRef={"name": "temporal-mtls"},
            secret_source=source,
            allowed=namespaces,
        ),
        *(temporal_worker(ns, "w", f"{task_queue}-{i}", ref) for i, ns in enumerate(namespaces)),
    )
    started = time.monotonic()
    for ns in namespaces:
        eventually(
            lambda ns=ns: kube.get_deployment(ns, "w"),
            timeout=180,
            message=f"no Deployment in {ns}",
        )

    def copies() -> list[Any] | None:
        # The Deployments may come first (the daemon applies new workers early); the
        # copies come with the up.
        try:
            return [kube.core.read_namespaced_secret("temporal-mtls", ns) for ns in namespaces]
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    for ns, copied in zip(
        namespaces, eventually(copies, timeout=120, message="no secret copies"), strict=True
    ):
        assert copied.metadata.labels["app.kubernetes.io/managed-by"] == "twc", ns
    print(f"five workers deployed in {time.monotonic() - started:.1f} s")

    # A namespace the allow-list does not name gets no copy and no worker.
    kubectl.apply(temporal_worker(elsewhere, "intruder", f"{task_queue}-x", ref))

    def refusal() -> dict[str, Any] | None:
        found = kubectl.get_json("temporalworker", "intruder", "-n", elsewhere) or {}
        conditions = (found.get("status") or {}).get("conditions") or ()
        return next((c for c in conditions if c.get("reason") == "NamespaceNotAllowed"), None)

    refused = eventually(refusal, timeout=120, message="a worker outside the allow-list ran")
    assert refused["status"] == "False", refused
    assert shared in refused["message"], refused
    assert kube.get_deployment(elsewhere, "intruder") is None
    with pytest.raises(ApiException) as absent:
        kube.core.read_namespaced_secret("temporal-mtls", elsewhere)
    assert absent.value.status == 404
    kubectl("delete", "temporalworker", "intruder", "-n", elsewhere)
    eventually(
        lambda: FINALIZER in _finalizers(kubectl.get_json("clusterconnection", shared)),
        timeout=30,
        message="the used ClusterConnection never got the finalizer",
    )

    kubectl("delete", "clusterconnection", shared, "--wait=false")
    settle(3)
    held = kubectl.get_json("clusterconnection", shared)
    assert held is not None, "deleted while five workers use it"
    assert held["metadata"].get("deletionTimestamp")
    assert FINALIZER in _finalizers(held)
    for ns in namespaces:
        assert kube.get_deployment(ns, "w") is not None, ns

    # Four workers move to a Connection of their own namespace.
    for i, ns in enumerate(namespaces[:4]):
        moved = temporal_worker(ns, "w", f"{task_queue}-{i}", {"name": "local"})
        kubectl.apply(connection(ns, "local", address), moved)
    eventually(
        lambda: all(
            FINALIZER in _finalizers(kubectl.get_json("connection", "local", "-n", ns))
            for ns in namespaces[:4]
        ),
        timeout=120,
        message="the Connections now in use never got the finalizer",
    )
    wait_for_success(daemon, after=daemon.successes() + 2, timeout=60)
    still = kubectl.get_json("clusterconnection", shared)
    assert still is not None, "released too early"
    assert FINALIZER in _finalizers(still), "released too early"

    # The fifth moves to another namespace (there, on a Connection).
    last = namespaces[4]
    kubectl("delete", "temporalworker", "w", "-n", last)
    kubectl.apply(
        connection(elsewhere, "local", address),
        temporal_worker(elsewhere, "w", f"{task_queue}-4", {"name": "local"}),
    )
    moved_at = time.monotonic()
    eventually(
        lambda: kubectl.get_json("clusterconnection", shared) is None,
        timeout=120,
        message="the ClusterConnection was never deleted after its last worker moved",
    )
    print(f"deletion completed {time.monotonic() - moved_at:.1f} s after the last move")
    assert kube.get_deployment(last, "w") is None
    eventually(
        lambda: kube.get_deployment(elsewhere, "w"),
        timeout=90,
        message="the worker moved to another namespace never got its Deployment there",
    )
    eventually(
        lambda: FINALIZER in _finalizers(kubectl.get_json("connection", "local", "-n", elsewhere)),
        timeout=30,
        message="the moved worker's Connection never got the finalizer",
    )
    for ns in namespaces[:4]:
        dep = kube.get_deployment(ns, "w")
        assert dep is not None, ns
        env = {
            e["name"]: e.get("value")
            for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env.get("TEMPORAL_TLS") is None, ns  # now on the plain Connection
    assert daemon.alive()
