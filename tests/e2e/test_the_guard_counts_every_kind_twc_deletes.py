"""The deletion guard counts every kind of object twc deletes, not only whole workers:
four workers dropping their PodDisruptionBudgets at once, or the fleet dropping the four
Queue objects it created, are beyond the default share (one of four). Plain ``pulumi up``
and ``twc up`` then apply nothing (every Deployment byte for byte, every object still
there, no lock) until ``twc approve`` names that set or ``twc up --yes`` confirms it. The
daemon holds them too: a targeted up that would delete them runs whole-stack, where they
are judged."""

from __future__ import annotations

import io
import time
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc, plain_workers
from tests.e2e.daemon_process import (
    FAST,
    Daemons,
    eventually,
    wait_for_success,
    wait_until_settled,
)
from tests.faults._checks import assert_unchanged, deployment_bytes, lock_files
from twc.cli import up
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("operator_shell")]

NAMES = ("w0", "w1", "w2", "w3")


def _fleet(
    local_env: LocalEnvironment, namespace: str, *, replicas: int = 1, queues: int = 0
) -> Any:
    doc = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{**w, "replicas": replicas} for w in plain_workers(namespace, NAMES)],
        queues=[
            {"name": f"q{i}", "namespace": namespace, "createObject": True} for i in range(queues)
        ],
    )
    doc["clusterObjects"] = False
    return doc


def _uids(items: Any) -> dict[str, str]:
    return {i["metadata"]["name"]: i["metadata"]["uid"] for i in items}


def _pdbs(kube: Any, namespace: str) -> dict[str, str]:
    found = kube.api_client.sanitize_for_serialization(
        kube.policy.list_namespaced_pod_disruption_budget(namespace)
    )
    return _uids(found["items"])


def _queues(kube: Any, namespace: str) -> dict[str, str]:
    found = kube.custom.list_namespaced_custom_object("kmsvc.io", "v1", namespace, "queues")
    return _uids(found["items"])


def test_plain_pulumi_up_holds_every_pdb_going_at_once_until_approved(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    fs = fleet_stack(_fleet(local_env, namespace, replicas=2))
    fs.up()
    before, pdbs = deployment_bytes(kube, namespace), _pdbs(kube, namespace)
    assert sorted(pdbs) == sorted(NAMES)
    fs.write(_fleet(local_env, namespace, replicas=1))  # one replica needs no PDB

    refused = fs.plain_up()

    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said[-3000:]
    assert "DeletionsHeld: 4 of 4 PodDisruptionBudget objects would be deleted at once" in said
    assert f"twc approve --stack {fs.name}" in said, said[-3000:]
    assert_unchanged(before, deployment_bytes(kube, namespace))
    assert _pdbs(kube, namespace) == pdbs
    assert not lock_files(fs)

    out = io.StringIO()
    assert up.run_approve(fs.name, out=out, err=io.StringIO()) == 0
    assert f"PodDisruptionBudget {namespace}/w0" in out.getvalue()
    applied = fs.plain_up()
    assert applied.returncode == 0, (applied.stdout + applied.stderr)[-3000:]
    assert _pdbs(kube, namespace) == {}
    assert sorted(deployment_bytes(kube, namespace)) == sorted(NAMES)
    # The approval is spent by the up it let through.
    assert up.run_approve(fs.name, out=io.StringIO(), err=io.StringIO()) == 1


def test_twc_up_holds_the_queue_objects_it_created_until_confirmed(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fs = fleet_stack(_fleet(local_env, namespace, queues=4))
    fs.up()
    before, queues = deployment_bytes(kube, namespace), _queues(kube, namespace)
    assert sorted(queues) == ["q0", "q1", "q2", "q3"]
    fs.write(_fleet(local_env, namespace))  # `queues:` dropped from the file
    capsys.readouterr()

    assert up.run_up(fs.name, str(fs.fleet_file), out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert "DeletionsHeld: 4 of 4 Queue objects would be deleted at once" in err, err[-3000:]
    assert f"twc up --stack {fs.name} --yes" in err
    assert_unchanged(before, deployment_bytes(kube, namespace))
    assert _queues(kube, namespace) == queues
    assert not lock_files(fs)

    assert up.run_up(fs.name, str(fs.fleet_file), out=io.StringIO(), yes=True) == 0
    assert _queues(kube, namespace) == {}
    assert_unchanged(before, deployment_bytes(kube, namespace))


def test_the_daemon_holds_every_pdb_going_at_once_until_approved(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    daemons: Daemons,
    pulumi_env: dict[str, str],
) -> None:
    fs = daemons.stack(_fleet(local_env, namespace, replicas=2))
    daemon = daemons.start(fs, settings=FAST)
    wait_for_success(daemon, timeout=120)
    wait_until_settled(daemon)
    before, pdbs = deployment_bytes(kube, namespace), _pdbs(kube, namespace)
    assert sorted(pdbs) == sorted(NAMES)

    # Four changed workers make a targeted up; deleting their PDBs makes it whole-stack.
    edited = time.monotonic()
    fs.write(_fleet(local_env, namespace, replicas=1))
    held = "DeletionsHeld: 4 of 4 PodDisruptionBudget objects would be deleted at once"
    eventually(lambda: held in daemon.text(), timeout=120, message="the PDBs were never held")
    took = time.monotonic() - edited
    assert daemon.count("twc_reconcile_errors_total", reason="DeletionsHeld") >= 1
    assert_unchanged(before, deployment_bytes(kube, namespace))
    assert _pdbs(kube, namespace) == pdbs

    approving = time.monotonic()
    approved = fs.approve()
    assert approved.returncode == 0, approved.stderr
    assert f"PodDisruptionBudget {namespace}/w3" in approved.stdout
    eventually(
        lambda: _pdbs(kube, namespace) == {},
        timeout=120,  # the daemon retries the refused up with backoff
        message="the approved deletions never proceeded",
    )
    applied = time.monotonic() - approving
    wait_until_settled(daemon)
    assert sorted(deployment_bytes(kube, namespace)) == sorted(NAMES)
    assert not lock_files(fs)
    print(f"PDBs held {took:.1f} s after the edit; deleted {applied:.1f} s after twc approve")
