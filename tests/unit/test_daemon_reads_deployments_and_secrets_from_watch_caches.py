"""Worker Deployments and Secrets come from watch caches: one list, then events; what
is held is trimmed (a Secret's values never are), and reads cost no API call."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from twc.kube.caches import SECRET_FIELD_SELECTOR, DeploymentCache, SecretCache, digests_by_name
from twc.kube.workloads import AUTOSCALER_FIELD_MANAGER, WORKER_SELECTOR


@dataclass
class _Response:
    data: bytes


@dataclass
class FakeList:
    """A typed ``list_*_for_all_namespaces`` call: counts calls, returns raw JSON."""

    items: list[dict[str, Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, **kwargs: Any) -> _Response:
        self.calls.append(kwargs)
        body = {"metadata": {"resourceVersion": "7"}, "items": self.items}
        return _Response(json.dumps(body).encode())


def _deployment(name: str, replicas: int | None, *, scaled_by: str | None = None) -> dict[str, Any]:
    managed = [
        {"manager": "pulumi-kubernetes-abc", "operation": "Apply", "fieldsV1": {"f:spec": {}}}
    ]
    if scaled_by:
        managed.append(
            {
                "manager": scaled_by,
                "operation": "Apply",
                "subresource": "scale",
                "fieldsV1": {"f:spec": {"f:replicas": {}}},
            }
        )
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "w"}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "metadata": {"name": name, "namespace": "team", "managedFields": managed},
        "spec": spec,
        "status": {"readyReplicas": 1},
    }


class _Kube:
    def __init__(self, deployments: FakeList, secrets: FakeList) -> None:
        self.apps = type("Apps", (), {"list_deployment_for_all_namespaces": deployments})()
        self.core = type("Core", (), {"list_secret_for_all_namespaces": secrets})()


def _caches(
    deployments: list[dict[str, Any]], secrets: list[dict[str, Any]]
) -> tuple[DeploymentCache, SecretCache, FakeList, FakeList]:
    dep_list, secret_list = FakeList(deployments), FakeList(secrets)
    kube: Any = _Kube(dep_list, secret_list)
    return (
        DeploymentCache(kube, resync_interval=300),
        SecretCache(kube, resync_interval=300),
        dep_list,
        secret_list,
    )


def test_replicas_readiness_and_the_autoscalers_claim_are_read_from_one_list() -> None:
    deployments, _, listed, _ = _caches(
        [
            _deployment("orders", 4, scaled_by=AUTOSCALER_FIELD_MANAGER),
            _deployment("billing", None),
        ],
        [],
    )
    deployments.list_now()

    for _ in range(3):  # every iteration reads the cache, not the API
        assert deployments.read("replicas") == {"team/orders": 4, "team/billing": 1}
        assert deployments.read("deployments") == {"team/orders": (4, 1), "team/billing": (1, 1)}
        assert list(deployments.read("scaled")) == ["team/orders"]
    assert len(listed.calls) == 1
    assert listed.calls[0]["label_selector"] == WORKER_SELECTOR


def test_a_watch_event_updates_the_cache_and_keeps_only_what_the_loop_reads() -> None:
    deployments, _, _, _ = _caches([_deployment("orders", 1)], [])
    deployments.list_now()

    deployments._apply("MODIFIED", _deployment("orders", 6, scaled_by=AUTOSCALER_FIELD_MANAGER))

    assert deployments.read("replicas") == {"team/orders": 6}
    assert list(deployments.read("scaled")) == ["team/orders"]
    held = deployments.by_key()
    assert held is not None
    assert set(held["team/orders"]) == {"metadata", "replicas", "readyReplicas", "replicaOwners"}

    deployments._apply("DELETED", _deployment("orders", 6))
    assert deployments.read("replicas") == {}


def test_before_the_first_list_the_replicas_are_unknown_not_zero() -> None:
    deployments, secrets, _, _ = _caches([], [])

    with pytest.raises(LookupError):
        deployments.read("replicas")
    with pytest.raises(LookupError):
        secrets.digests("team", "mtls")


def _secret(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "temporal"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def test_secrets_are_held_as_digests_per_key_never_as_values() -> None:
    _, secrets, _, listed = _caches([], [_secret("mtls", {"tls.crt": "CERT", "tls.key": "KEY"})])
    secrets.list_now()

    digests = secrets.digests("temporal", "mtls")
    assert set(digests) == {"tls.crt", "tls.key"}
    held = json.dumps(dict(secrets.by_key() or {}))
    for value in ("CERT", "KEY", base64.b64encode(b"CERT").decode()):
        assert value not in held
    assert listed.calls[0]["field_selector"] == SECRET_FIELD_SELECTOR
    with pytest.raises(LookupError):
        secrets.digests("temporal", "other")


def test_a_rotated_key_changes_its_digest_and_wakes_the_loop() -> None:
    _, secrets, _, _ = _caches([], [_secret("mtls", {"tls.crt": "CERT", "tls.key": "KEY"})])
    secrets.list_now()
    before = secrets.digests("temporal", "mtls")
    secrets._wakeup.clear()

    secrets._apply("MODIFIED", _secret("mtls", {"tls.crt": "NEW", "tls.key": "KEY"}))

    after = secrets.digests("temporal", "mtls")
    assert after["tls.crt"] != before["tls.crt"]
    assert after["tls.key"] == before["tls.key"]
    assert secrets._wakeup.is_set()


def test_a_deployments_status_changes_do_not_wake_the_loop() -> None:
    deployments, _, _, _ = _caches([_deployment("orders", 2)], [])
    deployments.list_now()
    deployments._wakeup.clear()

    changed = _deployment("orders", 2)
    changed["status"]["readyReplicas"] = 2
    deployments._apply("MODIFIED", changed)

    assert not deployments._wakeup.is_set()
    assert deployments.read("deployments") == {"team/orders": (2, 2)}


def test_before_the_secrets_are_listed_a_direct_read_gives_the_same_digests() -> None:
    # Where the daemon may not list Secrets cluster-wide, the cache never lists and the
    # loop reads the one Secret directly; a later list must not change a digest (it would
    # look like a rotation and roll every worker that uses it).
    _, secrets, _, _ = _caches([], [_secret("mtls", {"tls.crt": "CERT", "tls.key": "KEY"})])
    reads: list[tuple[str, str]] = []

    def direct(namespace: str, name: str) -> dict[str, bytes]:
        reads.append((namespace, name))
        return {"tls.crt": b"CERT", "tls.key": b"KEY"}

    read = secrets.reader(direct)
    before = read("temporal", "mtls")
    assert reads == [("temporal", "mtls")]

    secrets.list_now()
    after = read("temporal", "mtls")

    assert reads == [("temporal", "mtls")]  # listed: no direct read any more
    assert after == before


def test_without_a_secret_cache_a_read_by_name_digests_as_the_cache_and_sees_a_rotation() -> None:
    # Under namespaced RBAC the daemon keeps no Secret cache: every read is by name, its
    # digests equal the cache's (switching scope rolls nothing), and a rotated key shows.
    _, secrets, _, _ = _caches([], [_secret("mtls", {"tls.crt": "CERT", "tls.key": "KEY"})])
    secrets.list_now()
    data = {"tls.crt": b"CERT", "tls.key": b"KEY"}
    read = digests_by_name(lambda _namespace, _name: data)

    assert read("temporal", "mtls") == secrets.digests("temporal", "mtls")
    before = read("temporal", "mtls")
    data["tls.crt"] = b"NEW"
    after = read("temporal", "mtls")
    assert after["tls.crt"] != before["tls.crt"]
    assert after["tls.key"] == before["tls.key"]


def test_a_stacks_cache_leaves_another_stacks_workers_out() -> None:
    # Two stacks share a cluster (and may share a namespace): the guard of one must never
    # count the other's Deployments as workers it runs. A sharded stack's cache is its
    # base stack's: every shard's objects carry the base stack's label.
    def labelled(name: str, stack: str | None) -> dict[str, Any]:
        dep = _deployment(name, 1)
        if stack is not None:
            dep["metadata"]["labels"] = {"twc.temporal.io/stack": stack}
        return dep

    listed = FakeList(
        [labelled("mine", "bench-60"), labelled("theirs", "bench-20"), labelled("old", None)]
    )
    kube: Any = _Kube(listed, FakeList([]))
    cache = DeploymentCache(kube, resync_interval=300, stack="bench-60")
    cache.list_now()

    assert cache.read("replicas") == {"team/mine": 1, "team/old": 1}
    assert set(cache.read("deployments")) == {"team/mine", "team/old"}


def _in(namespace: str, dep: dict[str, Any]) -> dict[str, Any]:
    dep["metadata"]["namespace"] = namespace
    return dep


def test_the_readings_by_namespace_are_the_whole_readings_cut_by_namespace() -> None:
    versioned = _deployment("w-v2", 2)
    versioned["metadata"]["labels"] = {
        "twc.temporal.io/worker": "w",
        "temporal.io/build-id": "v2",
    }
    older = _deployment("w-v1", 1)
    older["metadata"]["labels"] = {"twc.temporal.io/worker": "w", "temporal.io/build-id": "v1"}
    deployments, _, _, _ = _caches(
        [
            _in("a", _deployment("plain", 3, scaled_by=AUTOSCALER_FIELD_MANAGER)),
            _in("a", versioned),
            _in("a", older),
            _in("b", _deployment("other", None)),
        ],
        [],
    )
    deployments.list_now()

    for reading, whole in (
        ("replicas", deployments.read("replicas")),
        ("deployments", deployments.read("deployments")),
    ):
        by_ns = deployments.by_namespace(reading)
        assert {k: v for part in by_ns.values() for k, v in part.items()} == whole
        assert set(by_ns["a"]) == {k for k in whole if k.startswith("a/")}
    assert deployments.by_namespace("replicas")["a"]["a/w"] == 3  # versions summed
    assert {ns: list(k) for ns, k in deployments.by_namespace("scaled").items()} == {
        "a": ["a/plain"],
        "b": [],
    }


def test_the_readings_by_namespace_are_unknown_until_the_first_list() -> None:
    deployments, _, _, _ = _caches([], [])
    with pytest.raises(LookupError, match="not listed yet"):
        deployments.by_namespace("replicas")


def test_the_readings_by_namespace_follow_every_watch_event() -> None:
    deployments, _, _, _ = _caches([_in("a", _deployment("orders", 2))], [])
    deployments.list_now()
    assert deployments.by_namespace("replicas") == {"a": {"a/orders": 2}}
    assert deployments.by_namespace("replicas") is deployments.by_namespace("replicas")

    deployments._apply("MODIFIED", _in("a", _deployment("orders", 5)))
    assert deployments.by_namespace("replicas") == {"a": {"a/orders": 5}}
    deployments._apply("ADDED", _in("b", _deployment("billing", 1)))
    assert deployments.by_namespace("replicas") == {"a": {"a/orders": 5}, "b": {"b/billing": 1}}
    deployments._apply("DELETED", _in("a", _deployment("orders", 5)))
    assert deployments.by_namespace("replicas") == {"b": {"b/billing": 1}}
