"""The preview on events recorded from the real engine (``golden/preview/real_*``).

Real events differ from hand-made ones in ways the renderer must live with: step
pre-events carry ``new.outputs == {}``, there are no ``diffs`` lists, Kubernetes
outputs repeat the inputs under ``__inputs``, dozens of debug diagnostics arrive, and a
connection's new fingerprint is unknown until apply, so it may equal another
connection's (the Deployment names its connection). Recorded by
``python -m tests.e2e.record_preview_events``.
"""

from __future__ import annotations

from tests.unit._preview import raw_events, report
from twc.preview import Group, Operation, PreviewReport, ReasonCode, render_text


def _group(r: PreviewReport, name: str) -> Group:
    return next(g for g in r.groups if g.name == name)


def test_debug_diagnostics_of_a_real_preview_are_neither_errors_nor_warnings() -> None:
    items = raw_events("real_no_changes")
    assert sum(1 for e in items if "diagnosticEvent" in e) > 10
    r = report("real_no_changes")
    assert (r.errors, r.warnings, r.summary.has_changes) == ([], [], False)
    assert r.summary.resources.same == 16


def test_a_new_fingerprint_equal_to_another_connections_rolls_under_its_own_connection() -> None:
    # `local` moves to the address `other` already has: the workers' new fingerprint is
    # `other`'s, yet they stay on `local`, whose fingerprint is the one changing.
    r = report("real_connection_hostport")
    for name in ("apps/alpha", "apps/beta"):
        worker = _group(r, name)
        assert worker.connection == "local"
        assert worker.reasons[0].message == "connection `local` fingerprint changed: pods will roll"
    local = _group(r, "local")
    assert local.reasons[0].message == (
        "connection fingerprint changed: every worker using `local` will roll "
        "(`apps/alpha`, `apps/beta`)"
    )
    gamma = _group(r, "apps/gamma")
    assert (gamma.operation, gamma.connection) == (Operation.SAME, "apps/other")


def test_rotated_credentials_show_as_changed_with_every_value_hidden() -> None:
    r = report("real_credentials_rotated")
    local = _group(r, "local")
    assert local.operation is Operation.REPLACE
    codes = [reason.code for reason in local.reasons]
    assert codes[:2] == [
        ReasonCode.CONNECTION_FINGERPRINT_CHANGED,
        ReasonCode.CREDENTIALS_CHANGED,
    ]
    copy = next(res for res in local.resources if res.type == "kubernetes:core/v1:Secret")
    assert [(f.path, f.old, f.new, f.replace) for f in copy.fields] == [
        ('data["tls.key"]', "[secret]", "[secret]", True)
    ]
    cloud = _group(r, "apps/cloud")
    assert ReasonCode.CREDENTIALS_CHANGED in [reason.code for reason in cloud.reasons]
    assert r.summary.restarting_workers == ["apps/cloud-sync", "apps/payments"]
    assert "RECORDED-" not in render_text(r)
