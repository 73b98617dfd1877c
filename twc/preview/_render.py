"""A :class:`PreviewReport` as text, Markdown (a PR comment) or JSON, and exit codes.
Pure; values were scrubbed when the report was built."""

from __future__ import annotations

import bisect
import html
import itertools
import json
import re
from collections.abc import Callable

from pydantic import JsonValue

from twc.preview._build import plural as _plural
from twc.preview._model import (
    Diagnostic,
    Group,
    HeldDeletions,
    OpCounts,
    Operation,
    PreviewReport,
    ResourceChange,
)
from twc.preview._values import SECRET, UNKNOWN, kind_label

# The preview failed (1); with --detailed-exitcode, it succeeded and something changes (2).
EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2

MARKDOWN_LIMIT = 64_000  # GitHub refuses comments over 65 536 characters
TRUNCATION_NOTICE = "**Preview truncated**"  # opens the notice ending a truncated preview

_SYMBOL = dict(zip(Operation, ("+", "~", "+-", "-", " "), strict=True))
_TEXT_VALUE_WIDTH = 160
_MD_VALUE_WIDTH = 120
_MD_MESSAGE_WIDTH = 2_000
_MD_MAX_DIAGNOSTICS = 20
_MD_MAX_RESTARTING = 100
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def exit_code(report: PreviewReport, detailed: bool) -> int:
    """1 when the preview failed, else 2 when ``detailed`` and something changes, else 0."""
    if report.errors:
        return EXIT_ERROR
    return EXIT_CHANGES if detailed and report.summary.has_changes else EXIT_OK


def render_json(report: PreviewReport) -> str:
    """The report as stable JSON (docs/preview-json.md); ``heldDeletions`` only when held."""
    skip = {"held_deletions"} if report.held_deletions is None else None
    data = report.model_dump(mode="json", by_alias=True, exclude=skip)
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def render_text(report: PreviewReport) -> str:
    """The report for a terminal: a plan line, then one block per changed group."""
    lines = [f"Preview of {report.project}/{report.stack}"]
    lines.extend(_text_diagnostics("Errors", report.errors))
    lines.extend(_text_diagnostics("Warnings", report.warnings))
    if report.held_deletions is not None:
        lines.append(f"Held deletions: {_held_text(report, report.held_deletions)}")
    summary = report.summary
    if not summary.has_changes:
        lines.append(f"No changes ({_plural(summary.resources.same, 'resource')} unchanged).")
        return "\n".join(lines) + "\n"
    lines.append(f"Plan: {_plan(summary.resources, ', ')}")
    if summary.restarting_workers:
        lines.append(f"Workers that will restart: {', '.join(summary.restarting_workers)}")
    changed = report.changed_groups
    for group in changed:
        restarts = " (pods restart)" if group.restarts else ""
        op = group.operation
        lines += ["", f"{_SYMBOL[op]} {op.value} {_kind(group)} {group.name}{restarts}"]
        lines += [f"    - {reason.message}" for reason in group.reasons]
        for res in group.resources:
            lines.append(f"    {_SYMBOL[res.operation]} {_kind(res)} {res.name}")
            for fc in res.fields:
                forced = " (forces replacement)" if fc.replace else ""
                old, new = _value(fc.old, _TEXT_VALUE_WIDTH), _value(fc.new, _TEXT_VALUE_WIDTH)
                shown = {"add": f"+ {fc.path}: {new}", "delete": f"- {fc.path}: {old}"}
                change = shown.get(fc.kind, f"~ {fc.path}: {old} → {new}")
                lines.append(f"        {change}{forced}")
    unchanged = len(report.groups) - len(changed)
    if unchanged:
        lines += ["", f"({_plural(unchanged, 'group')} unchanged)"]
    return "\n".join(lines) + "\n"


def _text_diagnostics(title: str, diagnostics: list[Diagnostic]) -> list[str]:
    lines = [f"{title}:"] if diagnostics else []
    for diag in diagnostics:
        where = f" ({diag.urn})" if diag.urn else ""
        first, *rest = diag.message.splitlines() or [""]
        lines.append(f"  {diag.severity}: {first}{where}")
        lines.extend(f"    {line}" for line in rest)
    return lines


