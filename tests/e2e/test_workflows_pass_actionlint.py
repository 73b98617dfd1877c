"""The GitHub workflows in .github/workflows pass the real actionlint.

actionlint checks the workflow syntax, the `${{ }}` expressions against the contexts
each event provides, the actions' inputs and the job graph; a broken workflow it must
reject shows the check is really running.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.e2e

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))


def _actionlint(actionlint: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [actionlint, "-no-color", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_every_workflow_passes_actionlint(real_tool: Callable[[str], str]) -> None:
    assert WORKFLOWS, "no workflows found"
    done = _actionlint(real_tool("actionlint"), *(str(w.relative_to(ROOT)) for w in WORKFLOWS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_rejects_a_broken_workflow(
    real_tool: Callable[[str], str], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: pull_request\n"
        "jobs:\n"
        "  preview:\n"
        "    runs-on: ubuntu-latest\n"
        "    steps:\n"
        "      - run: echo ${{ github.event.pull_request.numbr }}\n"
        "      - uses: actions/checkout@v4\n"
        "        with: {no-such-input: true}\n"
    )
    done = _actionlint(real_tool("actionlint"), str(broken))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no-such-input" in done.stdout
