"""One report for a sharded stack: the previews of its shards, merged.

Workers and queues belong to exactly one shard, so their groups are simply gathered. A
connection is built by every shard whose workers use it: its groups (one per shard) are
merged into one, with every shard's resources and the reasons said once, so a changed
connection reads as one block that names all the workers it rolls.
"""

from __future__ import annotations

from collections.abc import Sequence

from twc.preview._build import _GROUP_ORDER, _count
from twc.preview._model import Diagnostic, Group, Operation, PreviewReport, Summary

__all__ = ["merge_reports"]

_WEIGHT = {
    Operation.SAME: 0,
    Operation.UPDATE: 1,
    Operation.CREATE: 2,
    Operation.DELETE: 2,
    Operation.REPLACE: 3,
}


def _merge_group(into: Group, other: Group) -> Group:
    reasons = list(into.reasons)
    for reason in other.reasons:
        if reason not in reasons:
            reasons.append(reason)
    operation = into.operation
    if into.operation != other.operation:
        # A connection created in one shard and updated in another is, as a whole,
        # being changed: the heavier operation tells the reader what to look at.
        operation = max(into.operation, other.operation, key=lambda op: _WEIGHT.get(op, 1))
    return into.model_copy(
        update={
            "operation": operation,
            "restarts": into.restarts or other.restarts,
            "reasons": reasons,
            "resources": [*into.resources, *other.resources],
        }
    )


def _tagged(diagnostics: Sequence[Diagnostic], stack: str) -> list[Diagnostic]:
    return [d.model_copy(update={"message": f"[{stack}] {d.message}"}) for d in diagnostics]


def merge_reports(stack: str, reports: Sequence[PreviewReport]) -> PreviewReport:
    """The shards' reports as one report of ``stack``.

    Args:
        stack: The sharded stack's name (the heading says how many shards it has).
        reports: One report per shard previewed.

    Returns:
        The merged report: groups merged by kind and name, resources counted over every
        shard, errors and warnings prefixed with the shard they came from.
    """
    if not reports:
        raise ValueError("no shard previewed")
    groups: dict[tuple[str, str, str], Group] = {}
    for report in reports:
        for group in report.groups:
            key = (group.kind.value, group.name, group.type)
            found = groups.get(key)
            groups[key] = group if found is None else _merge_group(found, group)
    merged = sorted(groups.values(), key=lambda g: (_GROUP_ORDER.index(g.kind), g.name, g.type))
    resources = {
        op: sum(getattr(r.summary.resources, op) for r in reports)
        for op in ("create", "update", "replace", "delete", "same")
    }
    summary = Summary(
        resources=reports[0].summary.resources.model_copy(update=resources),
        groups=_count(g.operation for g in merged),
        restarting_workers=sorted({w for r in reports for w in r.summary.restarting_workers}),
        has_changes=any(r.summary.has_changes for r in reports),
    )
    label = f"{stack} ({len(reports)} shard{'s' if len(reports) != 1 else ''})"
    return PreviewReport(
        project=reports[0].project,
        stack=label,
        summary=summary,
        groups=merged,
        errors=[e for r in reports for e in _tagged(r.errors, r.stack)],
        warnings=[w for r in reports for w in _tagged(r.warnings, r.stack)],
    )
