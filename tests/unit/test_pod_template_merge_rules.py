"""A worker's ``template`` and the shorthand fields: which wins, what is kept, what is refused.

Table-driven over the rules of ``twc.spec._template``: shorthand fills what the template
leaves unset, the more specific level wins, a conflict at one level is an error naming
both fields, and twc's own names stay reserved. Then the builder: every field of the
user's template reaches the Deployment, twc's parts land only in the worker container.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from twc import builders
from twc.connections import ConnectionIdentity, ResolvedConnection, TLSSettings
from twc.errors import SpecError
from twc.spec import AuthMode, ResolvedWorker, load_fleet
from twc.spec._template import merge_pod_template, worker_container_index

FP = "f" * 64
MTLS = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "ClusterConnection", "prod", None),
    host_port="temporal.example:7233",
    tls=TLSSettings(enabled=True),
    auth_mode=AuthMode.MTLS,
    mtls_secret_name="temporal-mtls",
)


def _fleet(worker: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "twc.temporal.io/v1",
        "kind": "Fleet",
        "defaults": {"connectionRef": {"name": "c"}, **(defaults or {})},
        "connections": [{"name": "c", "namespace": "apps", "hostPort": "t:7233"}],
        "workers": [{"name": "w", "namespace": "apps", "taskQueueName": "q", **worker}],
    }


def _resolve(worker: dict[str, Any], defaults: dict[str, Any] | None = None) -> ResolvedWorker:
    (resolved,) = load_fleet(_fleet(worker, defaults), "f.yaml").resolved_workers()
    return resolved


def _issues(worker: dict[str, Any], defaults: dict[str, Any] | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_fleet(_fleet(worker, defaults), "f.yaml").resolved_workers()
    return info.value.lines()


def _container(pod: dict[str, Any], name: str = "worker") -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def _tmpl(**container: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "worker", **container}]}}


# --- precedence: (worker fields, defaults fields, expected worker-container fields) -------
PRECEDENCE = [
    pytest.param(
        {"template": _tmpl(command=["app"])},
        {"image": "reg/a:1"},
        {"image": "reg/a:1", "command": ["app"]},
        id="defaults shorthand fills what the worker's template leaves unset",
    ),
    pytest.param(
        {"template": _tmpl(image="reg/a:2")},
        {"image": "reg/a:1"},
        {"image": "reg/a:2"},
        id="the worker's template beats the defaults' shorthand",
    ),
    pytest.param(
        {"image": "reg/a:3"},
        {"template": _tmpl(image="reg/a:1", args=["--x"])},
        {"image": "reg/a:3", "args": ["--x"]},
        id="the worker's shorthand beats the defaults' template and keeps the rest of it",
    ),
    pytest.param(
        {"image": "reg/a:3", "template": _tmpl(image="reg/a:3")},
        {},
        {"image": "reg/a:3"},
        id="the same value twice at one level is no conflict",
    ),
    pytest.param(
        {"template": _tmpl(image="reg/a:1", resources={"limits": {"cpu": 2}})},
        {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}},
        {"resources": {"limits": {"cpu": 2}}},
        id="resources are taken whole from the more specific level",
    ),
    pytest.param(
        {
            "image": "reg/a:1",
            "env": {"B": "worker"},
            "template": _tmpl(env=[{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]),
        },
        {"env": {"C": "defaults"}},
        {
            "env": [
                {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
                {"name": "B", "value": "worker"},
            ]
        },
        id="env merges by name; the worker's env replaces the defaults' env whole",
    ),
    pytest.param(
        {"template": _tmpl(image="reg/a:1", env=[{"name": "A", "value": "template"}])},
        {"env": {"A": "defaults", "B": "defaults"}},
        {"env": [{"name": "A", "value": "template"}, {"name": "B", "value": "defaults"}]},
        id="the defaults' env fills names the worker's template leaves unset",
    ),
    pytest.param(
        {"env": {"A": "worker"}},
        {
            "image": "reg/a:1",
            "template": _tmpl(env=[{"name": "A", "value": "t"}, {"name": "Z", "value": "z"}]),
        },
        {"env": [{"name": "A", "value": "worker"}, {"name": "Z", "value": "z"}]},
        id="the worker's env replaces a name of the defaults' template in place",
    ),
    pytest.param(
        {"image": "reg/a:1", "lifecycle": {"preStopCommand": ["sleep", "5"]}},
        {},
        {"lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}},
        id="lifecycle shorthand renders as the container's hooks",
    ),
]


@pytest.mark.parametrize(("worker", "defaults", "expected"), PRECEDENCE)
def test_precedence_between_template_and_shorthand(
    worker: dict[str, Any], defaults: dict[str, Any], expected: dict[str, Any]
) -> None:
    container = _container(_resolve(worker, defaults).pod_template)
    assert {k: container.get(k) for k in expected} == expected


POD_LEVEL = [
    pytest.param(
        {"nodeSelector": {"disk": "ssd"}},
        {"template": {"spec": {"nodeSelector": {"zone": "a"}, "priorityClassName": "high"}}},
        {"nodeSelector": {"disk": "ssd"}, "priorityClassName": "high"},
        id="pod fields: the worker's shorthand over the defaults' template",
    ),
    pytest.param(
        {"template": {"spec": {"terminationGracePeriodSeconds": 5}}},
        {"terminationGracePeriodSeconds": 120},
        {"terminationGracePeriodSeconds": 5},
        id="pod fields: the worker's template over the defaults' shorthand",
    ),
    pytest.param(
        {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
        {},
        {"tolerations": [{"key": "gpu", "operator": "Exists"}]},
        id="pod fields: shorthand alone fills the pod spec",
    ),
]


@pytest.mark.parametrize(("worker", "defaults", "expected"), POD_LEVEL)
def test_pod_level_fields_follow_the_same_precedence(
    worker: dict[str, Any], defaults: dict[str, Any], expected: dict[str, Any]
) -> None:
    spec = _resolve({"image": "reg/a:1", **worker}, defaults).pod_template["spec"]
    assert {k: spec.get(k) for k in expected} == expected


# --- refusals: (worker fields, a fragment every expected line has) -------------------------
REFUSED = [
    pytest.param(
        {"image": "reg/a:1", "template": _tmpl(image="reg/a:2")},
        "workers[0]: template.spec.containers[0].image ('reg/a:2') conflicts with image "
        "('reg/a:1')",
        id="image set twice at one level",
    ),
    pytest.param(
        {
            "image": "reg/a:1",
            "env": {"A": "1"},
            "template": _tmpl(env=[{"name": "A", "value": "2"}]),
        },
        "template.spec.containers[0].env[0] sets A and so does env.A",
        id="an env name set twice at one level",
    ),
    pytest.param(
        {
            "image": "reg/a:1",
            "env": {"A": "1"},
            "template": _tmpl(
                env=[{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
            ),
        },
        "sets A and so does env.A",
        id="an env name from a Secret and from env",
    ),
    pytest.param(
        {"nodeSelector": {"a": "b"}, "template": {"spec": {"nodeSelector": {"a": "c"}}}},
        "template.spec.nodeSelector",
        id="a pod field set twice at one level",
    ),
    pytest.param(
        {"template": _tmpl(image="reg/a:1", env=[{"name": "TEMPORAL_ADDRESS", "value": "x"}])},
        "workers[0].template: spec.containers[0].env[0].name: TEMPORAL_ADDRESS is set by twc",
        id="a reserved env name in the template",
    ),
    pytest.param(
        {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "a", "image": "reg/a:1"},
                        {"name": "b", "image": "reg/b:1"},
                    ]
                }
            }
        },
        "spec.containers: name the worker container 'worker'",
        id="several containers and none named worker",
    ),
    pytest.param(
        {
            "template": {
                "metadata": {"labels": {"twc.temporal.io/worker": "other"}},
                **_tmpl(image="reg/a:1"),
            }
        },
        'metadata.labels["twc.temporal.io/worker"]: twc sets this label itself',
        id="one of twc's pod labels",
    ),
    pytest.param(
        {
            "template": {
                "metadata": {"annotations": {"temporal.io/connection-spec-hash": "x"}},
                **_tmpl(image="reg/a:1"),
            }
        },
        "twc sets this annotation itself",
        id="the connection fingerprint annotation",
    ),
    pytest.param(
        {
            "template": {
                "spec": {
                    "serviceAccountName": "mine",
                    "containers": [{"name": "worker", "image": "reg/a:1"}],
                }
            }
        },
        "spec.serviceAccountName: twc creates a ServiceAccount per worker",
        id="a service account of the template's own",
    ),
    pytest.param(
        {
            "template": {
                "spec": {
                    "volumes": [{"name": "temporal-tls", "emptyDir": {}}],
                    "containers": [{"name": "worker", "image": "reg/a:1"}],
                }
            }
        },
        "spec.volumes[0].name: 'temporal-tls' is twc's own",
        id="twc's mTLS volume name",
    ),
    pytest.param(
        {
            "template": {
                "spec": {
                    "initContainers": [{"name": "wait-for-temporal", "image": "x"}],
                    "containers": [{"name": "worker", "image": "reg/a:1"}],
                }
            }
        },
        "spec.initContainers[0].name: 'wait-for-temporal' is twc's own",
        id="twc's init container name",
    ),
    pytest.param(
        {"template": {"metadata": {"name": "x"}, **_tmpl(image="reg/a:1")}},
        "metadata.name: a pod template's metadata takes only labels and annotations",
        id="pod metadata other than labels and annotations",
    ),
    pytest.param(
        {"template": {"kind": "Pod", **_tmpl(image="reg/a:1")}},
        "kind: unknown field (a pod template has metadata and spec)",
        id="a key a PodTemplateSpec does not have",
    ),
    pytest.param(
        {"template": _tmpl(command=["app"])},
        "workers[0].image: no image: set it here or in defaults.image (or in the template's "
        "worker container)",
        id="no image anywhere",
    ),
]


@pytest.mark.parametrize(("worker", "fragment"), REFUSED)
def test_refused_templates_name_the_field(worker: dict[str, Any], fragment: str) -> None:
    lines = _issues(worker)
    assert any(fragment in line for line in lines), lines
    assert all(line.startswith("f.yaml: ") for line in lines)


def test_a_conflict_inside_defaults_names_defaults() -> None:
    lines = _issues({}, {"image": "reg/a:1", "template": _tmpl(image="reg/a:2")})
    assert any(
        line.startswith("f.yaml: defaults: template.spec.containers[0].image") for line in lines
    )


def test_reserved_env_names_are_free_in_a_sidecar() -> None:
    # twc sets them only in the worker container; a sidecar may need its own address.
    template = {
        "spec": {
            "containers": [
                {"name": "worker", "image": "reg/a:1"},
                {
                    "name": "proxy",
                    "image": "envoy",
                    "env": [{"name": "TEMPORAL_ADDRESS", "value": "x"}],
                },
            ]
        }
    }
    worker = _resolve({"template": template})
    assert _container(worker.pod_template, "proxy")["env"] == [
        {"name": "TEMPORAL_ADDRESS", "value": "x"}
    ]


@pytest.mark.parametrize(
    ("containers", "index"),
    [
        ([], None),
        ([{"name": "app"}], 0),
        ([{"name": "side"}, {"name": "worker"}], 1),
        ([{"name": "a"}, {"name": "b"}], None),
    ],
)
def test_the_worker_container_is_the_one_named_worker_or_the_only_one(
    containers: list[dict[str, Any]], index: int | None
) -> None:
    assert worker_container_index(containers) == index


def test_merge_adds_a_worker_container_to_a_template_without_one_and_copies() -> None:
    template: dict[str, Any] = {"spec": {"priorityClassName": "high"}}
    before = copy.deepcopy(template)
    merged = merge_pod_template(template, {"image": "reg/a:1"}, wins=())
    assert merged["spec"] == {
        "priorityClassName": "high",
        "containers": [{"name": "worker", "image": "reg/a:1"}],
    }
    assert template == before


# --- the builder: the user's template reaches the Deployment, twc's parts are added -------
FULL_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "payments"}, "annotations": {"example.com/owner": "p"}},
    "spec": {
        "priorityClassName": "high",
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
        ],
        "securityContext": {"runAsNonRoot": True, "fsGroup": 2000},
        "volumes": [{"name": "config", "configMap": {"name": "app-config"}}],
        "initContainers": [
            {"name": "migrate", "image": "reg/migrate:1"},
            {"name": "mesh", "image": "reg/mesh:1", "restartPolicy": "Always"},
        ],
        "containers": [
            {"name": "metrics", "image": "reg/metrics:1", "ports": [{"containerPort": 9102}]},
            {
                "name": "worker",
                "image": "reg/app:1",
                "command": ["python", "-m", "app"],
                "args": ["--log=info"],
                "env": [
                    {
                        "name": "DB_PASSWORD",
                        "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}},
                    },
                    {
                        "name": "REGION",
                        "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "region"}},
                    },
                ],
                "envFrom": [{"configMapRef": {"name": "app-config"}, "prefix": "APP_"}],
                "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                "ports": [{"name": "health", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                "livenessProbe": {"tcpSocket": {"port": 8080}},
                "startupProbe": {"exec": {"command": ["true"]}},
                "securityContext": {"runAsUser": 1000, "readOnlyRootFilesystem": True},
            },
        ],
    },
}


def _deployment(worker: ResolvedWorker) -> dict[str, Any]:
    return builders.worker_deployment(worker, MTLS, FP)


def test_every_field_of_the_template_reaches_the_deployment() -> None:
    pod = _deployment(_resolve({"template": FULL_TEMPLATE}))["spec"]["template"]
    spec = pod["spec"]
    worker = _container(pod)
    user_worker = FULL_TEMPLATE["spec"]["containers"][1]
    for key in (
        "image",
        "command",
        "args",
        "envFrom",
        "ports",
        "readinessProbe",
        "livenessProbe",
        "startupProbe",
    ):
        assert worker[key] == user_worker[key], key
    assert user_worker["env"][0] in worker["env"]
    assert user_worker["env"][1] in worker["env"]
    assert user_worker["volumeMounts"][0] in worker["volumeMounts"]
    assert spec["priorityClassName"] == "high"
    assert spec["topologySpreadConstraints"] == FULL_TEMPLATE["spec"]["topologySpreadConstraints"]
    assert FULL_TEMPLATE["spec"]["volumes"][0] in spec["volumes"]
    assert _container(pod, "metrics") == FULL_TEMPLATE["spec"]["containers"][0]
    assert pod["metadata"]["labels"]["team"] == "payments"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "p"


def test_twc_adds_its_parts_to_the_worker_container_only() -> None:
    pod = _deployment(_resolve({"template": FULL_TEMPLATE}))["spec"]["template"]
    spec = pod["spec"]
    names = [e["name"] for e in _container(pod)["env"]]
    # twc's variables come first, so the user's may refer to them as $(TEMPORAL_ADDRESS).
    assert names[:2] == ["TEMPORAL_ADDRESS", "TEMPORAL_FRONTEND_ADDRESS"]
    assert {
        "TEMPORAL_NAMESPACE",
        "TEMPORAL_TASK_QUEUE",
        "POD_NAME",
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
    } <= set(names)
    assert names[-2:] == ["DB_PASSWORD", "REGION"]
    assert any(m["name"] == "temporal-tls" for m in _container(pod)["volumeMounts"])
    assert {"name": "temporal-tls", "secret": {"secretName": "temporal-mtls"}} in spec["volumes"]
    # The sidecars are the user's alone.
    assert "env" not in _container(pod, "metrics")
    inits = spec["initContainers"]
    assert [c["name"] for c in inits] == ["migrate", "mesh", "wait-for-temporal"]
    assert "env" not in inits[0]
    assert "env" not in inits[1]
    assert {e["name"] for e in inits[2]["env"]} == {"TEMPORAL_ADDRESS", "TEMPORAL_FRONTEND_ADDRESS"}
    assert spec["serviceAccountName"] == "w"
    assert pod["metadata"]["labels"]["twc.temporal.io/worker"] == "w"
    assert pod["metadata"]["annotations"]["temporal.io/connection-spec-hash"] == FP


def test_the_worker_container_comes_first_whatever_its_place_in_the_template() -> None:
    pod = _deployment(_resolve({"template": FULL_TEMPLATE}))["spec"]["template"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["worker", "metrics"]


def test_security_defaults_fill_only_what_the_template_leaves_unset() -> None:
    pod = _deployment(_resolve({"template": FULL_TEMPLATE}))["spec"]["template"]
    assert _container(pod)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": 1000,
        "readOnlyRootFilesystem": True,
    }
    assert pod["spec"]["securityContext"] == {
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": True,
        "fsGroup": 2000,
    }
    escalating = copy.deepcopy(FULL_TEMPLATE)
    escalating["spec"]["containers"][1]["securityContext"] = {"allowPrivilegeEscalation": True}
    escalating["spec"]["enableServiceLinks"] = True
    pod = _deployment(_resolve({"template": escalating}))["spec"]["template"]
    assert _container(pod)["securityContext"]["allowPrivilegeEscalation"] is True
    assert pod["spec"]["enableServiceLinks"] is True


def test_the_dlq_processor_shares_the_pod_but_not_the_worker_program() -> None:
    worker = _resolve({"template": FULL_TEMPLATE, "dlq": {"enabled": True, "image": "reg/dlq:1"}})
    pod = builders.dlq_statefulset_spec(worker, MTLS, FP)
    assert pod is not None
    container = _container(pod["template"], "dlq-processor")
    assert container["image"] == "reg/dlq:1"
    for key in ("command", "args", "ports", "readinessProbe", "livenessProbe", "startupProbe"):
        assert key not in container, key
    assert container["envFrom"] == FULL_TEMPLATE["spec"]["containers"][1]["envFrom"]
    assert _container(pod["template"], "metrics")["image"] == "reg/metrics:1"


def test_a_template_does_not_leak_into_the_resolved_copy_or_back() -> None:
    data = _fleet({"template": copy.deepcopy(FULL_TEMPLATE)})
    fleet = load_fleet(data, "f.yaml")
    (worker,) = fleet.resolved_workers()
    _deployment(worker)
    assert (
        worker.pod_template["spec"]["containers"][1]["env"]
        == FULL_TEMPLATE["spec"]["containers"][1]["env"]
    )
    assert fleet.workers[0].template == FULL_TEMPLATE
