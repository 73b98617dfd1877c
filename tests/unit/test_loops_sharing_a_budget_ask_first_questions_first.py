"""The shards' loops share one question budget: a loop re-asking about queues it already
has answers for leaves :data:`~twc.reconcile.asking.FIRST_RESERVE` of it to the other
loops' first questions, so a shard's new workers are not starved of their first check by
another shard's re-checks. Temporal is faked (every queue has no poller); the budget's
clock is virtual."""

from __future__ import annotations

from tests.unit._daemon_fakes import InlineAskerThread
from twc.reconcile.asking import BURST, FIRST_RESERVE, Asker, Budget, TaskQueueRef


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _refs(prefix: str, n: int) -> list[TaskQueueRef]:
    return [TaskQueueRef("default", f"{prefix}-{i}") for i in range(n)]


def _poll(asker: Asker, refs: list[TaskQueueRef], budget: Budget, now: float) -> int:
    asked: list[TaskQueueRef] = []

    async def pollers(ref: TaskQueueRef) -> int:
        asked.append(ref)
        return 0

    asker.poll(refs, pollers, now=now, reuse=lambda _: 0.0, take=budget.take)
    return len(asked)


def test_re_asks_leave_the_reserve_to_another_loops_first_questions() -> None:
    clock = Clock()
    budget = Budget(rate_per_s=BURST, burst=BURST, clock=clock)
    checked = Asker(thread=InlineAskerThread("checked"))
    new = Asker(thread=InlineAskerThread("new"))
    mine, theirs = _refs("checked", BURST), _refs("new", BURST)

    assert _poll(checked, mine, budget, clock.now) == BURST, "first questions take the burst"
    clock.now += 1.0  # the bucket is full again
    # Every one of its queues is due again: it re-asks, up to what the reserve leaves.
    assert _poll(checked, mine, budget, clock.now) == BURST - FIRST_RESERVE
    assert _poll(new, theirs, budget, clock.now) == FIRST_RESERVE

    clock.now += 1.0
    # Its own half never asked goes first (the reserve's worth), its re-asks stop there.
    assert _poll(new, theirs, budget, clock.now) == BURST - FIRST_RESERVE
