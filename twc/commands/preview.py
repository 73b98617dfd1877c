"""``twc preview``: a real ``pulumi preview --diff``, explained per worker and connection.

The fleet file is validated first (a bad file exits 1 with every problem listed and the
engine never starts). Then the engine previews the stack through the Automation API;
its events are turned into a :class:`~twc.preview.PreviewReport` and rendered as text,
Markdown (a pull-request comment) or JSON (docs/preview-json.md). A failed preview still
renders a report, carrying the engine's error, and exits 1.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, TextIO

from twc.commands import common
from twc.commands.stack_lease import guarded
from twc.desired import Hold
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
from twc.stackrun import engine
from twc.stackrun.errors import engine_failure

__all__ = ["FORMATS", "preview_report", "render", "run_preview"]

log = logging.getLogger(__name__)

FORMATS = ("text", "markdown", "json")
"""Values of ``--format``."""


def run_preview(
    stack: str,
    *,
    fmt: str = "text",
    detailed: bool = False,
    fleet_file: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    cluster_objects: bool | None = None,
) -> int:
    """``twc preview``: validate, preview, print the report; returns the exit code.

    Args:
        stack: The stack (environment) to preview.
        fmt: ``text``, ``markdown`` or ``json``.
        detailed: ``--detailed-exitcode``: exit 2 when something changes.
        fleet_file: ``--fleet-file``; default ``stacks/<stack>.yaml``.
        out: Where the report goes (default standard output).
        err: Where validation errors go (default standard error).
        cluster_objects: Include the cluster's Queue, TemporalWorker and connection
            objects as the daemon does; ``None`` follows the fleet's ``clusterObjects``.

    Returns:
        0 no changes (or changes without ``detailed``), 2 changes with ``detailed``,
        1 an invalid fleet file or a failed preview.
    """
    out = out or sys.stdout
    err = err or sys.stderr
    if fmt not in FORMATS:
        print(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}", file=err)
        return EXIT_ERROR
    if not common.validate_or_report(common.fleet_file_for(stack, fleet_file), err):
        return EXIT_ERROR
    file = common.fleet_file_for(stack, fleet_file)
    ref = common.stack_ref(stack, fleet_file)
    with common.desired_inputs(ref, file, cluster_objects, err) as merged:
        if merged is None or not common.dry_run_or_report(merged, file, err):
            return EXIT_ERROR
        # Under the engine guard with its deadline; no Lease (a preview takes no lock).
        with guarded(merged) as run:
            report = preview_report(run)
        hold = _held(merged, file, err)
    if hold is not None:
        held = HeldDeletions(workers=sorted(hold.workers), running=hold.total, allowed=hold.allowed)
        report = report.model_copy(update={"held_deletions": held})
    print(render(report, fmt), end="", file=out, flush=True)
    return exit_code(report, detailed)


def _held(ref: engine.StackRef, file: str, err: TextIO) -> Hold | None:
    """The deletions an ``up`` of this preview would hold (see :mod:`twc.commands.up`)."""
    from twc.kube.client import NoClusterError

    try:
        return common.deletion_verdict(ref, file).hold
    except NoClusterError:
        return None  # no cluster, nothing running to delete
    except Exception as exc:  # noqa: BLE001 - an up would apply nothing; say why
        print(f"cannot tell what an up would delete: {exc}", file=err)
        return None


def preview_report(ref: engine.StackRef) -> PreviewReport:
    """Run the engine's preview of ``ref`` and build the report from its events.

    Args:
        ref: The stack, with the config this run needs.

    Returns:
        The report. An engine failure does not raise: it is in ``report.errors``.
    """
    from pulumi.automation import CommandError

    events: list[Any] = []
    failure: str | None = None
    try:
        engine.preview(ref, on_event=events.append)
    except (CommandError, RuntimeError, OSError) as exc:
        # RuntimeError: the Automation API's own "summary event never found"; OSError:
        # no pulumi binary. Either way the report says the preview failed.
        log.debug("preview of %s failed", ref.name, exc_info=True)
        failure = engine_failure(exc).text
    report = build_report(events, _project_name(ref.work_dir), ref.name)
    if failure and not report.errors:
        # The engine's own error diagnostics say it better; the exception text is for
        # failures that produced none (a locked backend, a missing plugin...).
        report = build_report(events, _project_name(ref.work_dir), ref.name, failure=failure)
    return report


def render(report: PreviewReport, fmt: str) -> str:
    """The report in one of :data:`FORMATS`."""
    if fmt == "markdown":
        return render_markdown(report)
    if fmt == "json":
        return render_json(report)
    return render_text(report)


def _project_name(work_dir: Path) -> str:
    """The Pulumi project's name, from ``Pulumi.yaml`` (the heading of the report)."""
    import yaml

    try:
        data = yaml.safe_load((work_dir / "Pulumi.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return work_dir.name
    name = data.get("name") if isinstance(data, dict) else None
    return str(name) if name else work_dir.name
