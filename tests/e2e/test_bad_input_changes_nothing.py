"""Bad input changes nothing.

A deployed fleet's file is replaced by each of a corpus of malformed files (every
mutation of the unit corpus, plus hostile YAML) and ``twc up`` is run: it must exit
non-zero naming the file, the field path and the reason, and leave the cluster's
objects and the stack's state file byte-identical. Malformed kmsvc Queue objects reach
the program through the daemon's overlay and the daemon through the cluster: they are
skipped, and the valid ones next to them still get their workers.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.automation import CommandError

from tests.e2e.conftest import FleetStack, fleet_doc
from tests.helpers import assert_eventually
from tests.unit.fleet_data import valid_fleet
from tests.unit.test_fleet_validation_rejects import CASES
from twc.cli import common, up
from twc.desired import INPUTS_ENV, QUEUE_KIND_KEY, WORKER_KIND_KEY, DesiredInputs, ObjectList
from twc.engine import engine
from twc.errors import SpecError
from twc.local.environment import LocalEnvironment, free_port
from twc.spec import load_queue_object
from twc.spec._yaml import MAX_BYTES, MAX_NODES

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

QUEUE_API = ("kmsvc.io", "v1", "queues")
ENABLED = {"temporal.io/worker-enabled": "true"}

# ------------------------------------------------------------------ the corpus


def _nest(depth: int) -> bytes:
    return b"apiVersion: twc.temporal.io/v1\nkind: Fleet\ndefaults: " + (
        b"[" * depth + b"]" * depth + b"\n"
    )


def _bomb() -> bytes:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return ("\n".join(lines) + "\n").encode()


def _fleet_yaml(mutate: Callable[[dict[str, Any]], object]) -> bytes:
    fleet = valid_fleet()
    mutate(fleet)
    return yaml.safe_dump(fleet, sort_keys=False).encode()


def _huge_value() -> bytes:
    # A values file just over the size limit, made of one legitimate-looking field.
    fleet = valid_fleet()
    fleet["workers"][0]["nodeSelector"] = {"blob": "x" * MAX_BYTES}
    return yaml.safe_dump(fleet).encode()


# (id, file content, field path ("" for the whole file), text in the reason)
HOSTILE: list[tuple[str, bytes, str, str]] = [
    ("billion-laughs", _bomb(), "", "YAML anchors are not allowed"),
    ("alias", b"a: 1\nb: *a\n", "", "YAML aliases are not allowed"),
    ("merge-key", b"kind: Fleet\ndefaults:\n  <<: {replicas: 1}\n", "", "merge keys"),
    ("deep-nesting", _nest(200), "", "nesting deeper than 64 levels"),
    ("deep-nesting-maps", b"a: " + b"{b: " * 100 + b"1" + b"}" * 100 + b"\n", "", "nesting"),
    ("huge-file", _huge_value(), "", f"file is larger than {MAX_BYTES // 1024} KiB"),
    (
        "many-nodes",
        b"a: [" + b",".join([b"1"] * MAX_NODES) + b"]\n",
        "",
        f"more than {MAX_NODES} nodes",
    ),
    ("non-utf8", b"apiVersion: twc.temporal.io/v1\nkind: \xff\xfe\n", "", "not valid UTF-8"),
    ("latin1", "kind: Flotte \xe9t\xe9\n".encode("latin-1"), "", "not valid UTF-8"),
    ("nul-byte", b"kind: \x00\n", "", "special characters are not allowed"),
    ("duplicate-key", b"kind: Fleet\nkind: Fleet\n", "", "duplicate key 'kind'"),
    ("two-documents", b"kind: Fleet\n---\nkind: Fleet\n", "", "invalid YAML"),
    ("python-tag", b"apiVersion: !!python/object/apply:os.system ['true']\n", "", "invalid YAML"),
    ("unhashable-key", b"? [a, b]\n: 1\n", "", "mapping keys must be scalars"),
    ("syntax-error", b"kind: [Fleet\n", "", "invalid YAML"),
    ("empty", b"", "", "the document is empty"),
    ("top-level-list", b"- kind: Fleet\n", "", "expected a Fleet mapping, got a list"),
    ("top-level-scalar", b"42\n", "", "expected a Fleet mapping"),
    (
        "huge-replicas",
        _fleet_yaml(lambda f: f["workers"][1].update(replicas=10**30)),
        "workers[1].replicas",
        "",
    ),
    (
        "huge-name",
        _fleet_yaml(lambda f: f["workers"][1].update(name="w" * 5000)),
        "workers[1].name",
        "",
    ),
]

MUTATED = [(i, _fleet_yaml(m), p, r) for i, m, p, r in CASES]
CORPUS = MUTATED + HOSTILE


def test_the_corpus_has_more_than_fifty_distinct_malformed_files() -> None:
    ids = [case[0] for case in CORPUS]
    assert len(set(ids)) == len(ids) >= 50
    assert len({case[1] for case in CORPUS}) >= 50


# --------------------------------------------------------- what "nothing" means


def cluster_objects(kube: Any) -> dict[str, str]:
    """Every Deployment, StatefulSet, ServiceAccount, Secret, Queue: its resourceVersion."""
    out: dict[str, str] = {}
    listers = {
        "Deployment": kube.apps.list_deployment_for_all_namespaces,
        "StatefulSet": kube.apps.list_stateful_set_for_all_namespaces,
        "ServiceAccount": kube.core.list_service_account_for_all_namespaces,
        "Secret": kube.core.list_secret_for_all_namespaces,
    }
    for kind, lister in listers.items():
        for obj in lister().items:
            meta = obj.metadata
            out[f"{kind} {meta.namespace}/{meta.name}"] = meta.resource_version
    for obj in kube.custom.list_cluster_custom_object(*QUEUE_API)["items"]:
        meta = obj["metadata"]
        out[f"Queue {meta['namespace']}/{meta['name']}"] = meta["resourceVersion"]
    return out


def state_files(local_env: LocalEnvironment, stack: str) -> dict[str, str]:
    """sha256 of each of the stack's state files under the backend (not its history)."""
    root = Path(local_env.backend_dir) / ".pulumi" / "stacks"
    found = {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob(f"{stack}.json*")
    }
    assert found, f"no state file for {stack} under {root}"
    return found


