"""Moving an unsharded stack to shards (`twc shards migrate`) changes no object in the
cluster: on the real engine, every Deployment keeps its uid, its generation (no spec
change) and its ReplicaSets (no rollout); the shards' stacks then hold the workers and
the old stack is gone."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import create_tls_secret, fleet_doc, sharded_preview
from twc.cli import shards, up
from twc.engine import engine
from twc.engine.shards import stack_resources
from twc.kube.shards import shard_map_name
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]


def _deployments(kube: Any, namespaces: list[str]) -> dict[str, tuple[str, int, list[str]]]:
    out = {}
    for ns in namespaces:
        for dep in kube.apps.list_namespaced_deployment(ns).items:
            sets = sorted(
                rs.metadata.name
                for rs in kube.apps.list_namespaced_replica_set(ns).items
                if any(o.uid == dep.metadata.uid for o in rs.metadata.owner_references or ())
            )
            out[f"{ns}/{dep.metadata.name}"] = (dep.metadata.uid, dep.metadata.generation, sets)
    return out


def test_migrating_to_shards_keeps_every_deployment_as_it_is(
    local_env: LocalEnvironment, kube: Any, tmp_path: Path
) -> None:
    a, b = sorted(f"m-{uuid.uuid4().hex[:6]}" for _ in range(2))
    source = f"src-{uuid.uuid4().hex[:6]}"
    for ns in (a, b, source):
        kube.ensure_namespace(ns)
    create_tls_secret(kube, source)
    stack = f"e2e-mig-{uuid.uuid4().hex[:6]}"
    file = tmp_path / f"{stack}.yaml"
    fleet = fleet_doc(
        "",
        host_port=local_env.temporal_address(),
        connection={
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": source},
            "allowedNamespaces": [a, b],
        },
        queues=[{"name": "orders", "namespace": a, "workerEnabled": True}],
        workers=[
            {"name": "w1", "namespace": a, "taskQueueName": f"tq-{a}-1"},
            {"name": "w2", "namespace": b, "taskQueueName": f"tq-{b}-2"},
            {
                "name": "w3",
                "namespace": b,
                "taskQueueName": f"tq-{b}-3",
                "autoscaling": {"minReplicas": 1, "maxReplicas": 4, "targetBacklogPerReplica": 5},
            },
        ],
    )
    # The fleet file alone (its Queue is the file's): another test's Queue or TemporalWorker
    # in the shared embedded cluster would otherwise join the stack and get a shard.
    fleet["clusterObjects"] = False
    file.write_text(yaml.safe_dump(fleet))
    base = engine.StackRef(name=stack, config={"fleetFile": str(file)}, env={})
    refs: list[engine.StackRef] = []
    try:
        out = io.StringIO()
        assert up.run_up(stack, str(file), out=out) == 0, out.getvalue()[-3000:]
        before = _deployments(kube, [a, b])
        assert set(before) == {f"{a}/w1", f"{a}/worker-orders", f"{b}/w2", f"{b}/w3"}

        fleet["sharding"] = {"maxWorkersPerShard": 2}
        file.write_text(yaml.safe_dump(fleet))
        out = io.StringIO()
        assert shards.run_migrate(stack, str(file), out) == 0, out.getvalue()[-5000:]

        after = _deployments(kube, [a, b])
        assert after == before  # same objects, same specs, no new ReplicaSet
        assert stack_resources(base) is None  # the old stack is gone
        sharded = shards.sharded_stack(stack, str(file), record=False)
        assert dict(sharded.shard_map.namespaces) == {a: 0, b: 1}
        refs = [sharded.ref(i) for i in range(sharded.shard_map.shards)]
        held = [
            sorted(
                r["urn"].rsplit("::", 1)[-1]
                for r in (stack_resources(ref) or [])
                if r.get("type") == "twc:temporal:TemporalWorker"
            )
            for ref in refs
        ]
        assert held == [[f"{a}/w1", f"{a}/worker-orders"], [f"{b}/w2", f"{b}/w3"]]

        code, report, err = sharded_preview(stack, str(file))
        assert code == 0, (report[-3000:], err)
        assert json.loads(report)["summary"]["hasChanges"] is False
    finally:
        for ref in refs:
            try:
                engine.select_stack(ref).destroy(color="never")
            finally:
                engine.select_stack(ref).workspace.remove_stack(ref.name, force=True)
        if stack_resources(base) is not None:
            engine.select_stack(base).destroy(color="never")
            engine.select_stack(base).workspace.remove_stack(stack, force=True)
        kube.core.delete_namespaced_config_map(shard_map_name(stack), "default")
