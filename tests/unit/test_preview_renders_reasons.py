"""The preview groups changes per worker and connection and says why, in words."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pulumi.automation.events import EngineEvent

from tests.unit._preview import PROJECT, STACK, raw_events, report
from twc.preview import (
    EXIT_CHANGES,
    EXIT_ERROR,
    EXIT_OK,
    Group,
    GroupKind,
    Operation,
    PreviewReport,
    ReasonCode,
    build_report,
    exit_code,
    render_json,
    render_markdown,
    render_text,
)
from twc.preview._values import format_path, parse_path, parse_urn


def _group(r: PreviewReport, name: str) -> Group:
    return next(g for g in r.groups if g.name == name)


def _messages(group: Group) -> list[str]:
    return [reason.message for reason in group.reasons]


def test_a_connection_host_change_rolls_every_worker_using_it() -> None:
    r = report("connection_hostport")
    prod = _group(r, "prod")
    assert prod.kind is GroupKind.CONNECTION
    assert prod.operation is Operation.UPDATE
    assert _messages(prod)[0] == (
        "connection fingerprint changed: every worker using `prod` will roll "
        "(`temporal/worker-billing`, `temporal/worker-orders`)"
    )
    assert any(m.startswith("hostPort temporal-frontend.temporal.svc") for m in _messages(prod))
    for name in ("temporal/worker-billing", "temporal/worker-orders"):
        worker = _group(r, name)
        assert worker.restarts
        assert worker.connection == "prod"
        assert worker.reasons[0].code is ReasonCode.CONNECTION_FINGERPRINT_CHANGED
    # A worker on another connection is untouched and does not roll.
    reports = _group(r, "temporal/worker-reports")
    assert reports.operation is Operation.SAME
    assert reports.connection == "staging"
    assert r.summary.restarting_workers == ["temporal/worker-billing", "temporal/worker-orders"]
    assert _group(r, "staging").operation is Operation.SAME


def test_an_image_change_names_the_tags_and_restarts_the_worker() -> None:
    r = report("image_change")
    orders = _group(r, "temporal/worker-orders")
    assert _messages(orders) == ["image tag 1.4.2 → 1.5.0"]
    assert orders.restarts
    assert r.summary.restarting_workers == ["temporal/worker-orders"]


def test_replicas_say_whether_autoscaling_manages_them_and_do_not_restart() -> None:
    r = report("replicas_autoscaling")
    # An autoscaled worker's count is the daemon's: shown, never a change of this update.
    assert _messages(_group(r, "temporal/worker-orders")) == ["replicas managed by autoscaling: 5"]
    billing = _group(r, "temporal/worker-billing")
    assert _messages(billing) == [
        "replicas 1 → 3",
        "PodDisruptionBudget `temporal/worker-billing-pdb` added",
    ]
    assert r.summary.restarting_workers == []


def _edited(scenario: str, edit: Any) -> PreviewReport:
    """The scenario's report with ``edit(metadata)`` applied to each resource event's."""
    items = copy.deepcopy(raw_events(scenario))
    for item in items:
        for key in ("resourcePreEvent", "resOutputsEvent"):
            if meta := (item.get(key) or {}).get("metadata"):
                edit(meta)
    assert items != raw_events(scenario), "the edit changed nothing"
    return build_report([EngineEvent.from_json(i) for i in items], PROJECT, STACK)


def _sides(meta: dict[str, Any], side: str) -> list[dict[str, Any]]:
    return [meta[side][part] for part in ("inputs", "outputs") if part in (meta.get(side) or {})]


def test_an_autoscaling_change_names_the_bounds_and_when_it_scales_to_zero() -> None:
    def scale_to_zero(meta: dict[str, Any]) -> None:
        if not meta["urn"].endswith("worker-orders-deployment"):
            return
        for side, floor in (("old", 1), ("new", 0)):
            policy = {"minReplicas": floor, "maxReplicas": 10, "targetBacklogPerReplica": 5}
            for state in _sides(meta, side):
                annotations = state["metadata"]["annotations"]
                annotations["twc.temporal.io/autoscaling"] = json.dumps(policy)

    r = _edited("replicas_autoscaling", scale_to_zero)
    assert _messages(_group(r, "temporal/worker-orders")) == [
        "replicas managed by autoscaling: 5; autoscaling 1 to 10 replicas, 5 tasks of backlog "
        "each → 0 to 10 replicas, 5 tasks of backlog each, to zero after 5 m without work, "
        "woken by the first task"
    ]
    assert r.summary.restarting_workers == []


def test_twcs_own_credential_is_named_and_rolls_no_worker() -> None:
    def own_credential(meta: dict[str, Any]) -> None:
        if meta["urn"].endswith("ConnectionFingerprint::prod-fingerprint"):
            meta["op"] = "update"
            for state in _sides(meta, "new"):
                state["twcCredential"] = "twc-mtls"

    r = _edited("no_changes", own_credential)
    prod = _group(r, "prod")
    assert _messages(prod) == [
        "twc's own credential (none) → twc-mtls (the workers' stays: no pod rolls)"
    ]
    assert prod.reasons[0].code is ReasonCode.TWC_CREDENTIAL_CHANGED
    assert r.summary.restarting_workers == []

    def born(meta: dict[str, Any]) -> None:
        if "ClusterConnection" in meta["type"] or "ClusterConnection$" in meta["urn"]:
            meta["op"], meta["old"] = "create", None
            own_credential(meta)
            meta["op"] = "create"

    assert _messages(_group(_edited("no_changes", born), "prod")) == [
        "new connection: hostPort `temporal-frontend.temporal.svc.cluster.local:7233`, "
        "twc calls with its own credential `twc-mtls`"
    ]


def test_a_new_queue_and_its_derived_worker_are_two_groups() -> None:
    r = report("create_queue_worker")
    queue = _group(r, "sqs/orders-fifo")
    worker = _group(r, "temporal/worker-orders-fifo")
    assert queue.kind is GroupKind.QUEUE
    assert queue.operation is Operation.CREATE
    assert _messages(queue) == ["new queue: FIFO, 6 partitions"]
    assert worker.kind is GroupKind.WORKER
    assert worker.operation is Operation.CREATE
    assert _messages(worker) == [
        "new worker: image `registry.example/worker:1.4.2`, replicas managed by "
        "autoscaling: 1, task queue `orders-fifo`, connection `prod`"
    ]
    # The worker is parented to the queue, yet its children stay in the worker group.
    assert {res.name for res in worker.resources} == {
        "temporal/worker-orders-fifo",
        "temporal/worker-orders-fifo-sa",
        "temporal/worker-orders-fifo-deployment",
        "temporal/worker-orders-fifo-pdb",
        "temporal/worker-orders-fifo-check",
    }
    assert not worker.restarts  # new pods start; nothing restarts
    assert (r.summary.resources.create, r.summary.groups.create) == (7, 2)


def test_a_deleted_worker_is_one_group_removing_all_its_resources() -> None:
    r = report("worker_deleted")
    legacy = _group(r, "temporal/worker-legacy")
    assert legacy.operation is Operation.DELETE
    assert _messages(legacy) == ["worker removed"]
    assert {res.operation for res in legacy.resources} == {Operation.DELETE}
    assert len(legacy.resources) == 5 == r.summary.resources.delete


def test_replacement_steps_collapse_into_one_replace() -> None:
    r = report("replace_and_error")
    orders = _group(r, "temporal/worker-orders")
    assert orders.operation is Operation.REPLACE
    assert orders.restarts
    deployment = next(res for res in orders.resources if res.name.endswith("-deployment"))
    assert deployment.operation is Operation.REPLACE
    assert [fc.path for fc in deployment.fields if fc.replace] == [
        'spec.selector.matchLabels["app.kubernetes.io/component"]'
    ]
    assert r.summary.resources.replace == 1


@pytest.mark.parametrize(
    ("scenario", "detailed", "expected"),
    [
        ("no_changes", True, EXIT_OK),
        ("no_changes", False, EXIT_OK),
        ("image_change", True, EXIT_CHANGES),
        ("image_change", False, EXIT_OK),
        ("worker_deleted", True, EXIT_CHANGES),
        ("replace_and_error", True, EXIT_ERROR),
        ("replace_and_error", False, EXIT_ERROR),
    ],
)
def test_exit_codes(scenario: str, detailed: bool, expected: int) -> None:
    assert exit_code(report(scenario), detailed) == expected


def test_errors_and_warnings_come_from_diagnostics_without_color_codes() -> None:
    r = report("replace_and_error")
    assert r.errors[0].message.startswith("preview failed: resource")
    assert r.errors[0].urn
    assert r.errors[0].urn.endswith("temporal/worker-billing-deployment")
    warnings = report("secrets").warnings
    assert [w.message for w in warnings] == [
        "secret temporal-system/temporal-api-key was rotated 2 minutes ago"
    ]
    assert report("connection_hostport").errors == []  # info and debug are not findings


def test_a_failed_preview_without_events_is_an_error() -> None:
    r = build_report([], PROJECT, STACK, failure="error: could not load plugin\n")
    assert [e.message for e in r.errors] == ["error: could not load plugin"]
    assert exit_code(r, detailed=True) == EXIT_ERROR


def test_no_changes_means_every_group_is_same() -> None:
    r = report("no_changes")
    assert not r.summary.has_changes
    assert {g.operation for g in r.groups} == {Operation.SAME}
    assert r.summary.resources.same == 11  # stack and default providers not counted


def test_the_connection_annotation_wins_over_fingerprint_matching() -> None:
    items = raw_events("image_change")
    for item in items:
        metadata = item.get("resourcePreEvent", {}).get("metadata", {})
        if metadata.get("urn", "").endswith("temporal/worker-orders-deployment"):
            for side in ("old", "new"):
                annotations = metadata[side]["inputs"]["metadata"]["annotations"]
                annotations["twc.temporal.io/connection"] = "staging-elsewhere"
    r = build_report([EngineEvent.from_json(i) for i in items], PROJECT, STACK)
    assert _group(r, "temporal/worker-orders").connection == "staging-elsewhere"
    assert _group(r, "temporal/worker-billing").connection == "prod"


# --- property paths and URNs -----------------------------------------------------------

_keys = st.one_of(
    st.integers(min_value=0, max_value=500),
    st.text(alphabet="abcXYZ019_-./\"' $", min_size=1, max_size=12),
)


@given(st.lists(_keys, min_size=1, max_size=6).filter(lambda p: isinstance(p[0], str)))
def test_property_paths_round_trip(path: list[str | int]) -> None:
    assert parse_path(format_path(tuple(path))) == tuple(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "spec.template.spec.containers[0].image",
            ("spec", "template", "spec", "containers", 0, "image"),
        ),
        (
            'spec.template.metadata.annotations["temporal.io/connection-spec-hash"]',
            ("spec", "template", "metadata", "annotations", "temporal.io/connection-spec-hash"),
        ),
        ('data["api-key"]', ("data", "api-key")),
        ("metadata.labels.app-name", ("metadata", "labels", "app-name")),  # provider style
        ('["odd \\"key\\""].x', ('odd "key"', "x")),
        ("broken[", ("broken[",)),
    ],
)
def test_engine_paths_parse(text: str, expected: tuple[str | int, ...]) -> None:
    assert parse_path(text) == expected


def test_urns_split_into_parent_types_and_name() -> None:
    urn = parse_urn(
        "urn:pulumi:prod::twc::twc:kmsvc:Queue$twc:temporal:TemporalWorker"
        "$kubernetes:apps/v1:Deployment::temporal/w::odd-deployment"
    )
    assert urn is not None
    assert urn.type_chain == (
        "twc:kmsvc:Queue",
        "twc:temporal:TemporalWorker",
        "kubernetes:apps/v1:Deployment",
    )
    assert (urn.stack, urn.project, urn.type, urn.name) == (
        "prod",
        "twc",
        "kubernetes:apps/v1:Deployment",
        "temporal/w::odd-deployment",
    )
    assert parse_urn("not-a-urn") is None


# --- odd input -----------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
_objects = st.none() | st.dictionaries(st.text(max_size=6), _json, max_size=4)
_ops = st.sampled_from(
    ["same", "create", "update", "delete", "replace", "create-replacement", "read"]
)
_urns = st.sampled_from(
    [
        "urn:pulumi:s::p::twc:temporal:TemporalWorker::w",
        "urn:pulumi:s::p::twc:temporal:TemporalWorker$kubernetes:apps/v1:Deployment::w-deployment",
        "urn:pulumi:s::p::twc:temporal:ClusterConnection$pulumi-python:dynamic:Resource::c-fingerprint",
        "urn:pulumi:s::p::kubernetes:core/v1:Secret::loose",
        "not-a-urn",
    ]
)
_states = st.none() | st.fixed_dictionaries(
    {"parent": _urns, "inputs": _objects, "outputs": _objects}
)


@st.composite
def _step(draw: st.DrawFn) -> dict[str, Any]:
    paths = draw(st.lists(st.text(alphabet='ab.[]"0', max_size=8), max_size=3))
    kinds = st.sampled_from(["add", "update", "delete-replace"])
    metadata = {
        "op": draw(_ops),
        "urn": draw(_urns),
        "type": draw(st.sampled_from(["kubernetes:apps/v1:Deployment", "", "x"])),
        "old": draw(_states),
        "new": draw(_states),
        "detailedDiff": {p: {"diffKind": draw(kinds)} for p in paths},
        "keys": draw(st.none() | st.lists(st.text(max_size=4), max_size=2)),
    }
    return {"resourcePreEvent": {"metadata": metadata}}


@given(st.lists(_step(), max_size=6))
def test_odd_events_never_break_the_report(items: list[dict[str, Any]]) -> None:
    r = build_report([EngineEvent.from_json(i) for i in items], PROJECT, STACK)
    assert exit_code(r, detailed=True) in (EXIT_OK, EXIT_CHANGES)
    for render in (render_text, render_markdown, render_json):
        assert render(r).endswith("\n")
