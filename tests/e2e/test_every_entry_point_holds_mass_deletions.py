"""A plan that deletes more than the fleet's share of a stack's running workers needs a
person, whichever way the stack is applied: plain ``pulumi up`` from an operator's shell
(no ``POD_NAMESPACE``) fails and the unsharded ``twc up`` refuses without ``--yes``, each
leaving every Deployment byte for byte and no lock. ``twc approve`` then lets exactly
that set through once; the same set coming back later is held again."""

from __future__ import annotations

import io
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, fleet_doc, plain_workers
from tests.faults._checks import assert_unchanged, deployment_bytes, lock_files
from twc.cli import up
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("operator_shell")]

NAMES = ("keep", "gone-a", "gone-b", "gone-c")
"""Four workers; dropping three of them is beyond the default share (one of four)."""


def _fleet(local_env: LocalEnvironment, namespace: str, names: tuple[str, ...]) -> Any:
    return fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=plain_workers(namespace, names),
    )


def _four_running(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> tuple[FleetStack, dict[str, bytes]]:
    fs = fleet_stack(_fleet(local_env, namespace, NAMES))
    fs.up()
    before = deployment_bytes(kube, namespace)
    assert sorted(before) == sorted(NAMES)
    return fs, before


def test_plain_pulumi_up_refuses_to_delete_beyond_the_share_until_approved(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    fs, before = _four_running(local_env, kube, namespace, fleet_stack)
    fs.write(_fleet(local_env, namespace, NAMES[:1]))

    refused = fs.plain_up()

    said = refused.stdout + refused.stderr
    assert refused.returncode != 0, said[-3000:]
    assert "3 of 4 workers would be deleted at once" in said, said[-3000:]
    assert f"twc up --stack {fs.name} --yes" in said
    assert f"twc approve --stack {fs.name}" in said
    assert_unchanged(before, deployment_bytes(kube, namespace))
    assert not lock_files(fs)

    # The refusal put the held set on the stack's record: approved, the next up goes.
    out = io.StringIO()
    assert up.run_approve(fs.name, out=out, err=io.StringIO()) == 0
    assert f"{namespace}/gone-a" in out.getvalue()
    applied = fs.plain_up()
    assert applied.returncode == 0, (applied.stdout + applied.stderr)[-3000:]
    assert sorted(deployment_bytes(kube, namespace)) == ["keep"]
    assert_unchanged({"keep": before["keep"]}, deployment_bytes(kube, namespace))


def test_twc_up_holds_deletions_beyond_the_share_until_approved_once(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fs, before = _four_running(local_env, kube, namespace, fleet_stack)
    fs.write(_fleet(local_env, namespace, NAMES[:1]))
    capsys.readouterr()

    # Nobody at a terminal and no --yes: refused, nothing applied.
    assert up.run_up(fs.name, str(fs.fleet_file), out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert "deletes 3 of the 4 running workers" in err
    assert f"twc up --stack {fs.name} --yes" in err
    assert f"twc approve --stack {fs.name}" in err
    assert_unchanged(before, deployment_bytes(kube, namespace))
    assert not lock_files(fs)

    assert up.run_approve(fs.name, out=io.StringIO(), err=io.StringIO()) == 0
    assert up.run_up(fs.name, str(fs.fleet_file), out=io.StringIO()) == 0
    assert sorted(deployment_bytes(kube, namespace)) == ["keep"]

    # The approval is spent: the same three workers come back, then go again: held.
    fs.write(_fleet(local_env, namespace, NAMES))
    assert up.run_up(fs.name, str(fs.fleet_file), out=io.StringIO()) == 0
    again = deployment_bytes(kube, namespace)
    assert sorted(again) == sorted(NAMES)
    fs.write(_fleet(local_env, namespace, NAMES[:1]))
    capsys.readouterr()
    assert up.run_up(fs.name, str(fs.fleet_file), out=io.StringIO()) == 1
    assert "nothing was applied" in capsys.readouterr().err
    assert_unchanged(again, deployment_bytes(kube, namespace))
    assert not lock_files(fs)
