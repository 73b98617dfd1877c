"""A targeted up hands the program the workers it targets (``BuildScope``) when the
stack is as the engine's last update left it; otherwise the program builds everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pulumi.automation import Deployment

from twc.desired import DesiredInputs
from twc.engine import engine as engine_module
from twc.engine.automation import WORKER_TYPE, AutomationEngine, new_worker_targets

pytestmark = pytest.mark.unit

STACK = "s"
TYPE = WORKER_TYPE


def _urn(key: str, child: str = "") -> str:
    suffix = f"${child}::{key}-{child.split(':')[-1].lower()}" if child else f"::{key}"
    return f"urn:pulumi:{STACK}::twc::{TYPE}{suffix}"


def _resources(keys: list[str], half: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in keys:
        out.append({"urn": _urn(key), "type": TYPE})
        if key in half:
            continue  # a killed up recorded its component, never its Deployment
        out.append(
            {"urn": _urn(key, "kubernetes:apps/v1:Deployment"), "parent": _urn(key), "type": "d"}
        )
    return out


def _at(update: int) -> datetime:
    return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=10 * update)


@dataclass
class History:
    version: int
    start_time: datetime
    end_time: datetime | None = None


@dataclass
class FakeStack:
    """The stack's history and state as the CLI would answer."""

    keys: list[str]
    version: int = 1
    """How many updates the stack had (each starts at its own time)."""
    exports: int = 0
    numbered: bool = True
    """Whether the history numbers the updates; the file backend numbers each one 0."""

    def last(self) -> History:
        return History(self.version if self.numbered else 0, _at(self.version))

    def history(self, page_size: int | None = None) -> list[History]:
        return [self.last()]

    drift: list[str] = field(default_factory=list)

    half: tuple[str, ...] = ()
    """Workers a killed up left half created."""

    def export_stack(self) -> Deployment:
        self.exports += 1
        return Deployment(version=3, deployment={"resources": _resources(self.keys, self.half)})

    def refresh(self, *, on_event: Any, **_: Any) -> Any:
        """A refresh: a new version; the events say what drifted."""
        for urn in self.drift:
            meta = type("Meta", (), {"op": "update", "type": "kubernetes:apps/v1:Deployment"})
            meta.urn = urn  # type: ignore[attr-defined]
            on_event(type("Event", (), {"res_outputs_event": type("O", (), {"metadata": meta})}))
        self.version += 1
        return type("Result", (), {"summary": self.last()})


@dataclass
class Out:
    value: Any
    secret: bool = False


@dataclass
class FakeEngine:
    """``engine.up``: records the inputs handed to the program, bumps the version."""

    stack: FakeStack
    changes: dict[str, int] = field(default_factory=lambda: {"update": 2})
    scopes: list[Any] = field(default_factory=list)
    dependents: list[bool] = field(default_factory=list)
    """Per up, whether it targeted the targets' dependents too."""

    def up(self, ref: Any, **kwargs: Any) -> Any:
        inputs = DesiredInputs.from_file(ref.env["TWC_DESIRED_INPUTS"])
        self.scopes.append(inputs.scope)
        self.dependents.append(bool(kwargs.get("target_dependents")))
        self.stack.version += 1
        stack = self.stack

        class Summary:
            version = stack.last().version
            start_time = stack.last().start_time
            end_time = None
            resource_changes = self.changes

        @dataclass
        class Result:
            summary: Any
            outputs: dict[str, Out]

        return Result(Summary, {"workers": Out({k: {"phase": "Ready"} for k in stack.keys})})


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> tuple[AutomationEngine, FakeEngine]:
    stack = FakeStack(["team/a", "team/b", "team/c"])
    fake = FakeEngine(stack)
    monkeypatch.setattr(engine_module, "select_stack", lambda ref: stack)
    monkeypatch.setattr(engine_module, "up", fake.up)
    ref = engine_module.StackRef(name=STACK, config={"fleetFile": "f.yaml"})
    return AutomationEngine(ref, state_dir=tmp_path), fake


def _targeted(eng: AutomationEngine, key: str) -> None:
    eng.up(DesiredInputs(), list(eng.worker_urns()[key]))


def test_after_the_engines_own_full_up_a_targeted_up_builds_its_worker_alone(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)  # a full up: every worker built
    _targeted(eng, "team/b")

    assert fake.scopes[0] is None
    scope = fake.scopes[1]
    assert scope is not None
    assert scope.workers == ("team/b",)
    # The other workers' statuses as the stack recorded them: the outputs stay whole.
    assert sorted(scope.statuses) == ["team/a", "team/c"]
    assert fake.stack.exports == 1

    _targeted(eng, "team/c")  # the URNs are reused: nothing was created or deleted
    assert fake.scopes[2].workers == ("team/c",)
    assert fake.stack.exports == 1


