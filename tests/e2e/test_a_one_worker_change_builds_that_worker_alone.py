"""A one-worker change is applied by a targeted up whose program builds that worker
alone; the engine keeps every other resource exactly as it is, and the stack's outputs
stay whole.

On the real daemon, engine and API server: three workers, then two image changes of
one of them (both target the URNs the full up's events named: no export of the state).
Each time only that worker's Deployment changes, the state still holds every worker's
resources, and ``workers`` in the stack outputs names all three.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc, plain_workers
from tests.e2e.daemon_process import Daemons, eventually, wait_for_success
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

WORKERS = ("alpha", "bravo", "charlie")
SCOPED = "the program builds 1 of 3 workers"


def _resources(fs: FleetStack) -> list[dict[str, Any]]:
    state = fs.stack().export_stack().deployment
    assert state is not None
    return list(state["resources"])


def _image(kube: Any, namespace: str, name: str) -> str | None:
    dep = kube.get_deployment(namespace, name)
    return None if dep is None else str(dep["spec"]["template"]["spec"]["containers"][0]["image"])


def test_an_image_change_builds_one_worker_and_keeps_the_rest_and_the_outputs(
    local_env: LocalEnvironment, namespace: str, kube: Any, daemons: Daemons
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=plain_workers(namespace, WORKERS),
    )
    fleet["clusterObjects"] = False  # the file alone: no other test's objects join
    fs = daemons.stack(fleet)
    daemon = daemons.start(fs)
    wait_for_success(daemon)
    state_before = {r["urn"] for r in _resources(fs)}
    others: dict[str, Any] = {n: kube.get_deployment(namespace, n) for n in ("alpha", "charlie")}
    assert all(others.values())

    edited = copy.deepcopy(fleet)
    for round_, image in enumerate(("registry.example/worker:2.0.0", "registry.example/w:3")):
        edited["workers"][1]["image"] = image
        fs.write(edited)
        eventually(
            lambda image=image: _image(kube, namespace, "bravo") == image,
            timeout=180,
            message=f"bravo never got {image}",
        )
        eventually(
            lambda round_=round_: daemon.text().count(SCOPED) >= round_ + 1,
            timeout=60,
            message=f"change {round_ + 1} was not applied by a one-worker program",
        )
        wait_for_success(daemon, after=daemon.successes())

        for name, before in others.items():
            after = kube.get_deployment(namespace, name)
            assert after is not None, f"{name}'s Deployment is gone"
            assert after["metadata"]["generation"] == before["metadata"]["generation"], name
            assert after["spec"]["template"] == before["spec"]["template"], name
        resources = _resources(fs)
        assert {r["urn"] for r in resources} == state_before, "no resource came or went"
        deployment = next(
            r for r in resources if r["urn"].endswith(f"{namespace}/bravo-deployment")
        )
        assert deployment["outputs"]["spec"]["template"]["spec"]["containers"][0]["image"] == image
        outputs = fs.stack().outputs()
        assert sorted(outputs["workers"].value) == sorted(f"{namespace}/{n}" for n in WORKERS)

    log = daemon.text()
    assert log.count(SCOPED) == 2
    # The full up's events named every worker's resources: no targeted up read the state.
    assert log.count("URNs read from an export of the state") == 0
    assert "up (full)" in log, "the first up built every worker"
    assert daemon.alive()