def render_markdown(report: PreviewReport, *, limit: int = MARKDOWN_LIMIT) -> str:
    """The report as a PR comment of at most ``limit`` characters; what does not fit is
    left out, and a notice starting with :data:`TRUNCATION_NOTICE` says how much."""
    head = _md_head(report)
    changed = report.changed_groups
    if not changed:
        return _fit(head.rstrip("\n") + "\n", limit)
    table_head = "| Change | Kind | Name | Why |\n| --- | --- | --- | --- |\n"
    rows = [_md_row(group) for group in changed]
    blocks = [_md_block(group) for group in changed]
    full = (head + table_head + "".join(rows) + "\n" + "".join(blocks)).rstrip("\n") + "\n"
    if len(full) <= limit:
        return full

    def notice(rows_shown: int, blocks_shown: int) -> str:
        hidden = []
        if rows_shown < len(rows):
            hidden.append(f"{len(rows) - rows_shown} of {len(rows)} summary rows")
        if blocks_shown < len(blocks):
            hidden.append(f"{len(blocks) - blocks_shown} of {len(blocks)} group details")
        return (
            f"\n> {TRUNCATION_NOTICE} to fit a {limit:,}-character comment: "
            f"{' and '.join(hidden)} not shown. Run `twc preview --stack {report.stack}` "
            "for the full preview.\n"
        )

    # Reserve room for the notice at its longest, then fill rows, then details blocks.
    budget = limit - len(notice(0, 0)) - len(head) - len(table_head) - 1
    n_rows = _fitting(rows, budget)
    n_blocks = _fitting(blocks, budget - len("".join(rows))) if n_rows == len(rows) else 0
    text = [head, table_head, *rows[:n_rows], "\n", *blocks[:n_blocks], notice(n_rows, n_blocks)]
    return _fit("".join(text), limit)


def _fitting(items: list[str], budget: int) -> int:
    """How many of ``items``, from the first, fit in ``budget`` characters."""
    return bisect.bisect_right(list(itertools.accumulate(map(len, items))), budget)


