"""Render a :class:`PreviewReport` as text, Markdown (a PR comment) or JSON; exit codes.

Renderers are pure functions of the report. Values were scrubbed when the report was
built; nothing here can reveal more than the report holds.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable

from pydantic import JsonValue

from twc.preview._model import (
    Diagnostic,
    FieldChange,
    Group,
    OpCounts,
    Operation,
    PreviewReport,
    ResourceChange,
)
from twc.preview._paths import kind_label
from twc.preview._redact import UNKNOWN

__all__ = [
    "EXIT_CHANGES",
    "EXIT_ERROR",
    "EXIT_OK",
    "MARKDOWN_LIMIT",
    "TRUNCATION_NOTICE",
    "exit_code",
    "render_json",
    "render_markdown",
    "render_text",
]

EXIT_OK = 0
"""The preview succeeded (and, with ``--detailed-exitcode``, nothing changes)."""
EXIT_ERROR = 1
"""The preview failed."""
EXIT_CHANGES = 2
"""With ``--detailed-exitcode``: the preview succeeded and something changes."""

MARKDOWN_LIMIT = 64_000
"""Longest Markdown produced: GitHub refuses comments over 65 536 characters."""

TRUNCATION_NOTICE = "**Preview truncated**"
"""Opening words of the notice that ends a truncated Markdown preview."""

_SYMBOL = {
    Operation.CREATE: "+",
    Operation.UPDATE: "~",
    Operation.REPLACE: "+-",
    Operation.DELETE: "-",
    Operation.SAME: " ",
}
_TEXT_VALUE_WIDTH = 160
_MD_VALUE_WIDTH = 120
_MD_MESSAGE_WIDTH = 2_000
_MD_MAX_DIAGNOSTICS = 20
_MD_MAX_RESTARTING = 100
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def exit_code(report: PreviewReport, detailed: bool) -> int:
    """The process exit code for ``twc preview``.

    Args:
        report: The preview report.
        detailed: ``--detailed-exitcode`` was given: tell "changes" apart from "none".

    Returns:
        1 when the preview failed (an error diagnostic), else 2 when ``detailed`` and
        something changes, else 0.
    """
    if report.errors:
        return EXIT_ERROR
    if detailed and report.summary.has_changes:
        return EXIT_CHANGES
    return EXIT_OK


def render_json(report: PreviewReport) -> str:
    """The report as stable JSON (docs/preview-json.md): sorted keys, two-space indent.

    Args:
        report: The preview report.

    Returns:
        The document, ending with a newline.
    """
    # ``heldDeletions`` is there only when deletions are held (an added key).
    skip = {"held_deletions"} if report.held_deletions is None else None
    data = report.model_dump(mode="json", by_alias=True, exclude=skip)
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


# --- text -----------------------------------------------------------------------------


def render_text(report: PreviewReport) -> str:
    """The report for a terminal: a plan line, then one block per changed group.

    Args:
        report: The preview report.

    Returns:
        Plain text ending with a newline.
    """
    lines = [f"Preview of {report.project}/{report.stack}"]
    lines.extend(_text_diagnostics("Errors", report.errors))
    lines.extend(_text_diagnostics("Warnings", report.warnings))
    if report.held_deletions is not None:
        lines.append(f"Held deletions: {_held_text(report)}")
    summary = report.summary
    if not summary.has_changes:
        lines.append(f"No changes ({_plural(summary.resources.same, 'resource')} unchanged).")
        return "\n".join(lines) + "\n"
    lines.append(f"Plan: {_plan(summary.resources, ', ')}")
    if summary.restarting_workers:
        lines.append(f"Workers that will restart: {', '.join(summary.restarting_workers)}")
    changed = report.changed_groups
    for group in changed:
        lines.append("")
        restarts = " (pods restart)" if group.restarts else ""
        lines.append(
            f"{_SYMBOL[group.operation]} {group.operation.value} {_group_label(group)}{restarts}"
        )
        lines.extend(f"    - {reason.message}" for reason in group.reasons)
        for res in group.resources:
            lines.append(f"    {_SYMBOL[res.operation]} {_kind(res.type, res.name)} {res.name}")
            lines.extend(f"        {_text_field(fc)}" for fc in res.fields)
    unchanged = len(report.groups) - len(changed)
    if unchanged:
        lines.append("")
        lines.append(f"({_plural(unchanged, 'group')} unchanged)")
    return "\n".join(lines) + "\n"


def _text_diagnostics(title: str, diagnostics: list[Diagnostic]) -> list[str]:
    if not diagnostics:
        return []
    lines = [f"{title}:"]
    for diag in diagnostics:
        where = f" ({diag.urn})" if diag.urn else ""
        first, *rest = diag.message.splitlines() or [""]
        lines.append(f"  {diag.severity}: {first}{where}")
        lines.extend(f"    {line}" for line in rest)
    return lines


def _text_field(fc: FieldChange) -> str:
    forced = " (forces replacement)" if fc.replace else ""
    if fc.kind == "add":
        return f"+ {fc.path}: {_value(fc.new, _TEXT_VALUE_WIDTH)}{forced}"
    if fc.kind == "delete":
        return f"- {fc.path}: {_value(fc.old, _TEXT_VALUE_WIDTH)}{forced}"
    old, new = _value(fc.old, _TEXT_VALUE_WIDTH), _value(fc.new, _TEXT_VALUE_WIDTH)
    return f"~ {fc.path}: {old} → {new}{forced}"


# --- markdown -------------------------------------------------------------------------


def render_markdown(report: PreviewReport, *, limit: int = MARKDOWN_LIMIT) -> str:
    """The report as a pull-request comment: heading, summary table, a details block per group.

    Args:
        report: The preview report.
        limit: Longest result in characters; groups that do not fit are left out and a
            notice starting with :data:`TRUNCATION_NOTICE` says how many.

    Returns:
        GitHub-flavoured Markdown of at most ``limit`` characters.
    """
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
    reserve = len(notice(0, 0))
    budget = limit - reserve - len(head) - len(table_head) - 1
    out, rows_shown = [head, table_head], 0
    for row in rows:
        if len(row) > budget:
            break
        out.append(row)
        budget -= len(row)
        rows_shown += 1
    out.append("\n")
    blocks_shown = 0
    if rows_shown == len(rows):
        for block in blocks:
            if len(block) > budget:
                break
            out.append(block)
            budget -= len(block)
            blocks_shown += 1
    out.append(notice(rows_shown, blocks_shown))
    return _fit("".join(out), limit)


def _fit(text: str, limit: int) -> str:
    # Last resort (a head alone over the limit): cut, and still say so.
    if len(text) <= limit:
        return text
    tail = f"\n\n> {TRUNCATION_NOTICE}: output cut at {limit:,} characters.\n"
    return text[: max(0, limit - len(tail))] + tail


def _held_text(report: PreviewReport) -> str:
    held = report.held_deletions
    assert held is not None
    return (
        f"{len(held.workers)} of the {held.running} running workers would be deleted at once, "
        f"more than the {held.allowed} allowed: {', '.join(held.workers)}. The daemon holds "
        f"them until confirmed (`twc approve --stack {report.stack}`); `twc up` asks first."
    )


def _md_head(report: PreviewReport) -> str:
    parts = [f"### twc preview: `{report.project}` / `{report.stack}`\n\n"]
    if report.held_deletions is not None:
        parts.append(f"> [!WARNING]\n> **Held deletions:** {_held_text(report)}\n\n")
    if report.errors:
        parts.append(
            f"> [!CAUTION]\n> **The preview failed** with "
            f"{_plural(len(report.errors), 'error')}.\n\n"
        )
        parts.append(_md_diagnostics(report.errors))
    summary = report.summary
    if not summary.has_changes:
        parts.append(
            f"**No changes.** {_plural(summary.resources.same, 'resource')} unchanged.\n\n"
        )
    else:
        parts.append(f"**Plan:** {_plan(summary.resources, ' · ')}\n\n")
        restarting = summary.restarting_workers
        if restarting:
            shown = ", ".join(_md_code(w) for w in restarting[:_MD_MAX_RESTARTING])
            more = (
                f" and {len(restarting) - _MD_MAX_RESTARTING} more"
                if len(restarting) > _MD_MAX_RESTARTING
                else ""
            )
            parts.append(f"**Workers that will restart:** {shown}{more}\n\n")
    if report.warnings:
        count = _plural(len(report.warnings), "warning")
        parts.append(f"<details>\n<summary>{count}</summary>\n\n")
        parts.append(_md_diagnostics(report.warnings))
        parts.append("</details>\n\n")
    return "".join(parts)


def _md_diagnostics(diagnostics: list[Diagnostic]) -> str:
    parts = []
    for diag in diagnostics[:_MD_MAX_DIAGNOSTICS]:
        message = _truncate(diag.message, _MD_MESSAGE_WIDTH)
        if diag.urn:
            message = f"{diag.urn}\n{message}"
        parts.append(_md_fence(message))
    if len(diagnostics) > _MD_MAX_DIAGNOSTICS:
        parts.append(f"… and {len(diagnostics) - _MD_MAX_DIAGNOSTICS} more.\n\n")
    return "".join(parts)


def _md_fence(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}\n{fence}\n\n"


def _md_row(group: Group) -> str:
    # The table is the overview: the main reason only; the details block has them all.
    why = _md_inline(group.reasons[0].message, table=True) if group.reasons else ""
    extra = len(group.reasons) - 1
    if extra > 0:
        why += f" (+{extra} more)"
    if group.restarts:
        why += " · pods restart"
    cells = [
        f"**{group.operation.value}**",
        _kind(group.type, group.name),
        _md_code(group.name),
        why,
    ]
    return "| " + " | ".join(cells) + " |\n"


def _md_block(group: Group) -> str:
    summary = (
        f"<b>{group.operation.value}</b> {html.escape(_kind(group.type, group.name))} "
        f"<code>{html.escape(group.name)}</code>"
    )
    if group.reasons:
        summary += f": {_html_inline(group.reasons[0].message)}"
    parts = [f"<details>\n<summary>{summary}</summary>\n\n"]
    parts.extend(f"- {_md_inline(r.message)}\n" for r in group.reasons)
    if group.restarts:
        parts.append("- pods restart\n")
    if group.resources:
        parts.append(
            "\n| Resource | Change | Field | Old | New |\n| --- | --- | --- | --- | --- |\n"
        )
        for res in group.resources:
            parts.extend(_md_resource_rows(res))
    parts.append("\n</details>\n\n")
    return "".join(parts)


def _md_resource_rows(res: ResourceChange) -> Iterable[str]:
    who = f"{_md_code(res.name)} ({_kind(res.type, res.name)})"
    if not res.fields:
        yield f"| {who} | {res.operation.value} | | | |\n"
        return
    for fc in res.fields:
        forced = " (forces replacement)" if fc.replace else ""
        old = "" if fc.kind == "add" else _md_code(_value(fc.old, _MD_VALUE_WIDTH))
        new = "" if fc.kind == "delete" else _md_code(_value(fc.new, _MD_VALUE_WIDTH))
        yield f"| {who} | {res.operation.value}{forced} | {_md_code(fc.path)} | {old} | {new} |\n"


def _md_code(text: str) -> str:
    """An inline code span that survives any content, also inside a table cell."""
    text = text.replace("\n", " ").replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _md_inline(text: str, *, table: bool = False) -> str:
    """A reason: its `code spans` kept, everything else escaped."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_md_escape(text[last : match.start()], table))
        out.append(_md_code(match.group(2)) if table else match.group(0))
        last = match.end()
    out.append(_md_escape(text[last:], table))
    return "".join(out)


