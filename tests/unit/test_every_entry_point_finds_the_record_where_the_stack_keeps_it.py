"""Every entry point finds the stack's record where the stack keeps it: the stack's
config ``twc:controlNamespace`` first, else the one record the cluster holds for the
stack; never a guess from the shell's environment. A record that cannot be looked for
or read is an error, never "nothing accepted"."""

from __future__ import annotations

import pytest

from tests.unit._fake_configmaps import ApiError, FakeConfigMaps
from twc.desired import WORKER_KIND_KEY
from twc.kube.record import RecordStore, record_for_stack

ACCEPTED = {WORKER_KIND_KEY: {"team/orders": {"spec": {"image": "worker:1"}}}}
LAPTOP: dict[str, str] = {}
"""A laptop's shell: no POD_NAMESPACE, no TWC_CONTROL_NAMESPACE."""


def _daemon_wrote(api: FakeConfigMaps, namespace: str, stack: str = "prod") -> None:
    RecordStore(api, namespace=namespace, stack=stack).save(ACCEPTED, None)


def test_the_stacks_config_names_where_the_record_is() -> None:
    api = FakeConfigMaps()
    _daemon_wrote(api, "twc-system")
    _daemon_wrote(api, "default")  # a stale copy elsewhere is not read

    store = record_for_stack(api, "prod", {"controlNamespace": "twc-system"}, LAPTOP)

    assert store.namespace == "twc-system"
    found = store.load()
    assert found is not None
    assert found.accepted == ACCEPTED


def test_a_working_copy_without_the_config_finds_the_record_the_daemon_wrote() -> None:
    api = FakeConfigMaps()
    _daemon_wrote(api, "twc-system")
    _daemon_wrote(api, "elsewhere", stack="staging")

    store = record_for_stack(api, "prod", {}, LAPTOP)

    assert str(store) == "ConfigMap twc-system/twc-stack-prod"
    found = store.load()
    assert found is not None
    assert found.accepted == ACCEPTED


def test_a_stack_no_daemon_recorded_reads_as_nothing_accepted() -> None:
    api = FakeConfigMaps()
    _daemon_wrote(api, "elsewhere", stack="staging")

    assert record_for_stack(api, "prod", {}, LAPTOP).load() is None


def test_a_record_that_cannot_be_looked_for_or_read_is_an_error() -> None:
    api = FakeConfigMaps()
    _daemon_wrote(api, "twc-system")
    api.fail = 403

    with pytest.raises(LookupError, match="twc:controlNamespace"):
        record_for_stack(api, "prod", {}, LAPTOP)
    store = record_for_stack(api, "prod", {"controlNamespace": "twc-system"}, LAPTOP)
    with pytest.raises(ApiError):
        store.load()


def test_two_records_claiming_one_stack_are_an_error() -> None:
    api = FakeConfigMaps()
    _daemon_wrote(api, "twc-system")
    _daemon_wrote(api, "default")

    with pytest.raises(LookupError, match="each claim to be the record"):
        record_for_stack(api, "prod", {}, LAPTOP)
