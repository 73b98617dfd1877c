"""``kill -9`` of the daemon in the middle of an ``up``, on the file backend and on
PostgreSQL, with each checkpoint setting: what the state lost is what docs/daemon.md
says, and the restarted daemon converges without re-creating any object.

* ``every-step``: the state recorded each object the engine had finished; only the
  steps in flight are lost (pending operations, dropped by the next daemon).
* ``final``: the state recorded nothing of the killed ``up``; the next ``up`` applies it
  again and adopts the objects it finds (a server-side apply), so nothing is created
  twice and no pod rolls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success

pytestmark = pytest.mark.e2e

NEW = ("g1", "g2", "g3", "g4")


@pytest.fixture
def backend_daemons(tmp_path: Path, backend_env: dict[str, str]) -> Iterator[Daemons]:
    """``twc run`` processes on the parametrised state backend."""
    made = Daemons(tmp_path, backend_env)
    yield made
    made.stop_all()
    for daemon in made.started:
        print(f"----- {daemon.name} (exit {daemon.exit_code}) -----")
        print(daemon.text()[-6000:])
    for fs in made.stacks:
        fs.stack().workspace.remove_stack(fs.name, force=True)


def _recorded(fs: Any, namespace: str) -> set[str]:
    """Workers whose Deployment the stack's state records."""
    state = fs.stack().export_stack().deployment or {}
    names = {r["urn"].rsplit("::", 1)[-1] for r in state.get("resources") or []}
    return {
        n.split("/", 1)[1].removesuffix("-deployment")
        for n in names
        if n.startswith(f"{namespace}/") and n.endswith("-deployment")
    }


def _pending(fs: Any) -> list[Any]:
    state = fs.stack().export_stack().deployment or {}
    return list(state.get("pending_operations") or [])


@pytest.mark.parametrize("checkpoints", ["every-step", "final"])
def test_a_crash_mid_up_loses_what_the_setting_says_and_the_stack_converges(
    local_env: Any,
    kube: Any,
    namespace: str,
    task_queue: str,
    backend_daemons: Daemons,
    checkpoints: str,
) -> None:
    address = local_env.temporal_address()

    def fleet(names: tuple[str, ...]) -> dict[str, Any]:
        workers = [
            {"name": n, "namespace": namespace, "taskQueueName": f"{task_queue}-{n}"} for n in names
        ]
        return fleet_doc(namespace, host_port=address, workers=workers)

    settings = {**FAST, "state": {"checkpoints": checkpoints}}
    fs = backend_daemons.stack(fleet(("alpha", "beta")), waitForPollersSeconds="0")
    first = backend_daemons.start(fs, settings=settings, name="first")
    wait_for_success(first, timeout=180)
    assert first.terminate() == 0
    assert _recorded(fs, namespace) == {"alpha", "beta"}

    # Four new workers whose task-queue checks wait a minute for pollers: the up is
    # still running well after their Deployments exist. That is when the kill lands.
    fs.write(fleet(("alpha", "beta", *NEW)))
    fs.extra_config["waitForPollersSeconds"] = "60"
    fs.stack()
    second = backend_daemons.start(fs, settings=settings, name="second")

    def created() -> int:
        return sum(1 for n in NEW if kube.get_deployment(namespace, n) is not None)

    def program_runs() -> bool:
        return any("pulumi-language-python" in line for _, line in second.engine_processes())

    # Early apply creates the Deployments before the engine runs: wait for the engine's
    # up to run the program too (it holds the stack's lock, then waits on the checks'
    # minute of waiting for pollers).
    eventually(
        lambda: created() == len(NEW) and program_runs(),
        timeout=180,
        message="the up never created them",
    )
    if checkpoints == "every-step":
        eventually(
            lambda: set(NEW) <= _recorded(fs, namespace),
            timeout=60,
            message="the state never recorded the finished Deployments",
        )
    assert second.value("twc_engine_in_progress") == 1
    uids = {n: kube.get_deployment(namespace, n)["metadata"]["uid"] for n in NEW}

    second.kill_9()

    recorded = _recorded(fs, namespace)
    if checkpoints == "every-step":
        # Each finished step was recorded; the checks in flight are pending.
        assert set(NEW) <= recorded
        assert _pending(fs), "the kill did not land during the up"
    else:
        # Nothing of the killed up was recorded: not its objects, not what was in flight.
        assert recorded == {"alpha", "beta"}
        assert not _pending(fs)

    fs.extra_config["waitForPollersSeconds"] = "0"
    fs.stack()
    third = backend_daemons.start(fs, settings=settings, name="third")
    wait_for_success(third, timeout=180)

    # The killed up never finished. Its CLI then died of SIGPIPE or SIGKILL holding the
    # stack's lock (the next daemon proves the holder gone and breaks it, logging
    # "breaking a stale lock") or stopped on its guard's SIGINT, releasing it: a race the
    # next daemon handles either way (tests/faults/..._read_only_state_backend.py breaks
    # a stale lock deterministically).
    up = [e for e in second.journal() if e.command[:1] == ("up",)][-1]
    assert up.code != 0, up
    assert not _pending(fs)
    assert _recorded(fs, namespace) == {"alpha", "beta", *NEW}
    for name in NEW:
        # Adopted, not created again: the same object.
        dep = kube.get_deployment(namespace, name)
        assert dep is not None
        assert dep["metadata"]["uid"] == uids[name]
    ups = third.ups()
    wait_for_success(third, after=third.successes() + 2, timeout=60)
    assert third.ups() == ups
    assert third.terminate() == 0