def settled(kube: Any) -> dict[str, str]:
    """The cluster's objects once the simulated controllers stopped updating them."""

    def stable() -> dict[str, str]:
        first = cluster_objects(kube)
        time.sleep(1.0)
        return first if cluster_objects(kube) == first else {}

    return assert_eventually(stable, timeout=30, interval=0, message="cluster never settled")


@pytest.fixture(scope="module")
def _deployed_once(
    local_env: LocalEnvironment,
    kube: Any,
    pulumi_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FleetStack, dict[str, Any]]]:
    """One fleet applied for the whole module (an up costs ~15 s on two shared cores)."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(namespace)
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        queues=[{"name": "orders", "namespace": namespace, "workerEnabled": True}],
        workers=[{"name": "alpha", "namespace": namespace, "taskQueueName": f"tq-{namespace}"}],
    )
    name = f"e2e-bad-{uuid.uuid4().hex[:8]}"
    fs = FleetStack(name, tmp_path_factory.mktemp("bad") / f"{name}.yaml", dict(pulumi_env))
    fs.write(fleet)
    try:
        assert fs.up().summary.result == "succeeded"
        yield fs, fleet
    finally:
        fs.write(fleet)
        try:
            fs.destroy()
        finally:
            fs.stack().workspace.remove_stack(fs.name, force=True)


@pytest.fixture
def deployed(
    _deployed_once: tuple[FleetStack, dict[str, Any]],
) -> Iterator[tuple[FleetStack, dict[str, Any]]]:
    """The applied fleet; its file is restored after each test."""
    fs, fleet = _deployed_once
    yield fs, copy.deepcopy(fleet)
    fs.write(fleet)


# --------------------------------------------------------------------- twc up


def _rejection_lines(text: str, file: Path, path: str, reason: str) -> list[str]:
    prefix = f"{file}: {path}: " if path else f"{file}: "
    return [line for line in text.splitlines() if line.startswith(prefix) and reason in line]


def test_twc_up_refuses_every_malformed_file_naming_file_path_and_reason_and_changes_nothing(
    local_env: LocalEnvironment,
    kube: Any,
    deployed: tuple[FleetStack, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fs, _ = deployed
    cluster_before = settled(kube)
    state_before = state_files(local_env, fs.name)
    failures: list[str] = []
    for case_id, content, path, reason in CORPUS:
        fs.fleet_file.write_bytes(content)
        err, out = io.StringIO(), io.StringIO()
        monkeypatch.setattr(
            common,
            "validate_or_report",
            functools.partial(_VALIDATE, err=err),
        )
        code = up.run_up(fs.name, str(fs.fleet_file), out=out)
        text = err.getvalue()
        if code == 0:
            failures.append(f"{case_id}: exit 0")
        elif not _rejection_lines(text, fs.fleet_file, path, reason):
            failures.append(f"{case_id}: no line '{path}: ...{reason}' in {text!r}")
        elif "nothing was applied" not in text:
            failures.append(f"{case_id}: does not say nothing was applied")
        elif out.getvalue():
            failures.append(f"{case_id}: printed progress {out.getvalue()[:200]!r}")
    assert failures == []
    assert cluster_objects(kube) == cluster_before
    assert state_files(local_env, fs.name) == state_before


_VALIDATE = common.validate_or_report
TWC_UP = [sys.executable, "-m", "twc", "up", "--stack"]
CLUSTER_KINDS = (
    QUEUE_KIND_KEY,
    WORKER_KIND_KEY,
    "ClusterConnection.temporal.io",
    "Connection.temporal.io",
)


def test_the_twc_command_refuses_a_malformed_file_with_exit_1_and_changes_nothing(
    local_env: LocalEnvironment,
    kube: Any,
    deployed: tuple[FleetStack, dict[str, Any]],
    pulumi_env: dict[str, str],
) -> None:
    fs, _ = deployed
    cluster_before = settled(kube)
    state_before = state_files(local_env, fs.name)
    for case_id in ("unknown-nested", "mtls-and-api-key", "deep-nesting", "non-utf8"):
        _, content, path, reason = next(c for c in CORPUS if c[0] == case_id)
        fs.fleet_file.write_bytes(content)

        done = subprocess.run(
            [*TWC_UP, fs.name, "--fleet-file", str(fs.fleet_file)],
            capture_output=True,
            text=True,
            env={**os.environ, **pulumi_env},
            cwd=engine.ROOT,
            timeout=120,
        )

        assert done.returncode == 1, (case_id, done)
        assert _rejection_lines(done.stderr, fs.fleet_file, path, reason), done.stderr
    assert cluster_objects(kube) == cluster_before
    assert state_files(local_env, fs.name) == state_before


def test_pulumi_up_on_the_program_itself_refuses_a_malformed_file_and_changes_nothing(
    local_env: LocalEnvironment, kube: Any, deployed: tuple[FleetStack, dict[str, Any]]
) -> None:
    # Without twc's pre-flight validation (plain `pulumi up`), the program refuses.
    fs, fleet = deployed
    bad = copy.deepcopy(fleet)
    bad["workers"][0]["replicas"] = "three"
    bad["clusterConnections"][0]["hostPort"] = "nope"
    cluster_before = settled(kube)
    resources_before = _state_resources(local_env, fs.name)
    fs.write(bad)

    with pytest.raises(CommandError) as err:
        fs.up()

    text = str(err.value)
    assert "invalid fleet; nothing was changed" in text
    assert f"{fs.fleet_file}: workers[0].replicas: " in text
    assert f"{fs.fleet_file}: clusterConnections[0].hostPort: 'nope' must be host:port" in text
    assert cluster_objects(kube) == cluster_before
    # The engine rewrites the checkpoint after any update, a failed one too (new
    # timestamps, secrets re-encrypted with fresh nonces), so here the file is not
    # byte-identical; its resources, with ciphertexts left out, are.
    assert _state_resources(local_env, fs.name) == resources_before


def _state_resources(local_env: LocalEnvironment, stack: str) -> list[Any]:
    root = Path(local_env.backend_dir) / ".pulumi" / "stacks"
    (path,) = root.rglob(f"{stack}.json")
    return [
        _no_ciphertext(r) for r in json.loads(path.read_text())["checkpoint"]["latest"]["resources"]
    ]


def _no_ciphertext(value: Any) -> Any:
    if isinstance(value, dict):
        if "ciphertext" in value:
            return "<secret>"
        return {k: _no_ciphertext(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_ciphertext(v) for v in value]
    return value


# --------------------------------------------------------------- Queue objects


def _queue(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kmsvc.io/v1",
        "kind": "Queue",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(ENABLED)},
        "spec": spec,
    }


def _malformed_queues(ns: str) -> list[tuple[str, Any, str]]:
    """(id, object, text the rejection names): what a buggy client could hand over."""
    ok = _queue(ns, "fine")
    return [
        ("not-a-mapping", ["Queue"], "expected a mapping"),
        ("api-version", dict(ok, apiVersion="kmsvc.io/v2"), "apiVersion: must be kmsvc.io/v1"),
        ("kind", dict(ok, kind="Topic"), "kind: must be Queue"),
        ("metadata-list", dict(ok, metadata=["x"]), "metadata: expected a mapping"),
        ("spec-string", dict(ok, spec="fifo"), "spec: expected a mapping"),
        ("no-name", dict(ok, metadata={"namespace": ns, "labels": ENABLED}), "metadata.name"),
        ("upper-name", _queue(ns, "Orders"), "metadata.name"),
        ("name-underscore", _queue(ns, "or_ders"), "metadata.name"),
        ("bad-namespace", _queue("Not_A_Namespace", "q"), "metadata.namespace"),
        ("partitions-zero", _queue(ns, "p0", partitions=0), "spec.partitions"),
        ("partitions-string", _queue(ns, "ps", partitions="six"), "spec.partitions"),
        ("fifo-string", _queue(ns, "fs", fifo="maybe"), "spec.fifo"),
        (
            "labels-list",
            dict(ok, metadata={"name": "l", "namespace": ns, "labels": ["x"]}),
            "labels",
        ),
    ]


def test_every_malformed_queue_object_is_refused_naming_the_object_and_the_field() -> None:
    failures = []
    for case_id, obj, expected in _malformed_queues("ns1"):
        try:
            load_queue_object(obj)
        except SpecError as exc:
            if not any(line.startswith("kmsvc.io/v1 Queue ") for line in exc.lines()):
                failures.append(f"{case_id}: object not named: {exc.lines()}")
            elif expected not in str(exc):
                failures.append(f"{case_id}: {expected!r} not in {exc.lines()}")
            continue
        failures.append(f"{case_id}: accepted")
    assert failures == []


def test_the_program_skips_malformed_queue_objects_in_its_overlay_and_applies_the_valid_one(
    local_env: LocalEnvironment,
    kube: Any,
    deployed: tuple[FleetStack, dict[str, Any]],
    tmp_path: Path,
) -> None:
    fs, fleet = deployed
    ns = fleet["workers"][0]["namespace"]
    objects = [obj for _, obj, _ in _malformed_queues(ns)]
    # Valid alone, but its derived worker's name would exceed 63 characters.
    objects.append(_queue(ns, "q" * 57))
    objects.append(_queue(ns, "fine", partitions=3))
    # The Queue objects as the daemon hands them to the program (no other objects).
    cluster = {kind: ObjectList.known([]) for kind in CLUSTER_KINDS}
    cluster[QUEUE_KIND_KEY] = ObjectList.known(objects)
    inputs = DesiredInputs(cluster=cluster).to_file(tmp_path / "inputs.json")
    fs.env[INPUTS_ENV] = str(inputs)
    try:
        result = fs.up()
    finally:
        del fs.env[INPUTS_ENV]

    assert result.summary.result == "succeeded"
    assert kube.get_deployment(ns, "worker-fine")["spec"]["replicas"] == 3
    deployments = {d.metadata.name for d in kube.apps.list_namespaced_deployment(ns).items}
    assert deployments == {"alpha", "worker-orders", "worker-fine"}
    assert "skipping invalid Queue object" in result.stdout + result.stderr


def test_the_daemon_skips_invalid_queue_objects_in_the_cluster_without_blocking_valid_ones(
    local_env: LocalEnvironment,
    kube: Any,
    deployed: tuple[FleetStack, dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    from twc.cli.run import RunOptions, run_daemon

    fs, fleet = deployed
    ns = fleet["workers"][0]["namespace"]
    long_name = "q" + uuid.uuid4().hex * 2  # valid for the API, too long for "worker-<name>"
    created = [
        _queue(ns, "valid", partitions=2),
        _queue(ns, long_name[:60]),
        # Declared in the file too: the file wins, the object is ignored.
        _queue(ns, "orders"),
    ]
    # The file's worker "worker-clash" takes the name Queue "clash" would derive.
    fs.write(
        dict(
            fleet,
            workers=[
                *fleet["workers"],
                {"name": "worker-clash", "namespace": ns, "taskQueueName": "tq-clash"},
            ],
        )
    )
    created.append(_queue(ns, "clash"))
    for obj in created:
        kube.custom.create_namespaced_custom_object(*QUEUE_API[:2], ns, QUEUE_API[2], obj)
    try:
        with caplog.at_level(logging.INFO):
            code = run_daemon(
                RunOptions(
                    stack=fs.name,
                    fleet_file=str(fs.fleet_file),
                    port=free_port(),
                    # Its own /status port too: the default one may be another test's
                    # daemon's on the same machine.
                    status_port=free_port(),
                    once=True,
                )
            )
    finally:
        for obj in created:
            kube.custom.delete_namespaced_custom_object(
                *QUEUE_API[:2], ns, QUEUE_API[2], obj["metadata"]["name"]
            )

    assert code == 0, caplog.text
    assert kube.get_deployment(ns, "worker-valid")["spec"]["replicas"] == 2
    assert kube.get_deployment(ns, "worker-clash") is not None  # the file's own worker
    assert kube.get_deployment(ns, f"worker-{long_name[:60]}"[:63]) is None
    # Logged with what happens to the object's workers: a new object has none, so it
    # is left out.
    skipped = [
        r.getMessage()
        for r in caplog.records
        if "invalid Queue object" in r.getMessage() and "left out" in r.getMessage()
    ]
    assert any(f"{ns}/{long_name[:60]}" in m and "name" in m for m in skipped), skipped
    assert any(f"{ns}/clash" in m for m in skipped), skipped
