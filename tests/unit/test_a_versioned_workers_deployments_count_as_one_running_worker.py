"""The running workers the deletion guard and ``twc up`` compare with the desired ones:
a versioned worker's Deployments (one per version) are that one worker, so a new
version never reads as the deletion of the running ones."""

from __future__ import annotations

import json
from typing import Any

from twc.builders import LABEL_WORKER
from twc.kube.workloads import Workloads
from twc.rollout import BUILD_ID_LABEL


def _deployment(name: str, replicas: int, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "apps", "name": name, "labels": labels},
        "spec": {"replicas": replicas},
    }


class _Response:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.data = json.dumps({"items": items}).encode()


class _Apps:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def list_deployment_for_all_namespaces(self, **_: Any) -> _Response:
        return _Response(self.items)


class _Kube:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.apps = _Apps(items)


def test_version_deployments_are_keyed_by_their_worker_with_replicas_summed() -> None:
    items = [
        _deployment("billing", 2, **{LABEL_WORKER: "billing"}),
        _deployment("orders-1-4-2-aa", 3, **{LABEL_WORKER: "orders", BUILD_ID_LABEL: "1.4.2-aa"}),
        _deployment("orders-1-5-0-bb", 1, **{LABEL_WORKER: "orders", BUILD_ID_LABEL: "1.5.0-bb"}),
    ]
    running = Workloads(_Kube(items)).worker_replicas()  # type: ignore[arg-type]
    assert running == {"apps/billing": 2, "apps/orders": 4}


def test_a_deployment_without_a_build_id_keeps_its_own_name() -> None:
    items = [_deployment("orders", 2, **{LABEL_WORKER: "orders"})]
    assert Workloads(_Kube(items)).worker_replicas() == {"apps/orders": 2}  # type: ignore[arg-type]
