"""The previews of a sharded stack's shards read as one report: workers gathered, a
connection built by several shards merged into one block, totals over every shard,
one exit code."""

from __future__ import annotations

from tests.unit._preview import report
from twc.preview import (
    EXIT_CHANGES,
    EXIT_OK,
    HeldDeletions,
    exit_code,
    merge_reports,
    render_text,
)


def test_shards_reports_merge_into_one_with_totals_over_every_shard() -> None:
    first, second = report("connection_hostport"), report("image_change")

    merged = merge_reports("prod", [first, second])

    assert merged.stack == "prod (2 shards)"
    for op in ("create", "update", "replace", "delete", "same"):
        expected = getattr(first.summary.resources, op) + getattr(second.summary.resources, op)
        assert getattr(merged.summary.resources, op) == expected
    names = {(g.kind, g.name) for g in merged.groups}
    assert names == {(g.kind, g.name) for r in (first, second) for g in r.groups}
    assert merged.summary.restarting_workers == sorted(
        set(first.summary.restarting_workers) | set(second.summary.restarting_workers)
    )
    assert exit_code(merged, True) == EXIT_CHANGES
    assert "Preview of twc/prod (2 shards)" in render_text(merged)


def test_a_connection_every_shard_builds_is_one_group_with_all_its_resources() -> None:
    shard = report("connection_hostport")
    connections = [g for g in shard.groups if g.kind.value == "connection"]
    assert connections

    merged = merge_reports("prod", [shard, shard])

    merged_connections = [g for g in merged.groups if g.kind.value == "connection"]
    assert len(merged_connections) == len(connections)
    for one, both in zip(connections, merged_connections, strict=True):
        assert both.reasons == one.reasons  # said once
        assert len(both.resources) == 2 * len(one.resources)


def test_nothing_to_change_in_any_shard_is_exit_zero() -> None:
    quiet = report("no_changes")

    merged = merge_reports("prod", [quiet, quiet, quiet])

    assert not merged.summary.has_changes
    assert exit_code(merged, True) == EXIT_OK
    assert merged.stack == "prod (3 shards)"


def test_an_error_in_one_shard_names_the_shard() -> None:
    failed = report("replace_and_error")
    assert failed.errors

    merged = merge_reports("prod", [report("no_changes"), failed])

    assert merged.errors
    assert all(e.message.startswith(f"[{failed.stack}] ") for e in merged.errors)
    assert exit_code(merged, False) == 1


def test_every_shards_held_deletions_are_in_the_report() -> None:
    one = report("no_changes").model_copy(
        update={"held_deletions": HeldDeletions(workers=["a/x", "a/y"], running=4, allowed=1)}
    )
    two = report("no_changes").model_copy(
        update={"held_deletions": HeldDeletions(workers=["b/z"], running=2, allowed=1)}
    )

    merged = merge_reports("prod", [one, report("no_changes"), two])

    assert merged.held_deletions == HeldDeletions(
        workers=["a/x", "a/y", "b/z"], running=6, allowed=2
    )
    assert "Held deletions" in render_text(merged)
    assert merge_reports("prod", [report("no_changes")]).held_deletions is None
