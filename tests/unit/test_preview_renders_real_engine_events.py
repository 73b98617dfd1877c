"""The preview on events recorded from the real engine (``golden/preview/real_*``).

Real events differ from hand-made ones in ways the renderer must live with: step
pre-events carry ``new.outputs == {}``, there are no ``diffs`` lists, Kubernetes
outputs repeat the inputs under ``__inputs``, dozens of debug diagnostics arrive, and a
connection's new fingerprint is unknown until apply, so it may equal another
connection's. Recorded by ``python -m tests.e2e.record_preview_events``.
"""

from __future__ import annotations

import json
from typing import Any

from pulumi.automation.events import EngineEvent

from tests.unit._preview import PROJECT, STACK, raw_events, report
from twc.preview import Group, Operation, PreviewReport, ReasonCode, build_report, render_text


def _group(r: PreviewReport, name: str) -> Group:
    return next(g for g in r.groups if g.name == name)


def _build(items: list[dict[str, Any]]) -> PreviewReport:
    return build_report([EngineEvent.from_json(e) for e in items], PROJECT, STACK)


def _fingerprint_of(items: list[dict[str, Any]], suffix: str) -> str:
    for item in items:
        step = item.get("resourcePreEvent")
        if step and step["metadata"]["urn"].endswith(suffix):
            value = step["metadata"]["old"]["outputs"]["fingerprint"]
            assert isinstance(value, str)
            return value
    raise AssertionError(f"no fingerprint for {suffix}")


def _set_fingerprint(items: list[dict[str, Any]], suffix: str, value: str) -> None:
    for item in items:
        for kind in ("resourcePreEvent", "resOutputsEvent"):
            step = item.get(kind)
            if step and step["metadata"]["urn"].endswith(suffix):
                for side in ("old", "new"):
                    outputs = (step["metadata"].get(side) or {}).get("outputs")
                    if outputs:
                        outputs["fingerprint"] = value


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


def test_a_fingerprint_two_usable_connections_share_names_neither() -> None:
    items = json.loads(json.dumps(raw_events("real_new_queue")))
    shared = _fingerprint_of(items, "::local-fingerprint")
    _set_fingerprint(items, "::apps/other-fingerprint", shared)
    r = _build(items)
    worker = _group(r, "apps/worker-shipments")
    assert worker.connection is None
    assert worker.reasons[0].message == (
        "new worker: image `registry.example/worker:1.4.2`, 1 replica, task queue `shipments`"
    )


def test_a_shared_fingerprint_is_told_apart_by_the_namespace_a_connection_serves() -> None:
    # The same, with the namespaced Connection moved to another namespace: only the
    # ClusterConnection can serve a worker in `apps`.
    text = json.dumps(raw_events("real_new_queue")).replace("apps/other", "billing/other")
    items = json.loads(text)
    shared = _fingerprint_of(items, "::local-fingerprint")
    _set_fingerprint(items, "::billing/other-fingerprint", shared)
    r = _build(items)
    assert _group(r, "apps/worker-shipments").connection == "local"
    assert _group(r, "billing/other").kind.value == "connection"


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
