"""The dynamic providers, called directly: check, diff, create/update/read, pickling."""

from __future__ import annotations

import socket
from typing import Any

import dill
from pulumi.dynamic import CreateResult, ReadResult, UpdateResult

from providers.fingerprint import ConnectionFingerprintProvider
from providers.taskqueue import TaskQueueCheckProvider, check_task_queue, condition
from twc.connections import fingerprint_of

SPEC = {"version": "1", "hostPort": "temporal:7233", "tls": {"enabled": False}, "authMode": "none"}
DIGEST = "a" * 64


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_providers_survive_a_dill_round_trip_with_no_captured_client() -> None:
    for provider in (ConnectionFingerprintProvider(), TaskQueueCheckProvider()):
        copy = dill.loads(dill.dumps(provider))  # noqa: S301 - round-trips our own object
        assert type(copy) is type(provider)
        assert vars(copy) == {}  # nothing captured: clients are built inside methods


def test_fingerprint_output_is_the_shared_fingerprint_function() -> None:
    result = ConnectionFingerprintProvider().create({"spec": SPEC, "secretDigest": DIGEST})
    assert _outs(result)["fingerprint"] == fingerprint_of(SPEC, DIGEST)
    assert len(_outs(result)["fingerprint"]) == 64


def test_fingerprint_diff_reports_a_change_only_when_spec_or_digest_changes() -> None:
    p = ConnectionFingerprintProvider()
    olds = {"spec": SPEC, "secretDigest": DIGEST, "fingerprint": "x"}
    assert p.diff("id", olds, {"spec": SPEC, "secretDigest": DIGEST}).changes is False
    assert p.diff("id", olds, {"spec": SPEC, "secretDigest": "b" * 64}).changes is True
    moved = dict(SPEC, hostPort="other:7233")
    changed = p.diff("id", olds, {"spec": moved, "secretDigest": DIGEST})
    assert changed.changes is True
    assert not changed.replaces  # a fingerprint is updated in place, never replaced
    # twc's own credential is an input (previews show it), never part of the fingerprint.
    own = p.diff("id", olds, {"spec": SPEC, "secretDigest": DIGEST, "twcCredential": "twc-mtls"})
    assert own.changes is True
    assert _outs(p.update("id", olds, {**olds, "twcCredential": "twc-mtls"}))["fingerprint"] == (
        fingerprint_of(SPEC, DIGEST)
    )


def test_fingerprint_check_rejects_what_looks_like_secret_material() -> None:
    result = ConnectionFingerprintProvider().check(
        {}, {"spec": SPEC, "secretDigest": "-----BEGIN PRIVATE KEY-----"}
    )
    assert [f.property for f in result.failures] == ["secretDigest"]


def test_fingerprint_read_recomputes_and_returns_inputs_so_refresh_finds_no_drift() -> None:
    props = {"spec": SPEC, "secretDigest": DIGEST, "fingerprint": fingerprint_of(SPEC, DIGEST)}
    read = ConnectionFingerprintProvider().read("id", props)
    assert _outs(read)["fingerprint"] == props["fingerprint"]
    assert read.inputs == {"spec": SPEC, "secretDigest": DIGEST, "twcCredential": None}


def test_task_queue_check_rejects_bad_inputs_with_check_failures() -> None:
    result = TaskQueueCheckProvider().check(
        {}, {"address": "no-port", "namespace": "", "taskQueue": "q", "waitForPollersSeconds": -1}
    )
    assert sorted(f.property for f in result.failures) == [
        "address",
        "namespace",
        "waitForPollersSeconds",
    ]


def test_unreachable_temporal_gives_a_false_condition_not_an_error() -> None:
    props = {
        "address": f"127.0.0.1:{_closed_port()}",
        "namespace": "default",
        "taskQueue": "q",
        "authMode": "none",
    }
    created = TaskQueueCheckProvider().create(props)
    cond = _outs(created)["condition"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "TemporalTaskQueueRegistered",
        "False",
        "TemporalUnavailable",
    )
    assert _outs(created)["pollers"] == 0


def test_missing_credential_secret_is_reported_as_auth_secret_invalid(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import providers.taskqueue as kube

    def missing(namespace: str, name: str) -> dict[str, bytes]:
        raise LookupError(f"secret {namespace}/{name} not found")

    monkeypatch.setattr(kube, "read_secret_data", missing)
    outs = check_task_queue(
        {
            "address": "127.0.0.1:1",
            "namespace": "default",
            "taskQueue": "q",
            "authMode": "apiKey",
            "secretRef": {"namespace": "ns", "name": "gone"},
            "apiKeyKey": "api-key",
        }
    )
    assert outs["condition"]["reason"] == "AuthSecretInvalid"
    assert "ns/gone" in outs["condition"]["message"]


def test_outputs_carry_no_credentials_only_the_secret_reference() -> None:
    props = {
        "address": f"127.0.0.1:{_closed_port()}",
        "namespace": "default",
        "taskQueue": "q",
        "secretRef": {"namespace": "ns", "name": "creds"},
        "credentials": {"tls.key": "PLANTED-KEY"},  # must never be echoed
    }
    outs = (
        TaskQueueCheckProvider()
        .update("id", {}, {k: v for k, v in props.items() if k != "secretRef"})
        .outs
        or {}
    )
    assert "credentials" not in outs
    assert "PLANTED-KEY" not in repr(outs)


def test_condition_transition_time_moves_only_when_the_status_changes() -> None:
    first = condition(False, "WaitingForPollers", "none yet", None)
    first["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    same = condition(False, "TemporalUnavailable", "down", first)
    assert same["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = condition(True, "PollersRegistered", "1 poller", first)
    assert flipped["lastTransitionTime"] != "2026-01-01T00:00:00Z"


def test_task_queue_check_diff_never_replaces() -> None:
    olds = {"address": "a:1", "namespace": "default", "taskQueue": "q", "trigger": "t1"}
    diff = TaskQueueCheckProvider().diff("id", olds, dict(olds, trigger="t2"))
    assert diff.changes is True
    assert not diff.replaces
    assert TaskQueueCheckProvider().diff("id", olds, dict(olds)).changes is False


def _outs(result: CreateResult | ReadResult | UpdateResult) -> dict[str, Any]:
    assert result.outs is not None, "the provider returned no outputs"
    return dict(result.outs)
