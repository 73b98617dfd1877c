"""``rollout`` and ``sunset``: the official worker controller's names, defaults and limits.

The models, their resolution into ``ResolvedWorker`` (worker over defaults, sunset's
defaults filled in) and the TemporalWorker CRD's CEL rules that restate them. What the
settings *do* (versioned Deployments, routing) is built elsewhere.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from twc.errors import SpecError
from twc.spec import Rollout, RolloutStrategy, Sunset, load_fleet, parse_duration
from twc.spec.crds import temporal_worker_crd

PROGRESSIVE = {
    "strategy": "Progressive",
    "steps": [
        {"rampPercentage": 10, "pauseDuration": "5m"},
        {"rampPercentage": 50, "pauseDuration": "10m"},
    ],
}


def _fleet(worker: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {"image": "reg/w:1", "connectionRef": {"name": "c"}, **(defaults or {})},
        "connections": [{"name": "c", "namespace": "apps", "hostPort": "t:7233"}],
        "workers": [{"name": "w", "namespace": "apps", "taskQueueName": "q", **worker}],
    }


def _issues(worker: dict[str, Any], defaults: dict[str, Any] | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_fleet(_fleet(worker, defaults), "f.yaml").resolved_workers()
    return info.value.lines()


VALID = [
    pytest.param({"strategy": "AllAtOnce"}, id="AllAtOnce needs nothing else"),
    pytest.param({"strategy": "Manual"}, id="Manual needs nothing else"),
    pytest.param(PROGRESSIVE, id="Progressive with increasing steps"),
    pytest.param(
        {"strategy": "Progressive", "steps": [{"rampPercentage": 1, "pauseDuration": "30s"}]},
        id="the smallest ramp and the shortest pause",
    ),
    pytest.param(
        {"strategy": "Progressive", "steps": [{"rampPercentage": 99, "pauseDuration": "1h30m"}]},
        id="the largest ramp, a compound duration",
    ),
    pytest.param(
        {"strategy": "AllAtOnce", "gate": {"workflowType": "SmokeTest", "input": {"n": 1}}},
        id="a gate with inline input",
    ),
    pytest.param(
        {
            "strategy": "AllAtOnce",
            "gate": {
                "workflowType": "SmokeTest",
                "inputFrom": {"secretKeyRef": {"name": "gate", "key": "payload.json"}},
            },
        },
        id="a gate with input from a Secret",
    ),
    pytest.param(
        {
            "strategy": "Progressive",
            "steps": [{"rampPercentage": p, "pauseDuration": "1m"} for p in range(1, 21)],
        },
        id="twenty steps",
    ),
]


@pytest.mark.parametrize("rollout", VALID)
def test_valid_rollouts_are_accepted(rollout: dict[str, Any]) -> None:
    (worker,) = load_fleet(_fleet({"rollout": rollout}), "f.yaml").resolved_workers()
    assert worker.rollout == Rollout.model_validate(rollout)
    assert worker.rollout is not None
    assert worker.rollout.strategy is RolloutStrategy(rollout["strategy"])


INVALID = [
    pytest.param({}, "workers[0].rollout.strategy: required field is missing", id="no strategy"),
    pytest.param(
        {"strategy": "BlueGreen"}, "workers[0].rollout.strategy", id="an unknown strategy"
    ),
    pytest.param(
        {"strategy": "Progressive"},
        "steps are required for Progressive rollout",
        id="Progressive without steps",
    ),
    pytest.param(
        {
            "strategy": "Progressive",
            "steps": [
                {"rampPercentage": 50, "pauseDuration": "1m"},
                {"rampPercentage": 50, "pauseDuration": "1m"},
            ],
        },
        "steps[1].rampPercentage (50) must be greater than the step before (50)",
        id="a ramp that does not increase",
    ),
    pytest.param(
        {"strategy": "Progressive", "steps": [{"rampPercentage": 0, "pauseDuration": "1m"}]},
        "workers[0].rollout.steps[0].rampPercentage",
        id="a ramp of 0",
    ),
    pytest.param(
        {"strategy": "Progressive", "steps": [{"rampPercentage": 100, "pauseDuration": "1m"}]},
        "workers[0].rollout.steps[0].rampPercentage",
        id="a ramp of 100",
    ),
    pytest.param(
        {"strategy": "Progressive", "steps": [{"rampPercentage": 5, "pauseDuration": "29s"}]},
        "workers[0].rollout.steps[0]: pauseDuration '29s' must be at least 30s",
        id="a pause under 30s",
    ),
    pytest.param(
        {"strategy": "Progressive", "steps": [{"rampPercentage": 5, "pauseDuration": "5 minutes"}]},
        "workers[0].rollout.steps[0].pauseDuration: '5 minutes' is not a duration",
        id="a pause that is not a duration",
    ),
    pytest.param(
        {
            "strategy": "Progressive",
            "steps": [{"rampPercentage": p, "pauseDuration": "1m"} for p in range(1, 22)],
        },
        "workers[0].rollout.steps",
        id="more than twenty steps",
    ),
    pytest.param(
        {
            "strategy": "AllAtOnce",
            "gate": {
                "workflowType": "T",
                "input": {},
                "inputFrom": {"configMapKeyRef": {"name": "g", "key": "k"}},
            },
        },
        "workers[0].rollout.gate: only one of input or inputFrom may be set",
        id="gate input and inputFrom",
    ),
    pytest.param(
        {"strategy": "AllAtOnce", "gate": {"workflowType": "T", "inputFrom": {}}},
        "exactly one of configMapKeyRef or secretKeyRef must be set",
        id="gate inputFrom naming nothing",
    ),
    pytest.param(
        {"strategy": "AllAtOnce", "gate": {"input": {}}},
        "workers[0].rollout.gate.workflowType: required field is missing",
        id="a gate without a workflow type",
    ),
]


@pytest.mark.parametrize(("rollout", "fragment"), INVALID)
def test_invalid_rollouts_are_refused_naming_the_field(
    rollout: dict[str, Any], fragment: str
) -> None:
    lines = _issues({"rollout": rollout})
    assert any(fragment in line for line in lines), lines


def test_sunset_defaults_are_the_official_ones() -> None:
    assert Sunset.model_validate({}) == Sunset(scaledownDelay="1h", deleteDelay="24h")
    (worker,) = load_fleet(
        _fleet({"rollout": {"strategy": "AllAtOnce"}}), "f.yaml"
    ).resolved_workers()
    assert worker.sunset == Sunset(scaledownDelay="1h", deleteDelay="24h")


def test_worker_rollout_and_sunset_beat_the_defaults_and_inherit_them_otherwise() -> None:
    defaults = {"rollout": PROGRESSIVE, "sunset": {"scaledownDelay": "30m"}}
    data = _fleet({"rollout": {"strategy": "Manual"}}, defaults)
    data["workers"].append({"name": "v", "namespace": "apps", "taskQueueName": "q2"})
    own, inherited = load_fleet(data, "f.yaml").resolved_workers()
    assert own.rollout is not None
    assert own.rollout.strategy is RolloutStrategy.MANUAL
    assert inherited.rollout == Rollout.model_validate(PROGRESSIVE)
    # Whole values, as for every other field: the defaults' sunset with its own defaults.
    assert own.sunset == inherited.sunset == Sunset(scaledownDelay="30m", deleteDelay="24h")


def test_without_rollout_a_worker_keeps_in_place_rolls() -> None:
    (worker,) = load_fleet(_fleet({}), "f.yaml").resolved_workers()
    assert worker.rollout is None
    assert worker.sunset is None


def test_a_worker_sunset_without_any_rollout_is_refused() -> None:
    lines = _issues({"sunset": {"deleteDelay": "1h"}})
    assert lines == [
        "f.yaml: workers[0].sunset: sunset applies only to versioned rollouts: set rollout "
        "here or in defaults"
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("30s", 30),
        ("5m", 300),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("500ms", Decimal("0.5")),
        ("24h", 86400),
    ],
)
def test_durations_read_as_go_and_kubernetes_read_them(text: str, seconds: Decimal) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "1d", "-5m", "5 m", "m5"])
def test_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def _spec() -> dict[str, Any]:
    crd = temporal_worker_crd()
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"])


def _rules(node: dict[str, Any]) -> dict[str, str]:
    return {r["message"]: r["rule"] for r in node.get("x-kubernetes-validations", [])}


def test_the_temporalworker_crd_carries_rollout_and_sunset_with_cel_rules() -> None:
    rollout = _spec()["properties"]["rollout"]
    assert rollout["properties"]["strategy"]["enum"] == ["Manual", "AllAtOnce", "Progressive"]
    assert set(_rules(rollout)) == {
        "steps are required for Progressive rollout",
        "rampPercentage must increase between each step",
    }
    steps = rollout["properties"]["steps"]
    assert steps["maxItems"] == 20
    step = steps["items"]
    assert (
        step["properties"]["rampPercentage"]["minimum"],
        step["properties"]["rampPercentage"]["maximum"],
    ) == (1, 99)
    assert _rules(step) == {
        "pause duration must be at least 30s": "duration(self.pauseDuration) >= duration('30s')"
    }
    gate = rollout["properties"]["gate"]
    # Free-form `input` is invisible to CEL: the model alone checks input vs inputFrom.
    assert _rules(gate) == {}
    assert "exactly one of configMapKeyRef or secretKeyRef must be set" in _rules(
        gate["properties"]["inputFrom"]
    )
    sunset = _spec()["properties"]["sunset"]["properties"]
    assert (sunset["scaledownDelay"]["default"], sunset["deleteDelay"]["default"]) == ("1h", "24h")


def test_every_rollout_field_says_it_drives_versioned_rollouts() -> None:
    spec = _spec()["properties"]
    rollout, sunset = spec["rollout"], spec["sunset"]
    step = rollout["properties"]["steps"]["items"]
    gate = rollout["properties"]["gate"]
    described = [
        rollout["description"],
        sunset["description"],
        *(p["description"] for p in rollout["properties"].values()),
        *(p["description"] for p in step["properties"].values()),
        *(p["description"] for p in gate["properties"].values()),
        *(p["description"] for p in sunset["properties"].values()),
    ]
    assert all(text.startswith("Drives versioned rollouts") for text in described), described


def test_the_template_is_kept_whole_in_the_crd() -> None:
    template = _spec()["properties"]["template"]
    assert template["type"] == "object"
    assert template["x-kubernetes-preserve-unknown-fields"] is True
