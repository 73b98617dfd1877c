"""The chart's NetworkPolicy (on unless ``networkPolicy.enabled=false``) admits to the
daemon's port, which serves /metrics naming every tenant's workers, only the monitoring
namespace; turned off, the chart renders none."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.chart import render

pytestmark = pytest.mark.e2e


def test_the_network_policy_admits_only_the_selected_namespace_to_the_daemons_port(
    real_tool: Callable[[str], str],
) -> None:
    real_tool("helm")
    assert not [k for k in render("networkPolicy.enabled=false") if k.startswith("NetworkPolicy/")]
    objects = render("port=9090")
    policy = objects["NetworkPolicy/twc"]["spec"]
    daemon = objects["Deployment/twc"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= daemon.items()
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    }
                }
            ],
            "ports": [{"protocol": "TCP", "port": 9090}],
        }
    ]
