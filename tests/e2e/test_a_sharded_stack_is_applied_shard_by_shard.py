"""A sharded fleet is applied as shard stacks on the real engine and API server: each
shard holds its namespaces' workers and secret copies only, `twc up`/`preview`/`status`
answer for every shard at once (or one with `--shard`), and a new namespace is assigned
without moving any existing worker."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import create_tls_secret, fleet_doc, sharded_preview
from tests.helpers import delete_twc_objects
from twc.cli import shards
from twc.cli.status import run_status
from twc.engine import engine
from twc.kube.shards import ASSIGNMENT_KEY, shard_map_name
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]


@pytest.fixture
def namespaces(kube: Any) -> Iterator[list[str]]:
    made = [f"s-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    for ns in made:
        kube.ensure_namespace(ns)
    yield made
    for ns in made:
        delete_twc_objects(kube, ns)


def _fleet(address: str, workers: dict[str, list[str]], source: str) -> dict[str, Any]:
    fleet = fleet_doc(
        "",
        host_port=address,
        connection={
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": source},
            "allowedNamespaces": list(workers),
        },
        workers=[
            {"name": name, "namespace": ns, "taskQueueName": f"tq-{ns}-{name}"}
            for ns, names in workers.items()
            for name in names
        ],
    )
    fleet["sharding"] = {"maxWorkersPerShard": 2, "assignmentNamespace": "default"}
    # The fleet file alone: other tests' Queues and TemporalWorkers in the same embedded
    # cluster would otherwise join this stack and be assigned shards of their own.
    fleet["clusterObjects"] = False
    return fleet


def _state_workers(ref: engine.StackRef) -> list[str]:
    state = engine.select_stack(ref).export_stack().deployment or {}
    return sorted(
        r["urn"].rsplit("::", 1)[-1]
        for r in state.get("resources") or []
        if r.get("type") == "twc:temporal:TemporalWorker"
    )


def _secret_copies(ref: engine.StackRef) -> list[str]:
    state = engine.select_stack(ref).export_stack().deployment or {}
    return sorted(
        (r.get("outputs") or {}).get("metadata", {}).get("namespace", "?")
        for r in state.get("resources") or []
        if r.get("type") == "kubernetes:core/v1:Secret"
    )


def test_shards_apply_their_own_namespaces_and_a_new_namespace_moves_nothing(
    local_env: LocalEnvironment, kube: Any, namespaces: list[str], tmp_path: Path
) -> None:
    a, b, c = sorted(namespaces)
    source = f"src-{uuid.uuid4().hex[:6]}"
    kube.ensure_namespace(source)
    create_tls_secret(kube, source)
    stack = f"e2e-sh-{uuid.uuid4().hex[:6]}"
    file = tmp_path / f"{stack}.yaml"
    address = local_env.temporal_address()
    file.write_text(yaml.safe_dump(_fleet(address, {a: ["w1", "w2"], b: ["w3"]}, source)))
    refs: list[engine.StackRef] = []
    try:
        out = io.StringIO()
        assert shards.run_up_sharded(stack, str(file), out) == 0, out.getvalue()[-3000:]

        sharded = shards.sharded_stack(stack, str(file), record=False)
        assert dict(sharded.shard_map.namespaces) == {a: 0, b: 1}
        refs = [sharded.ref(0), sharded.ref(1)]
        assert _state_workers(refs[0]) == [f"{a}/w1", f"{a}/w2"]
        assert _state_workers(refs[1]) == [f"{b}/w3"]
        # Each shard copies the credential secret into its own namespaces only.
        assert _secret_copies(refs[0]) == [a]
        assert _secret_copies(refs[1]) == [b]
        config_map = kube.core.read_namespaced_config_map(shard_map_name(stack), "default")
        assert json.loads(config_map.data[ASSIGNMENT_KEY])["namespaces"] == {a: 0, b: 1}
        before = kube.get_deployment(a, "w1")
        assert before is not None

        # Nothing changed: one merged preview, exit 0 with --detailed-exitcode.
        code, report, err = sharded_preview(stack, str(file))
        assert code == 0, (report[-3000:], err)
        assert json.loads(report)["stack"] == f"{stack} (2 shards)"

        # A new namespace: assigned to the least-filled shard with room (shard 1).
        file.write_text(
            yaml.safe_dump(_fleet(address, {a: ["w1", "w2"], b: ["w3"], c: ["w4"]}, source))
        )
        code, report, err = sharded_preview(stack, str(file))
        assert code == 2, (report[-3000:], err)
        assert "new namespaces would be assigned" in err
        created = {g["name"] for g in json.loads(report)["groups"] if g["operation"] == "create"}
        assert f"{c}/w4" in created

        out = io.StringIO()
        assert shards.run_up_sharded(stack, str(file), out, shard="1") == 0, out.getvalue()[-3000:]
        assert _state_workers(refs[1]) == [f"{b}/w3", f"{c}/w4"]
        assert _state_workers(refs[0]) == [f"{a}/w1", f"{a}/w2"]
        after = kube.get_deployment(a, "w1")
        assert after is not None
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["metadata"]["generation"] == before["metadata"]["generation"]

        status = io.StringIO()
        assert run_status(stack, "json", status, sharded=True, fleet_file=str(file)) == 0, (
            status.getvalue()
        )
        shown = json.loads(status.getvalue())
        assert sorted(shown["workers"]) == [f"{a}/w1", f"{a}/w2", f"{b}/w3", f"{c}/w4"]
        assert shown["shards"] == {
            refs[0].name: [f"{a}/w1", f"{a}/w2"],
            refs[1].name: [f"{b}/w3", f"{c}/w4"],
        }
    finally:
        for ref in refs:
            try:
                engine.select_stack(ref).destroy(color="never")
            finally:
                engine.select_stack(ref).workspace.remove_stack(ref.name, force=True)
        kube.core.delete_namespaced_config_map(shard_map_name(stack), "default")
