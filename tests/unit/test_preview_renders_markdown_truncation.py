"""Markdown fits a pull-request comment: at most 64 000 characters, with a notice when cut."""

from __future__ import annotations

from typing import Any

from pulumi.automation.events import EngineEvent

from tests.unit._preview import report
from twc.preview import (
    MARKDOWN_LIMIT,
    TRUNCATION_NOTICE,
    PreviewReport,
    build_report,
    render_markdown,
    render_text,
)


def _big_fleet(workers: int) -> PreviewReport:
    """A preview where every worker changes image and forty env vars."""
    items: list[dict[str, Any]] = []
    for i in range(workers):
        comp = f"urn:pulumi:prod::twc::twc:temporal:TemporalWorker::temporal/worker-{i:04d}"
        dep = (
            "urn:pulumi:prod::twc::twc:temporal:TemporalWorker$kubernetes:apps/v1:Deployment"
            f"::temporal/worker-{i:04d}-deployment"
        )

        def spec(tag: str, value: str) -> dict[str, Any]:
            env = [{"name": f"SETTING_{n:02d}", "value": f"{value}-{n}"} for n in range(40)]
            container = {"name": "worker", "image": f"registry.example/worker:{tag}", "env": env}
            return {"spec": {"template": {"spec": {"containers": [container]}}}}

        paths = ["spec.template.spec.containers[0].image"] + [
            f"spec.template.spec.containers[0].env[{n}].value" for n in range(40)
        ]
        items.append(
            {
                "resourcePreEvent": {
                    "metadata": {"op": "same", "urn": comp, "type": "twc:temporal:TemporalWorker"}
                }
            }
        )
        items.append(
            {
                "resourcePreEvent": {
                    "metadata": {
                        "op": "update",
                        "urn": dep,
                        "type": "kubernetes:apps/v1:Deployment",
                        "old": {"urn": dep, "parent": comp, "inputs": spec("1.4.2", "old")},
                        "new": {"urn": dep, "parent": comp, "inputs": spec("1.5.0", "new")},
                        "detailedDiff": {p: {"diffKind": "update"} for p in paths},
                    }
                }
            }
        )
    return build_report([EngineEvent.from_json(item) for item in items], "twc", "prod")


def test_a_huge_preview_is_cut_to_the_limit_with_a_notice() -> None:
    big = _big_fleet(120)
    assert len(render_text(big)) > 2 * MARKDOWN_LIMIT  # really too big for a comment
    md = render_markdown(big)
    assert len(md) <= MARKDOWN_LIMIT
    assert TRUNCATION_NOTICE in md
    assert "group details not shown" in md
    # Cut between blocks, never inside one: every details block is closed.
    assert md.count("<details>") == md.count("</details>") > 0
    # The summary table is kept whole: every worker has its row.
    assert all(f"`temporal/worker-{i:04d}`" in md for i in range(120))


def test_a_smaller_limit_is_respected_too() -> None:
    md = render_markdown(_big_fleet(40), limit=5_000)
    assert len(md) <= 5_000
    assert TRUNCATION_NOTICE in md
    assert "summary rows" in md


def test_an_absurdly_small_limit_still_holds() -> None:
    md = render_markdown(_big_fleet(3), limit=300)
    assert len(md) <= 300
    assert TRUNCATION_NOTICE in md


def test_a_preview_that_fits_carries_no_notice() -> None:
    small = render_markdown(_big_fleet(2))
    assert TRUNCATION_NOTICE not in small
    assert small == render_markdown(_big_fleet(2), limit=len(small))
    assert TRUNCATION_NOTICE in render_markdown(_big_fleet(2), limit=len(small) - 1)


def test_recorded_previews_fit_whole() -> None:
    md = render_markdown(report("connection_hostport"))
    assert TRUNCATION_NOTICE not in md
    assert md.startswith("### twc preview: `twc` / `prod`")
