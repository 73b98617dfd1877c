"""The API server's refusal of a Deployment, told as the fleet file's field.

Pure parts of ``twc.kube.dryrun``: the Status body the API server returns is turned into
issues naming file, worker and the field where the user wrote it (the real server's
refusals are checked end to end in ``test_preview_dry_run_refuses_bad_templates``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from twc import builders
from twc.connections import ConnectionIdentity, ResolvedConnection, TLSSettings
from twc.kube.dryrun import DryRunTarget, _difference, issues_from_status, template_field_path
from twc.spec import load_fleet

PLAIN = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "Connection", "c", "apps"),
    host_port="t:7233",
    tls=TLSSettings(enabled=False),
)


def _target(worker: dict[str, Any]) -> DryRunTarget:
    data = {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {"connectionRef": {"name": "c"}},
        "connections": [{"name": "c", "namespace": "apps", "hostPort": "t:7233"}],
        "workers": [
            {"name": "other", "namespace": "apps", "taskQueueName": "o", "image": "reg/o:1"},
            {"name": "w", "namespace": "apps", "taskQueueName": "q", **worker},
        ],
    }
    resolved = load_fleet(data, "f.yaml").resolved_workers()[1]
    return DryRunTarget(resolved, builders.worker_deployment(resolved, PLAIN, "0" * 64))


SIDECAR_FIRST = {
    "template": {
        "spec": {
            "volumes": [{"name": "cfg", "emptyDir": {}}],
            "containers": [
                {"name": "proxy", "image": "envoy"},
                {
                    "name": "worker",
                    "image": "reg/w:1",
                    "env": [{"name": "A", "value": "1"}],
                    "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
                },
            ],
        }
    }
}


@pytest.mark.parametrize(
    ("api_field", "expected"),
    [
        pytest.param(
            "spec.template.spec.containers[0].resources.requests",
            "workers[1].template.spec.containers[1].resources.requests",
            id="the worker container, first in the Deployment, second in the template",
        ),
        pytest.param(
            "spec.template.spec.containers[1].image",
            "workers[1].template.spec.containers[0].image",
            id="the sidecar",
        ),
        pytest.param(
            # twc's own five variables and the address come before the user's.
            "spec.template.spec.containers[0].env[7].value",
            "workers[1].template.spec.containers[1].env[0].value",
            id="an env entry, matched by name",
        ),
        pytest.param(
            "spec.template.spec.volumes[0].emptyDir",
            "workers[1].template.spec.volumes[0].emptyDir",
            id="a volume",
        ),
        pytest.param("spec.template.spec.initContainers[0].image", None, id="twc's init container"),
        pytest.param("spec.template.spec.containers[0].env[0].value", None, id="twc's env"),
        pytest.param("spec.replicas", None, id="outside the pod template"),
    ],
)
def test_a_deployment_field_maps_to_where_the_user_wrote_it(
    api_field: str, expected: str | None
) -> None:
    target = _target(SIDECAR_FIRST)
    env = target.manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[7]["name"] == "A"  # the case above relies on this position
    assert template_field_path(api_field, target) == expected


def test_without_a_template_no_path_is_invented() -> None:
    target = _target({"image": "reg/w:1"})
    assert template_field_path("spec.template.spec.containers[0].image", target) is None


def _status(causes: list[dict[str, str]] | None, message: str = "refused") -> str:
    body: dict[str, Any] = {"kind": "Status", "status": "Failure", "message": message, "code": 422}
    if causes is not None:
        body["details"] = {"causes": causes}
    return json.dumps(body)


def test_each_cause_becomes_an_issue_at_the_users_field() -> None:
    body = _status(
        [
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "2": must be less than or equal to cpu limit of 1',
                "field": "spec.template.spec.containers[0].resources.requests",
            },
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.template.spec.initContainers[0].image",
            },
        ]
    )
    first, second = issues_from_status(body, _target(SIDECAR_FIRST), "stacks/prod.yaml")
    assert str(first) == (
        "stacks/prod.yaml: workers[1].template.spec.containers[1].resources.requests: worker "
        'apps/w: the API server refuses its Deployment: Invalid value: "2": must be less than '
        "or equal to cpu limit of 1"
    )
    # Not the user's field: named at the worker, with the Deployment's own path.
    assert str(second).startswith("stacks/prod.yaml: workers[1]: worker apps/w: ")
    assert "spec.template.spec.initContainers[0].image: Required value" in str(second)


def test_an_unknown_field_is_named_from_the_strict_decoding_message() -> None:
    body = _status(
        None,
        message='Deployment in version "v1" cannot be handled as a Deployment: strict decoding '
        'error: unknown field "spec.template.spec.containers[0].readinessProb"',
    )
    typo = json.loads(json.dumps(SIDECAR_FIRST))
    typo["template"]["spec"]["containers"][1]["readinessProb"] = {"exec": {"command": ["true"]}}
    (issue,) = issues_from_status(body, _target(typo), "f.yaml")
    assert issue.path == "workers[1].template.spec.containers[1].readinessProb"
    assert issue.reason.endswith("unknown field")


def test_a_refusal_without_fields_is_one_issue_at_the_worker() -> None:
    (issue,) = issues_from_status(
        _status(None, "admission webhook said no"), _target({"image": "reg/w:1"}), "f.yaml"
    )
    assert (issue.path, issue.reason) == (
        "workers[1]",
        "worker apps/w: the API server refuses its Deployment: admission webhook said no",
    )


@pytest.mark.parametrize(
    ("live", "desired", "covered"),
    [
        ({"a": 1, "b": {"c": "x", "d": 2}}, {"b": {"c": "x"}}, True),
        ({"a": [{"n": 1, "x": 2}]}, {"a": [{"n": 1}]}, True),
        ({"a": [1, 2]}, {"a": [1]}, False),
        ({"a": "2"}, {"a": 2}, True),
        ({"a": True}, {"a": 1}, False),
        ({"a": {"c": "x"}}, {"a": {"c": "y"}}, False),
        ({}, {"a": None}, False),
    ],
)
def test_a_live_deployment_is_unchanged_when_it_holds_every_desired_value(
    live: Any, desired: Any, covered: bool
) -> None:
    assert (_difference(live, desired, "") is None) is covered


def test_a_temporalworker_objects_refusal_is_named_in_the_object() -> None:
    from twc.kube.dryrun import _naming

    base = _target(SIDECAR_FIRST)
    file, source, template = _naming(base.worker, "TemporalWorker apps/w")
    target = DryRunTarget(base.worker, base.manifest, file, source, template)
    body = _status(
        [
            {
                "message": "Invalid value",
                "field": "spec.template.spec.containers[0].resources.requests",
            },
            {"message": "Required value", "field": "spec.template.spec.initContainers[0].image"},
        ]
    )
    first, second = issues_from_status(body, target, "stacks/prod.yaml")
    assert (first.file, first.path) == (
        "temporal.kmsvc.io/v1 TemporalWorker apps/w",
        "spec.template.spec.containers[1].resources.requests",
    )
    assert (second.file, second.path) == ("temporal.kmsvc.io/v1 TemporalWorker apps/w", "spec")


def test_a_template_from_defaults_is_named_in_the_fleet_file_whatever_the_origin() -> None:
    from twc.kube.dryrun import _naming

    data = {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {"connectionRef": {"name": "c"}, **SIDECAR_FIRST},
        "connections": [{"name": "c", "namespace": "apps", "hostPort": "t:7233"}],
        "workers": [{"name": "w", "namespace": "apps", "taskQueueName": "q"}],
    }
    (worker,) = load_fleet(data, "f.yaml").resolved_workers()
    assert worker.template_source == "defaults.template"
    target = DryRunTarget(
        worker, _plain_deployment(worker), *_naming(worker, "TemporalWorker apps/w")
    )
    body = _status(
        [{"message": "Invalid value", "field": "spec.template.spec.containers[1].image"}]
    )
    (issue,) = issues_from_status(body, target, "stacks/prod.yaml")
    assert (issue.file, issue.path) == (
        "stacks/prod.yaml",
        "defaults.template.spec.containers[0].image",
    )
    assert _naming(worker, "file") == (None, None, None)


def _plain_deployment(worker: Any) -> dict[str, Any]:
    return builders.worker_deployment(worker, PLAIN, "0" * 64)
