"""``/healthz`` sees a hung loop while an engine runs (#35 item 6).

The fault: the fleet file's read blocks (here a FIFO with no writer put in its place, as
a hung network mount of the file would), so the loop's thread stops in the middle of an
iteration while an ``up`` runs on the engine's thread: the up adds a worker whose task-queue
check waits two minutes for pollers. The probe fails within the liveness timeout though
the engine's run goes on (its deadline is 1800 s); once the read returns, the loop goes
on, the probe passes again, and the up finishes with nothing lost or changed besides
the worker the file added.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import fleet_doc
from tests.e2e.daemon_process import FAST, Daemons, eventually, wait_for_success, wait_until_settled
from tests.e2e.native import Kubelet
from tests.faults._checks import assert_converged, deployment_bytes
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.usefixtures("engine_env")]

SETTINGS = {**FAST, "liveness_timeout": 5.0}


def _hang(fleet_file: Path) -> Path:
    """Put a FIFO in the fleet file's place; returns a second name of the FIFO."""
    fifo, link = fleet_file.with_suffix(".fifo"), fleet_file.with_suffix(".fifo-link")
    os.mkfifo(fifo)
    os.link(fifo, link)
    os.replace(fifo, fleet_file)
    return link


def _unhang(fleet_file: Path, link: Path, text: bytes) -> None:
    """The file back in place, then the blocked reader answered with the same bytes."""
    regular = fleet_file.with_suffix(".regular")
    regular.write_bytes(text)
    os.replace(regular, fleet_file)
    try:
        fd = os.open(link, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # no reader waits on the FIFO any more
    with os.fdopen(fd, "wb") as writer:
        writer.write(text)


def test_healthz_fails_while_the_loop_hangs_during_an_up_and_passes_once_it_goes_on(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    task_queue: str,
    daemons: Daemons,
) -> None:
    address = local_env.temporal_address()

    def fleet(*names: str) -> dict[str, Any]:
        workers = [
            {"name": n, "namespace": namespace, "taskQueueName": f"{task_queue}-{n}"} for n in names
        ]
        return fleet_doc(namespace, host_port=address, workers=workers)

    fs = daemons.stack(fleet("alpha"), waitForPollersSeconds="120")
    with Kubelet(kube, namespace, "alpha"):
        daemon = daemons.start(fs, settings=SETTINGS)
        wait_for_success(daemon, timeout=180)
        wait_until_settled(daemon)
        before = deployment_bytes(kube, namespace)
        assert daemon.answer("/healthz")[0] == 200

        # beta runs no worker: its check keeps the up waiting for two minutes.
        fs.write(fleet("alpha", "beta"))
        text = fs.fleet_file.read_bytes()
        eventually(
            lambda: (
                daemon.value("twc_engine_in_progress") == 1
                and any("pulumi-language-python" in line for _, line in daemon.engine_processes())
            ),
            timeout=180,
            message=lambda: f"the up never ran the program:\n{daemon.text()[-3000:]}",
        )
        link, hung = _hang(fs.fleet_file), time.monotonic()
        try:
            code, body = eventually(
                lambda: (found := daemon.answer("/healthz"))[0] != 200 and found,
                timeout=60,
                message="/healthz never failed while the loop hung",
            )
            failed = time.monotonic() - hung
            assert daemon.value("twc_engine_in_progress") == 1, "the up ended first"
        finally:
            _unhang(fs.fleet_file, link, text)
        assert code == 503
        assert "no progress" in body

        went_on = time.monotonic()
        eventually(
            lambda: daemon.answer("/healthz")[0] == 200,
            timeout=60,
            message="/healthz never passed again once the loop went on",
        )
        passed = time.monotonic() - went_on
        with Kubelet(kube, namespace, "beta"):
            wait_until_settled(daemon)
            assert deployment_bytes(kube, namespace)["alpha"] == before["alpha"]
            assert_converged(kube, daemon, fs, namespace, {"alpha", "beta"})
            assert daemon.terminate() == 0
    print(
        f"loop hung during an up: /healthz failed {failed:.1f} s after the hang (liveness "
        f"timeout 5 s, interval 1 s) with the up running; passed {passed:.1f} s after it ended"
    )
