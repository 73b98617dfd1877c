"""When a connection object gets or loses the delete-protection finalizer."""

from __future__ import annotations

from tests.unit._native_objects import cluster_conn_obj, conn_obj
from twc.native.objects import FINALIZER, NativeObject, finalizer_updates


def _cc(name: str, **kw: object) -> NativeObject:
    return NativeObject.of(
        cluster_conn_obj(name, **kw),  # type: ignore[arg-type]
        group="temporal.io",
        version="v1",
        plural="clusterconnections",
        kind="ClusterConnection",
    )


def _conn(name: str, ns: str, **kw: object) -> NativeObject:
    return NativeObject.of(
        conn_obj(name, ns, **kw),  # type: ignore[arg-type]
        group="temporal.io",
        version="v1",
        plural="connections",
        kind="Connection",
    )


def test_a_referenced_object_gets_the_finalizer_next_to_others() -> None:
    obj = _cc("prod", finalizers=["other.io/keep"])

    [(target, finalizers)] = finalizer_updates([obj], [obj.identity])

    assert target is obj
    assert finalizers == ["other.io/keep", FINALIZER]


def test_an_unreferenced_object_loses_only_our_finalizer() -> None:
    obj = _cc("prod", finalizers=["other.io/keep", FINALIZER], deleting=True)

    assert finalizer_updates([obj], []) == [(obj, ["other.io/keep"])]


def test_a_referenced_object_being_deleted_keeps_its_finalizer_and_gets_none_new() -> None:
    held = _cc("held", finalizers=[FINALIZER], deleting=True)
    late = _cc("late", deleting=True)

    assert finalizer_updates([held, late], [held.identity, late.identity]) == []


def test_identity_tells_a_namespaced_foo_from_a_cluster_scoped_foo() -> None:
    cluster_foo = _cc("foo", finalizers=[FINALIZER])
    team_foo = _conn("foo", "team")
    other_foo = _conn("foo", "other", finalizers=[FINALIZER])

    updates = {
        o.key: f
        for o, f in finalizer_updates([cluster_foo, team_foo, other_foo], [team_foo.identity])
    }

    # Moving from the ClusterConnection foo to the Connection team/foo: the first is
    # released, the second protected; the Connection foo in namespace other is released.
    assert updates == {"foo": [], "team/foo": [FINALIZER], "other/foo": []}


def test_nothing_changes_when_the_finalizers_already_match() -> None:
    used = _cc("used", finalizers=[FINALIZER])
    unused = _cc("unused")

    assert finalizer_updates([used, unused], [used.identity]) == []
