"""The official worker controller's objects, as its documentation writes them, in twc.

Its Connection CRD and twc's have the same fields (so neither prunes what the other
writes), its documented Connections load as twc connections, twc watches them at
``temporal.io/v1alpha1``, and ``twc convert`` turns its migration guide's
WorkerDeployment into a fleet entry that validates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from twc import cli
from twc.connections import Registry
from twc.spec import CONNECTION_VERSION, load_connection_object, load_fleet
from twc.spec.convert import convert_manifests
from twc.spec.crds import connection_crd

OFFICIAL = Path(__file__).parent.parent / "fixtures" / "official"


def _docs(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((OFFICIAL / name).read_text()) if d is not None]


def _paths(schema: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, node in (schema.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        yield path
        yield from _paths(node, path)


def _served(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v["served"]]
    return dict(version)


def test_twc_and_the_official_connection_crd_have_the_same_fields() -> None:
    (official,) = _docs("crd-connections.yaml")
    ours = connection_crd()
    assert ours["metadata"]["name"] == official["metadata"]["name"] == "connections.temporal.io"
    assert _served(ours)["name"] == _served(official)["name"] == CONNECTION_VERSION
    assert (ours["spec"]["scope"], ours["spec"]["names"]["kind"]) == (
        official["spec"]["scope"],
        official["spec"]["names"]["kind"],
    )
    ours_spec = _served(ours)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    official_spec = _served(official)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert sorted(_paths(ours_spec)) == sorted(_paths(official_spec))
    assert "status" in _served(ours)["subresources"]
    assert [c["name"] for c in _served(ours)["additionalPrinterColumns"]] == [
        c["name"] for c in _served(official)["additionalPrinterColumns"]
    ]


def test_the_official_crd_is_not_labelled_as_twcs() -> None:
    from twc.kube.crds import is_twc_crd

    (official,) = _docs("crd-connections.yaml")
    assert not is_twc_crd(official["metadata"].get("labels"))
    assert is_twc_crd(connection_crd()["metadata"]["labels"])


@pytest.mark.parametrize(
    "name", ["connection-mtls.yaml", "connection-api-key.yaml", "migration-connections.yaml"]
)
def test_the_documented_connections_load_as_twc_connections(name: str) -> None:
    for doc in _docs(name):
        conn = load_connection_object({**doc, "metadata": {"namespace": "apps", **doc["metadata"]}})
        assert conn.host_port == doc["spec"]["hostPort"]
        assert conn.tls_enabled


def test_twc_watches_its_connection_kinds_at_the_official_version() -> None:
    kinds = {k.kind: k for k in Registry.with_builtins().watched_kinds()}
    assert {k.version for k in kinds.values()} == {CONNECTION_VERSION}
    assert (kinds["Connection"].plural, kinds["ClusterConnection"].plural) == (
        "connections",
        "clusterconnections",
    )


def test_convert_of_the_migration_guide_validates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = cli.main(
        [
            "convert",
            str(OFFICIAL / "migration-connections.yaml"),
            str(OFFICIAL / "migration-workerdeployment.yaml"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(out)
    assert cli.main(["validate", str(fleet_file)]) == 0, capsys.readouterr().err
    (worker,) = load_fleet(yaml.safe_load(out), "f").resolved_workers()
    (official,) = _docs("migration-workerdeployment.yaml")
    spec = official["spec"]
    assert worker.rollout is not None
    assert [(s.ramp_percentage, s.pause_duration) for s in worker.rollout.steps] == [
        (s["rampPercentage"], s["pauseDuration"]) for s in spec["rollout"]["steps"]
    ]
    assert worker.sunset is not None
    assert (worker.sunset.scaledown_delay, worker.sunset.delete_delay) == ("30m", "2h")
    assert worker.replicas == 3
    assert worker.temporal_namespace == "production"
    assert worker.image == "payment-processor:v1.5.2"
    assert worker.pod_template["spec"]["containers"][0]["resources"] == {
        "requests": {"memory": "512Mi", "cpu": "250m"}
    }
    assert worker.connection.name == "production-temporal"
    # The task queue the official kind does not have, and the object labels, are noted.
    assert "taskQueueName is set to 'payment-processor'" in err
    assert "metadata.labels" in err


def test_convert_notes_what_has_no_counterpart_and_drops_what_twc_sets() -> None:
    doc = {
        "apiVersion": "temporal.io/v1alpha1",
        "kind": "TemporalWorkerDeployment",
        "metadata": {"name": "orders", "namespace": "apps"},
        "spec": {
            "minReadySeconds": 10,
            "progressDeadlineSeconds": 900,
            "rollout": {"strategy": "AllAtOnce"},
            "sunset": {"scaledownDelay": "1h", "deleteDelay": "24h"},
            "workerOptions": {
                "connection": "prod",
                "temporalNamespace": "default",
                "unsafeCustomBuildID": "v1",
            },
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "x", "team": "t"}},
                "spec": {
                    "serviceAccountName": "orders",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "reg/orders:1",
                            "env": [
                                {"name": "TEMPORAL_ADDRESS", "value": "x:7233"},
                                {"name": "LOG_LEVEL", "value": "info"},
                            ],
                        }
                    ],
                },
            },
        },
    }
    result = convert_manifests(
        [doc, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}]
    )
    (worker,) = result.fleet["workers"]
    fields = {n.field for n in result.notes}
    assert {
        "spec.minReadySeconds",
        "spec.progressDeadlineSeconds",
        "spec.workerOptions.unsafeCustomBuildID",
        "spec.workerOptions.connection",
        "spec.template.spec.serviceAccountName",
        'spec.template.metadata.labels["app.kubernetes.io/name"]',
        "spec.template.spec.containers[0].env.TEMPORAL_ADDRESS",
        "spec.replicas",
    } <= fields
    assert any(n.source == "Service s" and "skipped" in n.message for n in result.notes)
    assert worker["connectionRef"] == {"name": "prod"}
    assert worker["rollout"] == {"strategy": "AllAtOnce", "buildID": "v1"}
    assert worker["template"]["spec"] == {
        "containers": [
            {
                "name": "worker",
                "image": "reg/orders:1",
                "env": [{"name": "LOG_LEVEL", "value": "info"}],
            }
        ]
    }
    assert worker["template"]["metadata"] == {"labels": {"team": "t"}}
    assert result.converted == 1


def test_convert_of_nothing_convertible_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "svc.yaml"
    empty.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    assert cli.main(["convert", str(empty)]) == 1
    assert "nothing to convert" in capsys.readouterr().err
