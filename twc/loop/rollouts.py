"""The daemon's reads and writes for versioned rollouts.

* observe: every version Deployment of the versioned workers (one list), then, per
  worker, Temporal's routing, the target's task queues, its gate runs and each live
  version's backlog (:func:`observe_facts`);
* act: after the ``up`` (or without one), each worker's plan — gate workflows, one
  routing change with its conflict token, versions to forget (:class:`RolloutActor`).

Everything is read back each iteration; nothing about a rollout lives in the daemon's
memory, so a restarted or new leader continues where the last one was.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from twc.desired import DesiredFleet
from twc.kube.versions import ObservedVersion
from twc.loop.versions import RolloutFacts, VersionsPlan
from twc.versioning import GateInputReader, RolloutResult, WorkerClients, carry_out_all

__all__ = ["RolloutActor", "RolloutSource", "observe_facts"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutSource:
    """Where the daemon reads versioned workers from (and routes through)."""

    versions: Callable[[], Mapping[str, Mapping[str, ObservedVersion]]]
    """Lists every version Deployment, per worker and build ID (raises on failure)."""
    clients: WorkerClients
    """Temporal's worker-deployment calls, per worker."""
    read_input: GateInputReader | None = None
    """Reads a gate's ``inputFrom``."""


def observe_facts(
    source: RolloutSource | None,
    desired: DesiredFleet,
    loop: asyncio.AbstractEventLoop,
    *,
    concurrency: int = 8,
) -> RolloutFacts | None:
    """The versioned workers as the cluster and Temporal show them now.

    Returns:
        Empty facts when no worker is versioned; ``None`` when there is no source to
        read them from (the plan then refuses to plan versioned workers blind).
    """
    from twc.versioning import observe_rollouts

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


class RolloutActor:
    """Carries out the versioned workers' plans for the loop."""

    def __init__(
        self,
        source: RolloutSource | None,
        *,
        stack: str,
        may_apply: Callable[[], bool],
        loop: Callable[[], asyncio.AbstractEventLoop],
    ) -> None:
        """Act through ``source`` (nothing without one).

        Args:
            source: The cluster and Temporal readers and writers.
            stack: The stack's name, for logs.
            may_apply: Whether this daemon may change anything now (it leads).
            loop: The event loop the Temporal clients live on.
        """
        self._source = source
        self._stack = stack
        self._may_apply = may_apply
        self._loop = loop

    def act(self, plan: VersionsPlan, desired: DesiredFleet) -> dict[str, RolloutResult]:
        """Carry out every worker's rollout plan; failures are results, never raised."""
        if self._source is None or not plan.plans or not self._may_apply():
            return {}
        results = self._loop().run_until_complete(
            carry_out_all(
                plan.plans,
                plan.observed,
                desired.workers,
                desired.fleet,
                self._source.clients,
                read_input=self._source.read_input,
            )
        )
        for key, result in sorted(results.items()):
            for action in result.done:
                logger.info("[%s/%s] rollout: %s", self._stack, key, action)
            if result.error:
                level = logging.INFO if result.conflict else logging.WARNING
                logger.log(level, "[%s/%s] rollout: %s", self._stack, key, result.error)
        for key, rollout_plan in sorted(plan.plans.items()):
            if rollout_plan.deleted:
                # The up that just ran left them out of the program.
                logger.info(
                    "[%s/%s] rollout: the Deployments of %s are deleted (sunset)",
                    self._stack,
                    key,
                    ", ".join(rollout_plan.deleted),
                )
        return results