def test_an_update_by_someone_else_makes_the_program_build_everything(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    fake.stack.version += 1  # a manual `twc up` from a laptop, say

    _targeted(eng, "team/a")

    assert fake.scopes[-1] is None
    assert fake.stack.exports == 1


def test_an_update_by_someone_else_is_seen_where_every_update_is_numbered_0(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    # The file backend numbers each update 0 in the history: the number alone took a
    # plain `pulumi up` for the daemon's own last update.
    eng, fake = world
    fake.stack.numbered = False
    eng.up(DesiredInputs(), None)
    fake.stack.version += 1  # someone else's update, also numbered 0

    _targeted(eng, "team/a")

    assert fake.scopes[-1] is None
    assert fake.stack.exports == 1


def test_a_targeted_up_that_created_something_reads_the_urns_again(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    fake.changes = {"create": 1, "update": 1}
    _targeted(eng, "team/a")
    fake.changes = {"update": 1}
    _targeted(eng, "team/b")

    assert fake.stack.exports == 2
    assert fake.scopes[-1].workers == ("team/b",)


def test_targets_that_are_not_whole_workers_build_everything(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    urns = eng.worker_urns()

    eng.up(DesiredInputs(), [urns["team/a"][1]])  # one child, not the worker

    assert fake.scopes[-1] is None


def test_without_a_look_at_the_history_just_before_nothing_is_scoped(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    urns = eng.worker_urns()
    eng.up(DesiredInputs(), None)

    eng.up(DesiredInputs(), list(urns["team/a"]))  # targets from before the last up

    assert fake.scopes[-1] is None


def test_the_part_a_targeted_up_builds_is_its_workers_and_their_queues() -> None:
    from twc.connections import default_registry
    from twc.desired import desired_fleet
    from twc.spec import load_fleet

    doc = {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {"image": "registry.example/w:1", "connectionRef": {"name": "c"}},
        "connections": [{"name": "c", "namespace": "team", "hostPort": "t.example:7233"}],
        "queues": [
            {"name": "orders", "namespace": "team", "workerEnabled": True},
            {"name": "billing", "namespace": "team", "workerEnabled": True},
        ],
        "workers": [{"name": "w", "namespace": "team", "taskQueueName": "w"}],
    }
    desired = desired_fleet(
        load_fleet(doc, "f.yaml"), DesiredInputs(), registry=default_registry(), file="f.yaml"
    )
    derived = next(k for k, w in desired.workers.items() if w.derived and w.queue is not None)
    queue = desired.workers[derived].queue
    assert queue is not None

    part = desired.only([derived, "team/w"])

    assert sorted(part.workers) == sorted([derived, "team/w"])
    assert [(q.namespace, q.name) for q in part.fleet.queues] == [(queue.namespace, queue.name)]
    assert set(part.origins) == set(part.workers)
    assert desired.only([]).workers == {}


def test_a_refresh_that_found_no_drift_keeps_the_next_change_built_alone(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    _targeted(eng, "team/a")
    assert eng.refresh() == []

    _targeted(eng, "team/b")

    assert fake.scopes[-1].workers == ("team/b",)
    assert fake.stack.exports == 1, "the URNs were kept across the refresh"


def test_a_refresh_that_found_drift_reads_the_state_again(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    _targeted(eng, "team/a")
    fake.stack.drift = [_urn("team/c", "kubernetes:apps/v1:Deployment")]
    assert eng.refresh() != []

    _targeted(eng, "team/b")

    assert fake.scopes[-1] is None, "without the statuses the program builds everything"
    assert fake.stack.exports == 2


def test_a_new_worker_is_built_alone_and_created_with_its_components_dependents(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    _targeted(eng, "team/b")
    assert fake.scopes[-1].workers == ("team/b",)
    eng.up(DesiredInputs(), [_urn("team/b", "kubernetes:apps/v1:Deployment")])
    assert fake.dependents[-1] is False, "no component targeted, no dependents"

    urns = eng.worker_urns()
    new = new_worker_targets(f"urn:pulumi:{STACK}", "twc", "team/q-w", queue="team/q")
    eng.up(DesiredInputs(), [*urns["team/a"], *new])

    assert fake.scopes[-1].workers == ("team/a", "team/q-w")
    assert sorted(fake.scopes[-1].statuses) == ["team/b", "team/c"]
    assert fake.dependents[-1] is True, "the new components' children have no URNs yet"
    assert new == [
        f"urn:pulumi:{STACK}::twc::twc:kmsvc:Queue::team/q",
        f"urn:pulumi:{STACK}::twc::twc:kmsvc:Queue${TYPE}::team/q-w",
    ]


def test_a_new_worker_named_like_a_held_one_or_an_unknown_urn_builds_everything(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    eng, fake = world
    eng.up(DesiredInputs(), None)
    eng.worker_urns()
    held = new_worker_targets(f"urn:pulumi:{STACK}", "twc", "team/a", queue="team/q")
    eng.up(DesiredInputs(), held)  # team/a under a queue: it moves, not a new worker
    assert fake.scopes[-1] is None

    eng.worker_urns()
    eng.up(DesiredInputs(), [f"urn:pulumi:{STACK}::twc::kubernetes:core/v1:Secret::x"])
    assert fake.scopes[-1] is None


def test_a_worker_a_killed_up_left_half_created_is_created_with_its_dependents(
    world: tuple[AutomationEngine, FakeEngine],
) -> None:
    # The killed up recorded the new worker's component and not its Deployment: the
    # component's URN alone, without its dependents, created nothing ("no changes"),
    # and the worker was taken as applied.
    eng, fake = world
    eng.up(DesiredInputs(), None)
    fake.stack.keys.append("team/new")
    fake.stack.half = ("team/new",)
    fake.stack.version += 1  # the killed up's own update
    assert eng.worker_urns()["team/new"] == [_urn("team/new")]

    eng.up(
        DesiredInputs(), new_worker_targets(f"urn:pulumi:{STACK}", "twc", "team/new", queue=None)
    )

    assert fake.dependents[-1] is True
