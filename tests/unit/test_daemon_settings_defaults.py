"""Daemon settings default to HPA behaviour, check their invariants, document every field."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import BaseModel

from twc.reconcile.settings import (
    AutoscaleBehavior,
    BackoffSettings,
    DaemonSettings,
    LeaderElectionSettings,
    PolicyType,
    SamplingSettings,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)

MODELS: list[type[BaseModel]] = [
    AutoscaleBehavior,
    BackoffSettings,
    DaemonSettings,
    LeaderElectionSettings,
    SamplingSettings,
    ScalingPolicy,
    ScalingRules,
]


def test_autoscaling_defaults_are_hpas() -> None:
    behavior = DaemonSettings().autoscale

    assert behavior.tolerance == 0.1
    assert behavior.scale_up.stabilization_window_seconds == 0
    assert behavior.scale_up.select_policy is SelectPolicy.MAX
    assert {(p.type, p.value, p.period_seconds) for p in behavior.scale_up.policies} == {
        (PolicyType.PERCENT, 100, 15),
        (PolicyType.PODS, 4, 15),
    }
    assert behavior.scale_down.stabilization_window_seconds == 300
    assert [(p.type, p.value, p.period_seconds) for p in behavior.scale_down.policies] == [
        (PolicyType.PERCENT, 100, 15)
    ]


def test_loop_defaults() -> None:
    settings = DaemonSettings()

    assert settings.refresh_interval == 600
    assert settings.sampling.interval > 0
    assert not settings.leader_election.enabled


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_field_has_a_docstring(model: type[BaseModel]) -> None:
    undocumented = [name for name, f in model.model_fields.items() if not f.description]

    assert undocumented == []


def test_settings_are_frozen() -> None:
    settings = DaemonSettings()

    with pytest.raises(pydantic.ValidationError):
        settings.reconcile_interval = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (BackoffSettings, {"base": 10, "max_delay": 5}),
        (BackoffSettings, {"jitter": 1.5}),
        (LeaderElectionSettings, {"lease_duration": 5, "renew_deadline": 10}),
        (AutoscaleBehavior, {"tolerance": -0.1}),
        (DaemonSettings, {"reconcile_interval": 0}),
        (DaemonSettings, {"unknown": 1}),
        (ScalingPolicy, {"type": "Pods", "value": 0, "period_seconds": 15}),
    ],
)
def test_invalid_settings_are_rejected(model: type[BaseModel], values: dict[str, object]) -> None:
    with pytest.raises(pydantic.ValidationError):
        model.model_validate(values)


def test_scale_down_window_override_leaves_the_rest() -> None:
    behavior = AutoscaleBehavior().with_scale_down_window(60)

    assert behavior.scale_down.stabilization_window_seconds == 60
    assert behavior.scale_down.policies == AutoscaleBehavior().scale_down.policies
