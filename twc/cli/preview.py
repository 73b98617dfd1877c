"""``twc preview``: observe and plan as ``twc up`` does, then the engine's preview.

The engine's events become a :class:`~twc.preview.PreviewReport` (with the deletions an
``up`` would hold), rendered as text, Markdown or JSON; a failed preview still renders.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from twc.cli import common
from twc.cli.stack_lease import guarded
from twc.engine import engine
from twc.engine.errors import engine_failure
from twc.engine.workspace import project_name
from twc.kube.client import NoClusterError
from twc.preview import (
    EXIT_ERROR,
    HeldDeletions,
    PreviewReport,
    build_report,
    exit_code,
    render_json,
    render_markdown,
    render_text,
)

log = logging.getLogger(__name__)

RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}


def run_preview(
    stack: str,
    *,
    fmt: str = "text",
    detailed: bool = False,
    fleet_file: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    cluster_objects: bool | None = None,
    sharded: bool = False,
    shard: str | None = None,
) -> int:
    """``twc preview``: 0, 2 for changes with ``detailed``, 1 for an error; a ``sharded``
    stack's shards (or the one ``shard`` names) as one merged report."""
    out, err = out or sys.stdout, err or sys.stderr
    file = common.fleet_file_for(stack, fleet_file)
    if fmt not in RENDERERS:
        print(f"unknown format {fmt!r}: use one of {', '.join(RENDERERS)}", file=err)
        return EXIT_ERROR
    if sharded:
        from twc.cli.shards import preview_shards

        report = preview_shards(stack, fleet_file, shard, cluster_objects, err)
    elif common.validate_or_report(file, err):
        report = preview_one(common.stack_ref(stack, fleet_file), file, cluster_objects, err)
    else:
        return EXIT_ERROR
    if report is None:
        return EXIT_ERROR
    print(RENDERERS[fmt](report), end="", file=out, flush=True)
    return exit_code(report, detailed)


def preview_one(
    ref: engine.StackRef,
    file: str,
    wanted: bool | None,
    err: TextIO,
    namespaces: Sequence[str] | None = None,
) -> PreviewReport | None:
    """The preview of ``ref`` (a stack, or a shard); ``None`` after saying why not. A failed
    engine preview is in the report's ``errors``."""
    from pulumi.automation import CommandError

    inputs = common.observe(ref, file, wanted, err, None, namespaces)
    with common.desired_inputs(ref, inputs) as merged:
        if merged is None or not common.dry_run_or_report(merged, file, err):
            return None
        events: list[Any] = []
        failure: str | None = None
        # Under the engine guard with its deadline; no Lease (a preview takes no lock).
        with guarded(merged) as run:
            try:
                engine.preview(run, on_event=events.append)
            except (CommandError, RuntimeError, OSError) as exc:  # no summary event, no pulumi
                log.debug("preview of %s failed", run.name, exc_info=True)
                failure = engine_failure(exc).text  # the report renders it
        report = build_report(events, project_name(run.work_dir), run.name, failure=failure)
        hold = None
        try:
            hold = common.deletion_verdict(merged, file).hold
        except NoClusterError:
            pass  # nothing running to delete
        except Exception as exc:  # noqa: BLE001 - an up would apply nothing; say why
            print(f"cannot tell what an up would delete: {exc}", file=err)
    if hold is None:
        return report
    held = HeldDeletions(workers=sorted(hold.workers), running=hold.total, allowed=hold.allowed)
    return report.model_copy(update={"held_deletions": held})