def _md_escape(text: str, table: bool) -> str:
    text = html.escape(text, quote=False).replace("\n", " ")
    text = re.sub(r"([\\*_\[\]#~])", r"\\\1", text)
    return text.replace("|", "\\|") if table else text


def _html_inline(text: str) -> str:
    """A reason inside HTML (``<summary>``), where Markdown is not rendered."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(html.escape(text[last : match.start()]))
        out.append(f"<code>{html.escape(match.group(2))}</code>")
        last = match.end()
    out.append(html.escape(text[last:]))
    return "".join(out)


# --- shared ---------------------------------------------------------------------------


def _plan(counts: OpCounts, sep: str) -> str:
    return sep.join(
        [
            f"{counts.create} to create",
            f"{counts.update} to update",
            f"{counts.replace} to replace",
            f"{counts.delete} to delete",
            f"{counts.same} unchanged",
        ]
    )


def _group_label(group: Group) -> str:
    return f"{_kind(group.type, group.name)} {group.name}"


def _kind(rtype: str, name: str) -> str:
    return kind_label(rtype, name)


def _value(value: JsonValue, width: int) -> str:
    if value == UNKNOWN:
        return "(known after apply)"
    if value == "[secret]":
        return "[secret]"
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _truncate(text, width)


def _truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
