"""The stack's record keeps the last accepted specs in a ConfigMap: compressed, written
only when they change, split into parts when large, and read back whole or not at all."""

from __future__ import annotations

import pytest

from tests.unit._fake_configmaps import ApiError, FakeConfigMaps
from tests.unit._native_objects import worker_obj
from twc.desired import WORKER_KIND_KEY, trimmed
from twc.kube.record import HeldRecord, RecordStore, control_namespace, record_name


def _accepted(count: int) -> dict[str, dict[str, dict[str, object]]]:
    objects = [trimmed(worker_obj(f"w{i:05d}", task_queue=f"tq-{i}")) for i in range(count)]
    return {WORKER_KIND_KEY: {f"team/{o['metadata']['name']}": o for o in objects}}


def test_a_saved_record_reads_back_and_an_unchanged_one_is_not_written_again() -> None:
    api = FakeConfigMaps()
    store = RecordStore(api, namespace="twc-system", stack="prod")
    accepted = _accepted(3)

    assert store.load() is None
    assert store.save(accepted, {"kind": "Fleet"}) is True
    writes = api.writes
    assert store.save(accepted, {"kind": "Fleet"}) is False
    assert api.writes == writes

    again = RecordStore(api, namespace="twc-system", stack="prod").load()
    assert again is not None
    assert again.accepted == accepted
    assert again.fleet == {"kind": "Fleet"}
    head = api.objects[("twc-system", "twc-stack-prod")]
    assert head["metadata"]["labels"]["twc.temporal.io/stack"] == "prod"
    assert "record.json.gz" in head["binaryData"]


def test_a_thousand_workers_fit_one_configmap_and_a_large_record_is_split_into_parts() -> None:
    api = FakeConfigMaps()
    store = RecordStore(api, namespace="ns", stack="big")
    store.save(_accepted(1000), None)
    # About 40 bytes per object compressed: far below the API server's 1 MiB.
    assert api.size("ns", "twc-stack-big") < 200_000

    small = RecordStore(api, namespace="ns", stack="split", chunk_bytes=4096)
    small.save(_accepted(1000), None)
    parts = [name for (ns, name) in api.objects if name.startswith("twc-stack-split-")]
    assert len(parts) > 1
    split = RecordStore(api, namespace="ns", stack="split").load()
    assert split is not None
    assert split.accepted == _accepted(1000)

    # Shrunk back into one ConfigMap: the parts are deleted.
    small.save(_accepted(2), None)
    assert [n for (_, n) in api.objects if n.startswith("twc-stack-split-")] == []
    shrunk = RecordStore(api, namespace="ns", stack="split").load()
    assert shrunk is not None
    assert shrunk.accepted == _accepted(2)


def test_a_damaged_record_is_refused_rather_than_read_as_empty() -> None:
    api = FakeConfigMaps()
    store = RecordStore(api, namespace="ns", stack="split", chunk_bytes=2048)
    store.save(_accepted(300), None)
    part = next(n for (_, n) in api.objects if n.startswith("twc-stack-split-"))
    del api.objects[("ns", part)]
    with pytest.raises(LookupError, match="missing"):
        RecordStore(api, namespace="ns", stack="split").load()

    api.fail = 403
    with pytest.raises(ApiError):
        RecordStore(api, namespace="ns", stack="other").load()


def test_held_deletions_are_published_and_an_approval_is_kept_until_the_hold_ends() -> None:
    api = FakeConfigMaps()
    store = RecordStore(api, namespace="ns", stack="prod")
    store.save(_accepted(1), None)
    held = HeldRecord(digest="abc", workers=("team/a", "team/b"), reason="2 of 4")

    store.publish_held(held)
    reader = RecordStore(api, namespace="ns", stack="prod")
    published = reader.load()
    assert published is not None
    assert published.held == held
    reader.approve("abc")
    assert store.approved() == "abc"
    # The daemon writing its accepted specs again must not drop the approval.
    store.save(_accepted(2), None)
    assert store.approved() == "abc"

    store.publish_held(None)
    found = reader.load()
    assert found is not None
    assert found.held is None
    assert found.approved is None


def test_record_names_and_the_control_namespace() -> None:
    assert record_name("prod") == "twc-stack-prod"
    odd = record_name("Team_Prod")
    assert odd.startswith("twc-stack-team-prod-")
    assert odd != record_name("team-prod")
    assert control_namespace({"controlNamespace": "ops"}, {"POD_NAMESPACE": "x"}) == "ops"
    assert control_namespace({}, {"TWC_CONTROL_NAMESPACE": "t", "POD_NAMESPACE": "x"}) == "t"
    assert control_namespace({}, {"POD_NAMESPACE": "x"}) == "x"
    assert control_namespace(None, {}) == "default"


def test_what_an_up_applied_reads_back_and_a_damaged_record_reads_as_nothing() -> None:
    from twc.kube.record import AppliedRecord

    api = FakeConfigMaps()
    store = RecordStore(api, namespace="ns", stack="prod")
    assert store.load_applied() is None
    applied = AppliedRecord(
        fleet="f1", shared="s1", workers={"team/a": "h1"}, update="7@t0", build="b1"
    )

    store.save_applied(applied)
    assert store.load_applied() == applied
    store.save_applied(AppliedRecord(**{**applied.to_json(), "update": "8@t1"}))
    found = RecordStore(api, namespace="ns", stack="prod").load_applied()
    assert found is not None
    assert found.update == "8@t1"
    kept = api.objects[("ns", "twc-stack-prod-applied")]
    assert kept["metadata"]["labels"]["twc.temporal.io/stack"] == "prod"

    kept["binaryData"]["applied.json.gz"] = "bm90IGd6aXA="  # "not gzip"
    assert store.load_applied() is None
