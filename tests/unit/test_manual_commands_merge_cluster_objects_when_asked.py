"""`twc up` / `twc preview` include the cluster's objects as the fleet says (or as asked),
and refuse to apply without them when they are wanted but unreadable."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit._daemon_fakes import fleet_data
from twc.cli import common
from twc.desired import INPUTS_ENV, DesiredInputs
from twc.engine import engine


def _ref(tmp_path: Path, **fleet: Any) -> tuple[engine.StackRef, str]:
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump({**fleet_data(), **fleet}))
    return engine.StackRef(name="prod", config={"fleetFile": str(path)}), str(path)


def _inputs(run: engine.StackRef | None) -> DesiredInputs:
    assert run is not None
    assert run.env is not None
    return DesiredInputs.from_file(run.env[INPUTS_ENV])


def test_the_file_alone_when_asked_or_when_the_fleet_opts_out(tmp_path: Path) -> None:
    ref, file = _ref(tmp_path)
    with common.desired_inputs(ref, common.observe(ref, file, False)) as run:
        inputs = _inputs(run)
        assert inputs.cluster is None
        assert inputs.fleet is not None
        workers = inputs.fleet["workers"]
        assert isinstance(workers, list)
        assert workers[0] == {"name": "payments", "namespace": "team", "taskQueueName": "payments"}
    ref, file = _ref(tmp_path, clusterObjects=False)
    with common.desired_inputs(ref, common.observe(ref, file, None)) as run:
        assert _inputs(run).cluster is None


def test_the_fleet_includes_the_cluster_objects_unless_it_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[engine.StackRef] = []

    def no_cluster(ref: engine.StackRef) -> Any:
        asked.append(ref)
        raise LookupError("no kubeconfig (KUBECONFIG, ~/.kube/config) and not in a pod")

    monkeypatch.setattr(common, "stack_kube", no_cluster)
    ref, file = _ref(tmp_path)
    with common.desired_inputs(ref, common.observe(ref, file, None, io.StringIO())) as run:
        assert run is None
    assert asked == [ref]


def test_unreadable_cluster_objects_stop_the_command_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_cluster(ref: Any) -> Any:
        raise LookupError("no kubeconfig and not in a cluster")

    monkeypatch.setattr(common, "stack_kube", no_cluster)
    err = io.StringIO()
    ref, file = _ref(tmp_path)
    with common.desired_inputs(ref, common.observe(ref, file, True, err)) as run:
        assert run is None
    assert "no kubeconfig and not in a cluster" in err.getvalue()
    assert "nothing was applied (--file-only ignores them)" in err.getvalue()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [([], None), (["--cluster-objects"], True), (["--file-only"], False)],
)
def test_up_and_preview_take_cluster_objects_or_file_only(
    argv: list[str], expected: bool | None
) -> None:
    from twc.cli import build_parser

    for verb in ("up", "preview"):
        args = build_parser().parse_args([verb, "--stack", "prod", *argv])
        assert args.cluster_objects is expected


def test_cluster_objects_and_file_only_exclude_each_other() -> None:
    from twc.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--stack", "p", "--cluster-objects", "--file-only"])
