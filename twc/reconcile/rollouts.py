"""The daemon's reads and writes for versioned rollouts.

:func:`observe_facts` reads version Deployments and Temporal's routing, queues, gates and
backlogs; :meth:`twc.reconcile.act.Actor.route` carries out each worker's plan. Nothing lives in
memory: a new leader continues where the last one was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from twc.desired import DesiredFleet
from twc.kube.workloads import ObservedVersion
from twc.reconcile.versions import RolloutFacts
from twc.versioning import GateInputReader, WorkerClients, observe_rollouts

__all__ = ["RolloutSource", "observe_facts"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutSource:
    """Where the daemon reads versioned workers from (and routes through)."""

    versions: Callable[[], Mapping[str, Mapping[str, ObservedVersion]]]  # per worker, build
    clients: WorkerClients
    read_input: GateInputReader | None = None  # a gate's ``inputFrom``


def observe_facts(
    source: RolloutSource | None,
    desired: DesiredFleet,
    loop: asyncio.AbstractEventLoop,
    *,
    concurrency: int = 8,
) -> RolloutFacts | None:
    """The versioned workers as seen now; ``None`` without a source (the plan refuses)."""
    versioned = [w for w in desired.workers.values() if w.rollout is not None]
    if not versioned:
        return RolloutFacts()
    if source is None:
        return None
    try:
        found = source.versions()
    except Exception as exc:  # noqa: BLE001 - unknown versions stop the plan, never delete them
        return RolloutFacts(error=f"{type(exc).__name__}: {exc}")
    deployments = {
        w.stack_key: {b: v.deployment for b, v in found.get(w.stack_key, {}).items()}
        for w in versioned
    }
    observed = loop.run_until_complete(
        observe_rollouts(
            versioned, desired.fleet, deployments, source.clients, concurrency=concurrency
        )
    )
    return RolloutFacts(
        observed=observed,
        specs={
            w.stack_key: {b: v.spec for b, v in found.get(w.stack_key, {}).items()}
            for w in versioned
        },
    )
