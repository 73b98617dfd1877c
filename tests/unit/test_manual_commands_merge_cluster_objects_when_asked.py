"""`twc up` / `twc preview` decide whether to merge the cluster's objects, and refuse to
apply without them when they are wanted but unreadable."""

from __future__ import annotations

import io
from typing import Any

import pytest

from twc.controller import commands, engine

REF = engine.StackRef(name="prod", config={"fleetFile": "stacks/prod.yaml"})


def test_the_file_alone_when_not_asked_and_the_stack_is_not_daemon_managed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "outputs", lambda ref: {"clusterObjects": False})
    with commands.with_cluster_objects(REF, "stacks/prod.yaml", None) as ref:
        assert ref == REF
    with commands.with_cluster_objects(REF, "stacks/prod.yaml", False) as ref:
        assert ref == REF


def test_a_stack_without_outputs_is_treated_as_file_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ref: Any) -> dict[str, Any]:
        raise RuntimeError("no such stack")

    monkeypatch.setattr(engine, "outputs", boom)
    with commands.with_cluster_objects(REF, "stacks/prod.yaml", None) as ref:
        assert ref == REF


def test_unreadable_cluster_objects_stop_the_command_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "outputs", lambda ref: {"clusterObjects": True})

    def no_cluster(ref: Any) -> Any:
        raise LookupError("no kubeconfig and not in a cluster")

    monkeypatch.setattr(commands, "_api_client", no_cluster)
    err = io.StringIO()
    with commands.with_cluster_objects(REF, "stacks/prod.yaml", None, err) as ref:
        assert ref is None
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
