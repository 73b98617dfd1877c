"""A change to a worker does not wait for the drift-detecting refresh in progress.

At 1000 workers a refresh of a 250-worker shard takes one to two minutes, and a change
that came meanwhile waited all of it (bench/refresh-yields/results.md). A refresh only reads, so it
gives way: the engine guard sends the CLI its SIGINT, the CLI ends the refresh cleanly
(lock released), the change's ``up`` runs, and the refresh, still due, runs after it.
Here, on the real engine, a daemon refreshes back to back (every second) while the file
is edited; every Deployment is kept, only the edited one changes, and the state is
left clean.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc, plain_workers
from tests.e2e.daemon_process import FAST, DaemonProcess, Daemons, eventually, wait_for_success
from tests.faults._checks import assert_state_clean
from twc.engine.supervisor import JournalEntry
from twc.local.environment import LocalEnvironment

pytestmark = pytest.mark.e2e

REFRESHING: dict[str, Any] = {
    **FAST,
    "reconcile_interval": 3600.0,
    "refresh_interval": 1.0,
}
"""Nothing but the file watch wakes the loop for a change, and a refresh is due a second
after the last one ended: the engine refreshes nearly all the time."""

WORKERS = ("edited", "alpha", "beta", "gamma")


SEEN: list[str] = []


def _refreshing(daemon: DaemonProcess) -> bool:
    """Whether the CLI's ``refresh`` itself runs (not the steps before it)."""
    found = [line for _, line in daemon.engine_processes() if " refresh --" in line]
    SEEN.extend(found)
    return bool(found)


def _image(kube: Any, namespace: str, name: str) -> str | None:
    dep = kube.get_deployment(namespace, name)
    return None if dep is None else str(dep["spec"]["template"]["spec"]["containers"][0]["image"])


def _preempted(daemon: DaemonProcess) -> list[JournalEntry]:
    return [e for e in daemon.journal() if e.cause == "preempt"]


def test_an_edit_during_a_refresh_stops_the_refresh_and_is_applied_first(
    local_env: LocalEnvironment, namespace: str, kube: Any, daemons: Daemons
) -> None:
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=plain_workers(namespace, WORKERS),
    )
    fleet["clusterObjects"] = False  # the file alone: no other test's object wakes the loop
    fs = daemons.stack(fleet)
    daemon = daemons.start(fs, settings=REFRESHING)
    wait_for_success(daemon)
    before = {name: kube.get_deployment(namespace, name) for name in WORKERS}
    assert all(before.values())

    # A refresh runs nearly all the time, but an edit may still land after it ended: try
    # a few edits, each made while the CLI's refresh is seen running.
    image = ""
    for attempt in range(1, 9):
        eventually(
            lambda: _refreshing(daemon), timeout=60, message="no refresh ever ran", interval=0.05
        )
        image = f"registry.example/worker:2.{attempt}"
        edited = copy.deepcopy(fleet)
        edited["workers"][0]["image"] = image
        fs.write(edited)
        eventually(
            lambda image=image: _image(kube, namespace, "edited") == image,
            timeout=120,
            message=f"the edit to {image} never reached the Deployment",
        )
        if _preempted(daemon):
            break
    stopped = _preempted(daemon)
    assert stopped, f"no edit ever met a refresh in progress: {SEEN}"
    assert all(e.command[:1] == ("refresh",) for e in stopped), [e.command for e in stopped]
    assert all(e.code != 0 for e in stopped), "a stopped refresh is no success"
    text = daemon.text()
    assert "refresh gives way to a change" in text
    assert "refresh stopped for a change" in text
    # Giving way is no failure: no fault, no failed iteration.
    assert daemon.count("twc_reconcile_total", result="temporary") == 0
    assert "EngineInterrupted" not in daemon.status().get("faults", {})

    # The refresh still ran afterwards, to its end.
    last = stopped[-1]
    eventually(
        lambda: any(
            e.command[:1] == ("refresh",) and e.started > last.ended and e.interrupted is None
            for e in daemon.journal()
        ),
        timeout=120,
        message="no refresh ran to its end after the one that gave way",
    )

    # Nothing lost: the same Deployments, only the edited one changed.
    for name, old in before.items():
        now = kube.get_deployment(namespace, name)
        assert now is not None, f"{name} was deleted"
        assert now["metadata"]["uid"] == old["metadata"]["uid"], name
        if name != "edited":
            assert now["metadata"]["generation"] == old["metadata"]["generation"], name
    assert daemon.terminate() == 0
    assert_state_clean(fs, namespace, set(WORKERS))
