"""The daemon's plan is a pure function of what was observed, the loop's state and the
time: one table of cases, each an input (the fleet applied before, the fleet now, live
replicas, backlogs, a blocked hash) and the plan expected (skip / targeted / full ``up``
and its workers, the replicas decided, the Deployments to scale), in the style of the
official worker controller's planner tests."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from tests.unit._daemon_fakes import NS, autoscaled, fleet_data
from twc.connections import default_registry
from twc.errors import TemporaryError
from twc.reconcile.observe import Observation, WorkerFacts
from twc.reconcile.plan import Memo, Plan, desired_from, make_plan
from twc.reconcile.settings import DaemonSettings
from twc.reconcile.state import DesiredState, LoopState, ReconcileAction
from twc.spec import load_fleet

SKIP, TARGETED, FULL = ReconcileAction.SKIP, ReconcileAction.TARGETED, ReconcileAction.FULL
NOW = 1000.0


def plain(name: str, image: str = "registry.example/worker:1.0.0") -> dict[str, Any]:
    return {"name": name, "namespace": NS, "taskQueueName": name, "image": image}


def fleet(*workers: dict[str, Any], host: str = "temporal.example:7233") -> dict[str, Any]:
    doc = fleet_data(workers=list(workers))
    doc["clusterConnections"][0]["hostPort"] = host
    return doc


TWO = fleet(plain("a"), plain("b"))


@dataclass(frozen=True)
class Case:
    """One row: the inputs of the plan, and what it must decide."""

    applied: dict[str, Any] | None  # the fleet the last up applied; None: nothing yet
    now: dict[str, Any]  # the fleet observed now
    action: ReconcileAction
    workers: frozenset[str] = frozenset()  # the changed workers
    live: dict[str, int] | None = field(default_factory=dict)  # Deployments' replicas
    backlogs: dict[str, int | None] = field(default_factory=dict)
    owned: frozenset[str] | None = None  # whose count the autoscaler owns already
    blocked: bool = False  # the fleet now failed permanently a moment ago
    replicas: dict[str, int] = field(default_factory=dict)  # expected, a subset
    scale: dict[str, int] = field(default_factory=dict)  # expected writes


def key(name: str) -> str:
    return f"{NS}/{name}"


CASES = {
    "nothing applied yet: a full up": Case(None, TWO, FULL),
    "unchanged: skip": Case(TWO, TWO, SKIP),
    "one image changed: targeted at it": Case(
        TWO, fleet(plain("a"), plain("b", "w:2")), TARGETED, frozenset({key("b")})
    ),
    "a worker added: targeted at it": Case(
        TWO, fleet(plain("a"), plain("b"), plain("c")), TARGETED, frozenset({key("c")})
    ),
    "a worker removed: targeted at it": Case(
        TWO, fleet(plain("a")), TARGETED, frozenset({key("b")})
    ),
    "a connection changed: a full up": Case(TWO, fleet(plain("a"), plain("b"), host="t:1"), FULL),
    "a permanently failed state: skip until it changes": Case(
        TWO, fleet(plain("a"), plain("b", "w:2")), SKIP, blocked=True
    ),
    "moving a worker in the file: skip": Case(TWO, fleet(plain("b"), plain("a")), SKIP),
    "a backlog scales without an up": Case(
        fleet(autoscaled("q")),
        fleet(autoscaled("q")),
        SKIP,
        live={key("q"): 1},
        backlogs={key("q"): 50},
        owned=frozenset({key("q")}),
        replicas={key("q"): 5},
        scale={key("q"): 5},
    ),
    "the decided count, already live and owned: nothing to write": Case(
        fleet(autoscaled("q")),
        fleet(autoscaled("q")),
        SKIP,
        live={key("q"): 5},
        backlogs={key("q"): 50},
        owned=frozenset({key("q")}),
        replicas={key("q"): 5},
    ),
    "the decided count, live but not owned yet: claimed": Case(
        fleet(autoscaled("q")),
        fleet(autoscaled("q")),
        SKIP,
        live={key("q"): 5},
        backlogs={key("q"): 50},
        owned=frozenset(),
        replicas={key("q"): 5},
        scale={key("q"): 5},
    ),
    "no Deployment yet: its creation sets the count": Case(
        None, fleet(autoscaled("q")), FULL, backlogs={key("q"): 50}
    ),
    "live counts unknown: nothing written blind": Case(
        fleet(autoscaled("q")),
        fleet(autoscaled("q")),
        SKIP,
        live=None,
        backlogs={key("q"): 50},
    ),
    "a failed sample holds the live count": Case(
        fleet(autoscaled("q")),
        fleet(autoscaled("q")),
        SKIP,
        live={key("q"): 3},
        backlogs={key("q"): None},
        owned=frozenset({key("q")}),
        replicas={key("q"): 3},
    ),
}


def plan(
    doc: dict[str, Any],
    state: LoopState,
    case: Case,
    *,
    live_known: bool = True,
    facts: WorkerFacts | None = None,
    memo: Memo[DesiredState] | None = None,
) -> Plan:
    parsed = load_fleet(copy.deepcopy(doc), "t.yaml")
    seen = Observation(
        fleet=parsed, cluster=None, live=case.live, live_known=live_known, scaled=case.owned
    )
    desired = desired_from(seen, accepted={}, registry=default_registry(), file="t.yaml")
    return make_plan(
        seen,
        desired,
        facts or WorkerFacts(backlogs=case.backlogs),
        state,
        settings=DaemonSettings(),
        now=NOW,
        last_replicas={},
        program={},
        native=None,
        wall=NOW,
        memo=memo,
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_plan(case: Case) -> None:
    state = LoopState(started_at=0.0)
    if case.applied is not None:
        state = replace(state, applied=plan(case.applied, state, case).hashes)
    if case.blocked:
        blocked = plan(case.now, state, case).hashes.fleet
        state = replace(state, blocked=blocked, blocked_at=NOW - 1)

    result = plan(case.now, state, case)

    assert result.decision.action is case.action, result.decision.reason
    assert result.decision.workers == case.workers
    assert {k: result.replicas[k] for k in case.replicas} == case.replicas
    assert dict(result.scale) == case.scale


def test_an_autoscaled_worker_whose_count_cannot_be_read_is_not_planned_blind() -> None:
    case = Case(None, fleet(autoscaled("q")), FULL, live={}, backlogs={key("q"): 50})

    with pytest.raises(TemporaryError, match="not scaling it blind"):
        plan(case.now, LoopState(started_at=0.0), case, live_known=False)


def test_one_memo_hashes_the_same_fleet_once_and_anything_changed_again() -> None:
    memo: Memo[DesiredState] = Memo()
    state, case = LoopState(started_at=0.0), Case(None, TWO, FULL)

    first = plan(TWO, state, case, memo=memo).hashes
    assert plan(TWO, state, case, memo=memo).hashes is first  # an equal fleet and facts
    rotated = WorkerFacts(credentials={f"{NS}/tls": "other"})
    assert plan(TWO, state, case, facts=rotated, memo=memo).hashes.shared != first.shared

    changed = fleet(plain("a", "registry.example/worker:2.0.0"), plain("b"))
    again = plan(changed, state, case, memo=memo).hashes
    assert again == plan(changed, state, case).hashes
    assert again.workers[key("a")] != first.workers[key("a")]
    assert again.workers[key("b")] == first.workers[key("b")]
