"""Shared helpers for the preview renderer tests: recorded events and golden files.

Each scenario is ``golden/preview/<name>.events.json``: the engine's JSON events of one
``pulumi preview --diff`` (``preludeEvent``, ``resourcePreEvent``/``resOutputsEvent`` per
step, diagnostics, ``summaryEvent``), shaped like the events ``pulumi.automation``
parses, with the Kubernetes provider's detailed-diff paths and the Python dynamic
provider's missing detailed diff. Its renderings are ``<name>.txt|md|json``.

Set ``TWC_UPDATE_GOLDEN=1`` to rewrite the renderings from the current code; review the
diff before committing it. CI refuses it: there a golden file is compared, never written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulumi.automation.events import EngineEvent

from twc.preview import PreviewReport, build_report, render_json, render_markdown, render_text

GOLDEN = Path(__file__).parent / "golden" / "preview"
PROJECT, STACK = "twc", "prod"
UPDATE = os.environ.get("TWC_UPDATE_GOLDEN", "") == "1"
if UPDATE and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    # A run that rewrote its goldens would pass whatever the renderer does.
    raise RuntimeError("TWC_UPDATE_GOLDEN is refused when CI=true: goldens are checked in CI")

RENDERERS: dict[str, Callable[[PreviewReport], str]] = {
    "txt": render_text,
    "md": render_markdown,
    "json": render_json,
}

SCENARIOS = sorted(p.name.removesuffix(".events.json") for p in GOLDEN.glob("*.events.json"))

# Secret values planted in golden/preview/secrets.events.json (and their base64 forms,
# which is how a Kubernetes Secret's data holds them).
PLANTED = (
    "PLANTED-api-key-0ld-7f3a9c",
    "PLANTED-api-key-n3w-1b8e2d",
    "PLANTED-stringdata-passw0rd",
    "PLANTED-legacy-token-0ld",
    "PLANTED-legacy-token-n3w",
    "PLANTED-payments-api-key",
    "PLANTEDMIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    "PLANTEDXYZEvQIBADANBgkqhkiG9w0BAQEFAASC",
)


def raw_events(scenario: str) -> list[dict[str, Any]]:
    """The recorded JSON events of a scenario."""
    data: list[dict[str, Any]] = json.loads((GOLDEN / f"{scenario}.events.json").read_text())
    return data


def events(scenario: str) -> list[EngineEvent]:
    """The scenario's events as ``on_event`` receives them."""
    return [EngineEvent.from_json(item) for item in raw_events(scenario)]


def report(scenario: str) -> PreviewReport:
    """The report of a scenario."""
    return build_report(events(scenario), PROJECT, STACK)


def golden_path(scenario: str, fmt: str) -> Path:
    """Where a scenario's rendering in ``fmt`` (txt, md, json) is kept."""
    return GOLDEN / f"{scenario}.{fmt}"