def _fit(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    tail = f"\n\n> {TRUNCATION_NOTICE}: output cut at {limit:,} characters.\n"
    return text[: max(0, limit - len(tail))] + tail


def _held_text(report: PreviewReport, held: HeldDeletions) -> str:
    return (
        f"{len(held.workers)} of the {held.running} running workers would be deleted at once, "
        f"more than the {held.allowed} allowed: {', '.join(held.workers)}. The daemon holds "
        f"them until confirmed (`twc approve --stack {report.stack}`); `twc up` asks first."
    )


def _md_head(report: PreviewReport) -> str:
    parts = [f"### twc preview: `{report.project}` / `{report.stack}`\n\n"]
    if report.held_deletions is not None:
        held = _held_text(report, report.held_deletions)
        parts.append(f"> [!WARNING]\n> **Held deletions:** {held}\n\n")
    if report.errors:
        count = _plural(len(report.errors), "error")
        parts.append(f"> [!CAUTION]\n> **The preview failed** with {count}.\n\n")
        parts.append(_md_diagnostics(report.errors))
    summary = report.summary
    if not summary.has_changes:
        same = _plural(summary.resources.same, "resource")
        parts.append(f"**No changes.** {same} unchanged.\n\n")
    else:
        parts.append(f"**Plan:** {_plan(summary.resources, ' · ')}\n\n")
        restarting = summary.restarting_workers
        if restarting:
            shown = ", ".join(_md_code(w) for w in restarting[:_MD_MAX_RESTARTING])
            hidden = len(restarting) - _MD_MAX_RESTARTING
            more = f" and {hidden} more" if hidden > 0 else ""
            parts.append(f"**Workers that will restart:** {shown}{more}\n\n")
    if report.warnings:
        count = _plural(len(report.warnings), "warning")
        parts.append(f"<details>\n<summary>{count}</summary>\n\n")
        parts += [_md_diagnostics(report.warnings), "</details>\n\n"]
    return "".join(parts)


def _md_diagnostics(diagnostics: list[Diagnostic]) -> str:
    parts = []
    for diag in diagnostics[:_MD_MAX_DIAGNOSTICS]:
        message = _truncate(diag.message, _MD_MESSAGE_WIDTH)
        if diag.urn:
            message = f"{diag.urn}\n{message}"
        parts.append(f"{_ticks(message, 3)}\n{message}\n{_ticks(message, 3)}\n\n")
    if len(diagnostics) > _MD_MAX_DIAGNOSTICS:
        parts.append(f"… and {len(diagnostics) - _MD_MAX_DIAGNOSTICS} more.\n\n")
    return "".join(parts)


def _ticks(text: str, least: int) -> str:
    return "`" * max(least, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)


def _md_row(group: Group) -> str:
    why = _inline(group.reasons[0].message, _md_cell, _md_code) if group.reasons else ""
    extra = len(group.reasons) - 1
    if extra > 0:
        why += f" (+{extra} more)"
    if group.restarts:
        why += " · pods restart"
    return f"| **{group.operation.value}** | {_kind(group)} | {_md_code(group.name)} | {why} |\n"


def _md_block(group: Group) -> str:
    summary = (
        f"<b>{group.operation.value}</b> {html.escape(_kind(group))} "
        f"<code>{html.escape(group.name)}</code>"
    )
    if group.reasons:
        summary += f": {_inline(group.reasons[0].message, html.escape, _html_code)}"
    parts = [f"<details>\n<summary>{summary}</summary>\n\n"]
    parts += [f"- {_inline(r.message, _md_escape, None)}\n" for r in group.reasons]
    if group.restarts:
        parts.append("- pods restart\n")
    if group.resources:
        parts.append(
            "\n| Resource | Change | Field | Old | New |\n| --- | --- | --- | --- | --- |\n"
        )
    for res in group.resources:
        who, op = f"{_md_code(res.name)} ({_kind(res)})", res.operation.value
        if not res.fields:
            parts.append(f"| {who} | {op} | | | |\n")
        for fc in res.fields:
            forced = " (forces replacement)" if fc.replace else ""
            old = "" if fc.kind == "add" else _md_code(_value(fc.old, _MD_VALUE_WIDTH))
            new = "" if fc.kind == "delete" else _md_code(_value(fc.new, _MD_VALUE_WIDTH))
            parts.append(f"| {who} | {op}{forced} | {_md_code(fc.path)} | {old} | {new} |\n")
    parts.append("\n</details>\n\n")
    return "".join(parts)


def _md_code(text: str) -> str:
    """An inline code span that survives any content, also in a table cell."""
    text = text.replace("\n", " ").replace("|", "\\|")
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{_ticks(text, 1)}{pad}{text}{pad}{_ticks(text, 1)}"


def _inline(text: str, escape: Callable[[str], str], code: Callable[[str], str] | None) -> str:
    """A reason's `code spans` rendered by ``code`` (None: kept), the rest by ``escape``."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        span = code(match.group(2)) if code else match.group(0)
        out += [escape(text[last : match.start()]), span]
        last = match.end()
    return "".join([*out, escape(text[last:])])


def _md_escape(text: str) -> str:
    text = html.escape(text, quote=False).replace("\n", " ")
    return re.sub(r"([\\*_\[\]#~])", r"\\\1", text)


def _md_cell(text: str) -> str:
    return _md_escape(text).replace("|", "\\|")


def _html_code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def _plan(counts: OpCounts, sep: str) -> str:
    ops = ("create", "update", "replace", "delete")
    return sep.join([*(f"{getattr(counts, op)} to {op}" for op in ops), f"{counts.same} unchanged"])


def _kind(item: Group | ResourceChange) -> str:
    return kind_label(item.type, item.name)


def _value(value: JsonValue, width: int) -> str:
    if value in (UNKNOWN, SECRET):
        return "(known after apply)" if value == UNKNOWN else SECRET
    return _truncate(
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False), width
    )


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
