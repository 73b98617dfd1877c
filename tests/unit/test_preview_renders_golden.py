"""The renderer reproduces the checked-in text, Markdown and JSON for recorded previews.

Regenerate with ``TWC_UPDATE_GOLDEN=1 pytest tests/unit/test_preview_renders_golden.py``.
"""

from __future__ import annotations

import difflib
import json

import pytest
from pulumi.automation.events import EngineEvent

from tests.unit._preview import (
    PROJECT,
    RENDERERS,
    SCENARIOS,
    STACK,
    UPDATE,
    golden_path,
    raw_events,
    report,
)
from twc.preview import SCHEMA_VERSION, PreviewReport, build_report, render_json

REQUIRED_SCENARIOS = {
    "create_queue_worker",
    "connection_hostport",
    "image_change",
    "replicas_autoscaling",
    "worker_deleted",
    "no_changes",
    "secrets",
    "replace_and_error",
    "real_versioned_image_change",
}


def test_every_required_scenario_is_recorded_with_all_three_goldens() -> None:
    assert set(SCENARIOS) >= REQUIRED_SCENARIOS
    missing = [
        golden_path(s, fmt).name
        for s in SCENARIOS
        for fmt in RENDERERS
        if not golden_path(s, fmt).exists()
    ]
    assert not missing or UPDATE, f"missing goldens (run with TWC_UPDATE_GOLDEN=1): {missing}"


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendering_matches_golden(scenario: str, fmt: str) -> None:
    rendered = RENDERERS[fmt](report(scenario))
    path = golden_path(scenario, fmt)
    if UPDATE:
        path.write_text(rendered)
    expected = path.read_text()
    if rendered != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                rendered.splitlines(keepends=True),
                fromfile=str(path),
                tofile="rendered",
            )
        )
        pytest.fail(f"{path.name} differs (TWC_UPDATE_GOLDEN=1 to accept):\n{diff}")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_groups_do_not_depend_on_event_order(scenario: str) -> None:
    # The engine runs independent steps in parallel: their events arrive in any order.
    # (Diagnostics keep their arrival order on purpose, so only groups are compared.)
    forward = report(scenario)
    backward = build_report(
        [EngineEvent.from_json(e) for e in reversed(raw_events(scenario))], PROJECT, STACK
    )
    assert backward.groups == forward.groups
    assert backward.summary == forward.summary


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_json_is_versioned_sorted_and_round_trips(scenario: str) -> None:
    original = report(scenario)
    text = render_json(original)
    data = json.loads(text)
    assert data["schemaVersion"] == SCHEMA_VERSION
    assert text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert PreviewReport.model_validate(data) == original


def test_goldens_cannot_be_rewritten_in_ci() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CI": "true", "TWC_UPDATE_GOLDEN": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "import tests.unit._preview"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "TWC_UPDATE_GOLDEN is refused when CI=true" in done.stderr
