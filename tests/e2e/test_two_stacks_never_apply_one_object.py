"""One stack per cluster object: two daemons' stacks whose ``select`` both take one
TemporalWorker refuse it both (``StackConflict`` naming the stacks, no Deployment from
either), while each applies the objects only it selects."""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from tests.e2e.native import Kubectl, conditions, object_ref, temporal_worker
from tests.helpers import delete_twc_objects
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e


def test_an_object_two_stacks_select_is_refused_by_both_and_never_applied(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
    request: pytest.FixtureRequest,
) -> None:
    kubectl = Kubectl(local_env)
    team = f"b-{uuid.uuid4().hex[:6]}"
    address = local_env.temporal_address()
    selects = {"a": {"namespaces": [namespace]}, "b": {"matchLabels": {"team": team}}}
    stacks = {
        key: daemons.stack(
            {**fleet_doc(namespace, host_port=address), "select": select},
            controlNamespace=namespace,
        )
        for key, select in selects.items()
    }
    for fs in stacks.values():
        wait_for_success(daemons.start(fs))

    ref = object_ref("ClusterConnection", "local")
    objects = {
        name: temporal_worker(namespace, name, f"{task_queue}-{name}", ref)
        for name in ("shared", "only-a", "only-b")
    }
    for name in ("shared", "only-b"):
        objects[name]["metadata"]["labels"] = {"team": team}
    objects["only-b"]["metadata"]["namespace"] = f"{namespace}-b"
    kube.ensure_namespace(f"{namespace}-b")
    request.addfinalizer(functools.partial(delete_twc_objects, kube, f"{namespace}-b"))
    started = time.monotonic()
    kubectl.apply(*objects.values())

    for name, key, ns in (("only-a", "a", namespace), ("only-b", "b", f"{namespace}-b")):
        dep = eventually(
            lambda n=name, s=ns: kube.get_deployment(s, n),
            timeout=120,
            message=f"{name} never got its Deployment",
        )
        assert dep["metadata"]["labels"]["twc.temporal.io/stack"] == stacks[key].name
    refused = eventually(
        lambda: (
            (s := kubectl.get_json("temporalworker", "shared", "-n", namespace))
            and (s.get("status") or {}).get("phase") == "Failed"
            and s
        ),
        timeout=60,
        message="the object both stacks select never got a Failed status",
    )
    took = time.monotonic() - started
    cond = conditions(refused)["WorkerDeploymentReady"]
    assert cond["reason"] == "StackConflict", cond
    names = ", ".join(sorted(fs.name for fs in stacks.values()))
    assert f"selected by stacks {names}" in cond["message"]
    assert kube.get_deployment(namespace, "shared") is None
    print(f"refused by both, the others applied, after {took:.1f} s")
