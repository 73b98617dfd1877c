"""The daemon starts without the right to list worker Deployments (its ClusterRole's rule
revoked), so it cannot know which workers run, while the fleet file dropped one worker
of four — a deletion the guard's share would let through. Unknown, it is held
(``DeletionsHeld`` on ``/status``) and every Deployment stays byte for byte; once the
list is granted again the deletion goes through and the stack converges."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.rbac import daemon_identity
from tests.faults._checks import assert_converged, assert_unchanged, deployment_bytes
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

WORKERS = [f"w{i}" for i in range(4)]
# A denied list is tried again at the resync interval: seconds here instead of minutes.
SETTINGS = {**FAST, "resync_interval": 3.0}


def _fleet(local_env: LocalEnvironment, namespace: str, names: list[str]) -> dict[str, Any]:
    workers = [{"name": n, "namespace": namespace, "taskQueueName": f"tq-{n}"} for n in names]
    return fleet_doc(namespace, host_port=local_env.temporal_address(), workers=workers)


def _without_deployment_list(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept = [r for r in rules if "deployments" not in r["resources"] or "list" not in r["verbs"]]
    assert len(kept) < len(rules), rules
    return kept


def test_deletions_wait_while_the_running_workers_cannot_be_listed(
    local_env: LocalEnvironment, kube: Any, namespace: str, daemons: Daemons, tmp_path: Path
) -> None:
    identity = daemon_identity(local_env, kube, tmp_path, namespace)
    fs = daemons.stack(_fleet(local_env, namespace, WORKERS))
    fs.env["KUBECONFIG"] = str(identity.kubeconfig)
    fs.env["TWC_CONTROL_NAMESPACE"] = namespace
    daemon = daemons.start(fs, settings=SETTINGS)
    wait_for_success(daemon, timeout=120)
    for name in WORKERS:
        eventually(
            lambda name=name: kube.get_deployment(namespace, name),
            timeout=120,
            message=f"{name} was never deployed",
        )
    wait_until_settled(daemon)
    assert daemon.terminate() == 0

    rules = copy.deepcopy(identity.cluster_role["rules"])
    identity.replace_rules(kube, _without_deployment_list(rules))
    before = deployment_bytes(kube, namespace)
    fs.write(_fleet(local_env, namespace, WORKERS[:3]))  # one of four: within the share
    daemon = daemons.start(fs, settings=SETTINGS)
    held = eventually(
        lambda: daemon.status().get("heldDeletions"),
        timeout=120,
        message="the deletion was never held while the Deployments could not be listed",
    )
    assert held["workers"] == [f"{namespace}/w3"], held
    wait_until_settled(daemon)
    assert_unchanged(before, deployment_bytes(kube, namespace))

    identity.replace_rules(kube, rules)
    eventually(
        lambda: kube.get_deployment(namespace, "w3") is None,
        timeout=180,
        message="the deletion never went through once the list was granted again",
    )
    wait_until_settled(daemon)
    assert daemon.status()["heldDeletions"] is None
    assert_converged(kube, daemon, fs, namespace, set(WORKERS[:3]))
