"""The daemon's chart, rendered by the real ``helm template``: with more than one
replica, a PodDisruptionBudget and a topology spread keep a standby up through node
drains and node losses; values that do not fit the chart's schema fail the render."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.chart import helm, render, template_args

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _helm(real_tool: Callable[[str], str]) -> None:
    real_tool("helm")


def test_replicas_get_a_disruption_budget_and_spread_over_nodes_and_zones() -> None:
    docs = render()
    selector = docs["Deployment/twc"]["spec"]["selector"]["matchLabels"]
    budget = docs["PodDisruptionBudget/twc"]["spec"]
    assert budget == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    spread = docs["Deployment/twc"]["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [(c["topologyKey"], c["whenUnsatisfiable"]) for c in spread] == [
        ("kubernetes.io/hostname", "ScheduleAnyway"),
        ("topology.kubernetes.io/zone", "ScheduleAnyway"),
    ]
    assert all(c["labelSelector"] == {"matchLabels": selector} for c in spread)


def test_a_single_replica_gets_neither() -> None:
    docs = render("replicas=1")
    assert "PodDisruptionBudget/twc" not in docs
    assert "topologySpreadConstraints" not in docs["Deployment/twc"]["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (["replicas=0"], "replicas"),
        (["rbac.scope=everywhere"], "scope"),
        (["replicsa=2"], "replicsa"),
        (["topologySpread.whenUnsatisfiable=Sometimes"], "whenUnsatisfiable"),
        (["port=70000"], "port"),
    ],
)
def test_values_outside_the_schema_fail_the_render(sets: list[str], field: str) -> None:
    done = helm(*template_args(*sets), check=False)
    assert done.returncode != 0
    assert "schema" in done.stderr.lower(), done.stderr
    assert field in done.stderr, done.stderr
