"""``resourceTemplates`` (the official ``WorkerResourceTemplate``): one copy per version.

Each version's copy names its Deployment in ``scaleTargetRef: {}``, selects its pods in
``spec.selector.matchLabels: {}``, gets the Temporal metric labels in each External metric
selector and its values in ``{{ .Placeholder }}`` strings; an autoscaler's copy owns the
version's replicas (twc leaves them out of the Deployment it applies) and is gone while
the version is scaled to 0 for sunset; a template twc would not make is refused.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.pulumi_mocks import RecordingMocks, pulumi_test
from tests.unit.test_versioned_worker_declares_a_deployment_per_version import (
    FAKE_CHECK,
    NEW,
    NEW_BUILD,
    OLD,
    OLD_BUILD,
    _build,
    _worker,
)
from twc.builders import worker_objects
from twc.errors import SpecError
from twc.rollout import BUILD_ID_LABEL, VersionInput, WorkerVersions, build_id_of, version_spec
from twc.spec import load_fleet
from twc.spec.convert import as_temporal_worker
from twc.spec.resources import resource_name

HPA: dict[str, Any] = {
    "name": "hpa",
    "template": {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "spec": {
            "scaleTargetRef": {},
            "minReplicas": 2,
            "maxReplicas": 10,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": "temporal_approximate_backlog_count",
                            "selector": {"matchLabels": {"task_type": "Activity"}},
                        },
                        "target": {"type": "AverageValue", "averageValue": "10"},
                    },
                }
            ],
        },
    },
}
PDB: dict[str, Any] = {
    "name": "pdb",
    "template": {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"labels": {"team": "payments"}},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {}}},
    },
}
SCALED: dict[str, Any] = {
    "name": "keda",
    "template": {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "spec": {
            "scaleTargetRef": {},
            "triggers": [
                {
                    "type": "temporal",
                    "metadata": {
                        "namespace": "{{ .TemporalNamespace }}",
                        "buildId": "{{ .BuildID }}",
                        "deploymentName": "{{.WorkerDeploymentName}}",
                    },
                }
            ],
        },
    },
}


def _with(*templates: dict[str, Any], doc: dict[str, Any] = NEW) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["workers"][0]["resourceTemplates"] = [copy.deepcopy(t) for t in templates]
    return out


def _by_build(mocks: RecordingMocks, type_: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r in mocks.of_type(type_):
        if "-version-" not in r.name:  # the worker's own PodDisruptionBudget
            continue
        out.setdefault(r.inputs["metadata"]["labels"][BUILD_ID_LABEL], []).append(r.inputs)
    return out


def _built(doc: dict[str, Any], versions: WorkerVersions | None) -> RecordingMocks:
    """The program's resources once the whole program ran (not only the status's)."""
    mocks = RecordingMocks(fake_dynamic=FAKE_CHECK)

    @pulumi_test
    def run() -> Any:
        return _build(mocks, doc, versions)["apps/orders"]

    run()
    return mocks


def _two_versions(old: VersionInput | None = None) -> WorkerVersions:
    spec = version_spec(_worker(OLD))
    old = old or VersionInput(replicas=None, spec=spec)
    return WorkerVersions(versions={OLD_BUILD: old.model_copy(update={"spec": spec})})


def test_each_version_gets_its_own_copy_wired_to_its_deployment() -> None:
    mocks = _built(_with(HPA, PDB, SCALED), _two_versions())
    deployments = _by_build(mocks, "kubernetes:apps/v1:Deployment")
    hpas = _by_build(mocks, "kubernetes:autoscaling/v2:HorizontalPodAutoscaler")
    pdbs = _by_build(mocks, "kubernetes:policy/v1:PodDisruptionBudget")
    keda = _by_build(mocks, "kubernetes:keda.sh/v1alpha1:ScaledObject")
    assert set(hpas) == set(pdbs) == set(keda) == {OLD_BUILD, NEW_BUILD}
    names = set()
    for build in (OLD_BUILD, NEW_BUILD):
        (dep,), (hpa,), (pdb,), (so,) = (
            deployments[build],
            hpas[build],
            pdbs[build],
            keda[build],
        )
        target = {"apiVersion": "apps/v1", "kind": "Deployment"}
        assert hpa["spec"]["scaleTargetRef"] == {**target, "name": dep["metadata"]["name"]}
        selector = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]
        assert selector["matchLabels"] == {
            "task_type": "Activity",
            "temporal_worker_deployment_name": "apps_orders",
            "temporal_worker_build_id": build,
            "temporal_namespace": "default",
        }
        assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
        assert so["spec"]["triggers"][0]["metadata"] == {
            "namespace": "default",
            "buildId": build,
            "deploymentName": "apps/orders",
        }
        for obj in (hpa, pdb, so):
            assert obj["metadata"]["namespace"] == "apps"
            assert len(obj["metadata"]["name"]) <= 47
            names.add(obj["metadata"]["name"])
        # An autoscaler owns the count: twc leaves it out of what it applies.
        assert "replicas" not in dep["spec"]
    assert len(names) == 6


def test_a_version_scaled_to_zero_for_sunset_loses_its_autoscaler_only() -> None:
    mocks = _built(_with(HPA, PDB), _two_versions(VersionInput(replicas=0)))
    deployments = _by_build(mocks, "kubernetes:apps/v1:Deployment")
    assert deployments[OLD_BUILD][0]["spec"]["replicas"] == 0
    hpas = _by_build(mocks, "kubernetes:autoscaling/v2:HorizontalPodAutoscaler")
    assert set(hpas) == {NEW_BUILD}
    assert set(_by_build(mocks, "kubernetes:policy/v1:PodDisruptionBudget")) == {
        OLD_BUILD,
        NEW_BUILD,
    }


def test_without_an_autoscaler_template_twc_keeps_the_replicas() -> None:
    mocks = _built(_with(PDB), None)
    (dep,) = _by_build(mocks, "kubernetes:apps/v1:Deployment")[NEW_BUILD]
    assert dep["spec"]["replicas"] == 2


def _bad(template: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        load_fleet(_with({"name": "x", "template": template}), "stacks/t.yaml")
    return str(caught.value)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"kind": "Role", "apiVersion": "rbac.authorization.k8s.io/v1"}, "not a kind twc makes"),
        ({"metadata": {"name": "mine"}}, "metadata.name and metadata.namespace are twc's"),
        ({"spec": {"scaleTargetRef": {"name": "other"}}}, "scaleTargetRef must be {}"),
        ({"spec": {"scaleTargetRef": {}, "x": "{{ .Secret }}"}}, "unknown placeholder"),
        ({"spec": None}, "needs apiVersion, kind and spec"),
    ],
)
def test_a_template_twc_would_not_make_is_refused(change: dict[str, Any], reason: str) -> None:
    assert reason in _bad({**HPA["template"], **change})


def test_a_metric_label_twc_sets_is_refused() -> None:
    template = copy.deepcopy(HPA["template"])
    metric = template["spec"]["metrics"][0]["external"]["metric"]
    metric["selector"]["matchLabels"]["temporal_worker_build_id"] = "v1"
    assert "temporal_worker_build_id is twc's to set" in _bad(template)


def test_resource_templates_need_a_versioned_worker() -> None:
    doc = _with(PDB)
    del doc["workers"][0]["rollout"]
    with pytest.raises(SpecError, match="resourceTemplates applies only to versioned rollouts"):
        load_fleet(doc, "stacks/t.yaml").resolved_workers()


def test_a_worker_deployments_templates_carry_over_as_its_resource_templates() -> None:
    obj = {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "WorkerDeployment",
        "metadata": {"name": "payments", "namespace": "team"},
        "spec": {"resourceTemplates": [PDB], "rollout": {"strategy": "AllAtOnce"}},
    }
    assert as_temporal_worker(obj)["spec"]["resourceTemplates"] == [PDB]


def test_a_change_to_a_template_makes_no_new_build() -> None:
    assert _worker(_with(PDB)) != _worker(NEW)
    assert build_id_of(_worker(_with(PDB))) == NEW_BUILD


def test_each_versions_copies_are_among_the_objects_twc_never_adopts() -> None:
    worker = _worker(_with(HPA, PDB, SCALED))
    found = worker_objects(worker, builds=[OLD_BUILD])
    for build in (OLD_BUILD, NEW_BUILD):
        for entry, kind in (("hpa", "HorizontalPodAutoscaler"), ("pdb", "PodDisruptionBudget")):
            assert f"{kind} apps/{resource_name('orders', entry, build)}" in found
        assert f"ScaledObject apps/{resource_name('orders', 'keda', build)}" in found
