"""A rotated credential secret changes the desired state, so the workers roll."""

from __future__ import annotations

from collections.abc import Mapping

from tests.unit._daemon_fakes import NS, fleet_data, make_daemon


def _api_key_fleet() -> dict[str, object]:
    fleet = fleet_data(workers=[{"name": "payments", "namespace": NS, "taskQueueName": "p"}])
    fleet["clusterConnections"] = [
        {
            "name": "main",
            "hostPort": "temporal.example:7233",
            "tls": {},
            "apiKeySecretRef": {"name": "temporal-api-key", "key": "api-key"},
        }
    ]
    return fleet


def test_rotating_the_api_key_runs_a_full_up_and_an_unchanged_secret_does_not() -> None:
    secrets: dict[tuple[str, str], Mapping[str, bytes]] = {
        (NS, "temporal-api-key"): {"api-key": b"key-one"}
    }
    h = make_daemon(_api_key_fleet(), read_secret=lambda ns, name: secrets[(ns, name)])
    h.step()
    h.step()
    assert len(h.engine.ups) == 1

    secrets[(NS, "temporal-api-key")] = {"api-key": b"key-two"}
    h.step()

    assert len(h.engine.ups) == 2
    assert h.engine.ups[1][1] is None  # a connection change: full up


def test_an_unreadable_secret_keeps_the_last_digest_instead_of_triggering_an_up() -> None:
    calls = {"n": 0}

    def flaky(ns: str, name: str) -> Mapping[str, bytes]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise ConnectionError("API server unavailable")
        return {"api-key": b"key-one"}

    h = make_daemon(_api_key_fleet(), read_secret=flaky)
    h.step()
    h.step()

    assert calls["n"] == 2
    assert len(h.engine.ups) == 1
