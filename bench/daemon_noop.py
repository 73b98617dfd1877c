"""Item 2: the daemon's no-op iteration (nothing changed: no engine run at all).

With the daemon in the tree (``twc.loop.daemon``) its own ``plan`` runs with the
real collaborators ``twc run`` wires (fleet file, Queue watch cache, Deployment replica
read, hashing) followed by ``decide_reconcile``, which must say SKIP. The stand-in is what
such an iteration must do at least, built from the daemon's pure core: load the fleet
file, LIST the labelled Queue objects, hash, decide. Both are measured when both exist.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.stats import summarize
from bench.timing import timed

log = logging.getLogger(__name__)

QUEUE_SELECTOR = "temporal.io/worker-enabled=true"


def daemon_available() -> bool:
    """Whether the daemon loop (``twc.loop.daemon``) is importable."""
    try:
        return importlib.util.find_spec("twc.loop.daemon") is not None
    except ImportError:
        return False


def _repeat_bounded(fn: Callable[[], object], trials: int, budget_s: float) -> list[float]:
    """Up to ``trials`` runs of ``fn``, fewer when ``budget_s`` seconds are used up."""
    times: list[float] = []
    start = time.monotonic()
    for _ in range(trials):
        times.append(timed(fn)[0])
        if time.monotonic() - start > budget_s:
            break
    return times


def standin_iteration(fleet_file: Path, kube: Any) -> Callable[[], str]:
    """The least a no-op iteration does: load, LIST Queue objects, hash, decide."""
    from twc.loop.decide import ReconcileAction, decide_reconcile, desired_state
    from twc.spec import load_fleet_file, load_queue_object

    def render() -> Any:
        fleet = load_fleet_file(fleet_file)
        objects = kube.list_custom("kmsvc.io", "v1", "queues", label_selector=QUEUE_SELECTOR)
        queues = sorted(
            (load_queue_object(o).model_dump(mode="json") for o in objects),
            key=lambda q: (q["namespace"], q["name"]),
        )
        workers = {
            f"{w.namespace}/{w.name}": w.model_dump(mode="json") for w in fleet.resolved_workers()
        }
        shared = {
            "fleet": fleet.model_dump(
                mode="json", include={"cluster_connections", "connections", "queues"}
            ),
            "cluster_queues": queues,
        }
        return desired_state(workers, shared=shared)

    applied = render()

    def iteration() -> str:
        decision = decide_reconcile(applied, render(), target_threshold=3)
        if decision.action is not ReconcileAction.SKIP:
            raise RuntimeError(f"no-op iteration decided {decision.action}: {decision.reason}")
        return decision.action.value

    return iteration


def daemon_iteration(
    fleet_file: Path, ref: Any, api_client: Any
) -> tuple[Callable[[], str], Callable[[], None]]:
    """The daemon's own planning + decision on its real collaborators.

    Returns:
        The iteration, and a function that stops the Queue watch.
    """
    from twc.kube.client import KubeClient
    from twc.kube.watch import QueueWatcher
    from twc.kube.workloads import Workloads
    from twc.loop.act import Effects
    from twc.loop.backlog import TemporalBacklogs
    from twc.loop.daemon import Daemon
    from twc.loop.decide import ReconcileAction, decide_reconcile
    from twc.loop.observe import Sources
    from twc.loop.settings import DaemonSettings
    from twc.loop.state import LoopState
    from twc.spec import load_fleet_file
    from twc.stackrun.automation import AutomationEngine

    settings = DaemonSettings()
    kube = KubeClient(api_client)
    workloads = Workloads(kube)
    queues = QueueWatcher(kube.custom, resync_interval=settings.resync_interval)
    config = dict(ref.config or {})
    daemon = Daemon(
        ref.name,
        settings,
        Sources(
            fleet=lambda: load_fleet_file(fleet_file),
            queues=queues,
            backlogs=TemporalBacklogs(
                read_secret=workloads.read_secret,
                temporal_address=config.get("temporalAddress"),
            ),
            replicas=workloads.worker_replicas,
            file=str(fleet_file),
        ),
        Effects(engine=AutomationEngine(ref)),
        program={"config": config},
    )
    queues.start(threading.Event())
    deadline = time.monotonic() + 30
    while queues.snapshot() is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the Queue watch never listed")
        time.sleep(0.05)
    state = LoopState(started_at=time.monotonic())
    state = replace(state, applied=daemon.plan(state, now=time.monotonic()).hashes)

    def iteration() -> str:
        plan = daemon.plan(state, now=time.monotonic())
        decision = decide_reconcile(
            state.applied, plan.hashes, target_threshold=settings.target_threshold
        )
        if decision.action is not ReconcileAction.SKIP:
            raise RuntimeError(f"no-op iteration decided {decision.action}: {decision.reason}")
        return decision.action.value

    return iteration, queues.stop


def measure_noop(
    fleet_file: Path, ref: Any, kube: Any, *, trials: int, budget_s: float = 20.0
) -> dict[str, Any]:
    """Time no-op iterations: the daemon's (when present) and the stand-in's.

    Returns:
        ``{"daemon": summary | None, "standin": summary, "source": ...}``; ``noop_s`` is
        the figure compared with a preview (the daemon's when present).
    """
    out: dict[str, Any] = {"daemon": None}
    standin = standin_iteration(fleet_file, kube)
    standin()  # warm: imports, connection pool
    out["standin"] = summarize(_repeat_bounded(standin, trials, budget_s))
    if daemon_available():
        iteration, stop = daemon_iteration(fleet_file, ref, kube.api_client)
        try:
            iteration()
            out["daemon"] = summarize(_repeat_bounded(iteration, trials, budget_s))
        finally:
            stop()
    out["source"] = "twc.loop.daemon" if out["daemon"] else "stand-in"
    out["parts"] = _parts(fleet_file, kube, trials=min(trials, 10))
    out["noop_s"] = out["daemon"] or out["standin"]
    return out


def _parts(fleet_file: Path, kube: Any, *, trials: int) -> dict[str, Any]:
    """The pieces of a no-op iteration on their own: where its time goes."""
    from twc.spec import load_fleet_file

    def list_queues() -> object:
        return kube.list_custom("kmsvc.io", "v1", "queues", label_selector=QUEUE_SELECTOR)

    out: dict[str, Any] = {
        "load_fleet_file": summarize(
            [timed(lambda: load_fleet_file(fleet_file))[0] for _ in range(trials)]
        ),
        "list_queues": summarize([timed(list_queues)[0] for _ in range(trials)]),
    }
    if daemon_available():
        from twc.kube.client import KubeClient
        from twc.kube.workloads import Workloads

        workloads = Workloads(KubeClient(kube.api_client))
        out["worker_replicas"] = summarize(
            [timed(workloads.worker_replicas)[0] for _ in range(trials)]
        )
    return out
