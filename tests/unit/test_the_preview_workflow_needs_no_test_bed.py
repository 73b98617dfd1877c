"""The pull-request preview workflow runs twc as a package beside Pulumi's own CLI
release: no Go, no `make setup`, none of the test bed's tools."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "preview.yml"


def _steps() -> list[dict[str, Any]]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    steps: list[dict[str, Any]] = doc["jobs"]["preview"]["steps"]
    return steps


def test_it_installs_twc_with_pip_and_pulumi_from_its_own_release() -> None:
    runs = "\n".join(str(step.get("run", "")) for step in _steps())
    uses = [str(step.get("uses", "")) for step in _steps()]
    assert "pip install --quiet ." in runs
    assert "https://get.pulumi.com" in runs
    assert '--version "$PULUMI_VERSION"' in runs
    assert "twc preview --stack" in runs
    assert "--format markdown" in runs
    for absent in ("make ", "setup.sh", ".twc/bin", "go build"):
        assert absent not in runs, absent
    assert not [u for u in uses if "setup-go" in u]


def test_it_says_a_dry_run_needs_create_and_update_rights() -> None:
    text = WORKFLOW.read_text()
    assert "read-only credentials will do" not in text
    assert "create and update on deployments" in text
    assert "did not run" in text
