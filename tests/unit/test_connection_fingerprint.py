"""The connection fingerprint: stable, sensitive to what matters, free of secrets."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.fleet_data import CA_PEM, CERT_PEM, KEY_PEM
from twc.connections import (
    ConnectionIdentity,
    ResolvedConnection,
    SecretKeySelector,
    TLSSettings,
    fingerprint_of,
    secret_data_digest,
)
from twc.spec import AuthMode

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = ConnectionIdentity("temporal.io", "ClusterConnection", "prod", None)
MTLS = ResolvedConnection(
    identity=IDENTITY,
    host_port="temporal.example:7233",
    tls=TLSSettings(enabled=True, server_name="temporal.example"),
    auth_mode=AuthMode.MTLS,
    mtls_secret_name="temporal-mtls",
)
SECRET = {"tls.crt": CERT_PEM, "tls.key": KEY_PEM, "ca.crt": CA_PEM}


def test_the_fingerprint_is_64_hex_digits() -> None:
    fingerprint = MTLS.fingerprint(MTLS.secret_digest(SECRET))

    assert len(fingerprint) == 64
    assert set(fingerprint) <= set("0123456789abcdef")


def test_the_fingerprint_is_stable_across_processes() -> None:
    probe = (
        "from tests.unit.test_connection_fingerprint import MTLS, SECRET\n"
        "print(MTLS.fingerprint(MTLS.secret_digest(SECRET)))\n"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        ).stdout.strip()
        for seed in ("1", "2")
    }

    assert runs == {MTLS.fingerprint(MTLS.secret_digest(SECRET))}


def test_the_fingerprint_ignores_dict_order() -> None:
    reordered = dict(reversed(list(SECRET.items())))
    document = MTLS.spec_document()

    assert MTLS.secret_digest(reordered) == MTLS.secret_digest(SECRET)
    assert fingerprint_of(dict(reversed(list(document.items()))), "d") == fingerprint_of(
        document, "d"
    )


def test_the_fingerprint_survives_a_trip_through_pulumi_state() -> None:
    # Pulumi's wire format drops nulls and carries numbers as doubles.
    document = json.loads(json.dumps(MTLS.spec_document()))
    document["tls"].pop("serverName", None)
    plain = dataclasses.replace(MTLS, tls=TLSSettings(enabled=True))

    assert fingerprint_of(document, "d") == plain.fingerprint("d")
    assert fingerprint_of({"a": 1.0, "b": None, "c": {}}, None) == fingerprint_of({"a": 1}, None)


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(dataclasses.replace(MTLS, host_port="temporal.example:7234"), id="host-port"),
        pytest.param(
            dataclasses.replace(MTLS, tls=TLSSettings(enabled=True, server_name="other.example")),
            id="server-name",
        ),
        pytest.param(dataclasses.replace(MTLS, mtls_secret_name="temporal-mtls-v2"), id="secret"),
        pytest.param(
            dataclasses.replace(
                MTLS,
                auth_mode=AuthMode.API_KEY,
                mtls_secret_name=None,
                api_key_secret=SecretKeySelector("temporal-mtls", "api-key"),
            ),
            id="auth-mode",
        ),
        pytest.param(
            dataclasses.replace(MTLS, auth_mode=AuthMode.NONE, mtls_secret_name=None),
            id="no-auth",
        ),
        pytest.param(dataclasses.replace(MTLS, extra={"region": "eu"}), id="provider-extra"),
    ],
)
def test_the_fingerprint_changes_with_the_connection_spec(changed: ResolvedConnection) -> None:
    assert changed.fingerprint("digest") != MTLS.fingerprint("digest")


def test_the_fingerprint_changes_with_the_secret_data() -> None:
    rotated = {**SECRET, "tls.crt": CERT_PEM.replace(b"fakecert", b"newcert")}

    assert MTLS.fingerprint(MTLS.secret_digest(rotated)) != MTLS.fingerprint(
        MTLS.secret_digest(SECRET)
    )
    assert MTLS.fingerprint(None) != MTLS.fingerprint(MTLS.secret_digest(SECRET))


def test_unrelated_secret_keys_do_not_change_the_fingerprint() -> None:
    noisy = {**SECRET, "notes.txt": b"rotated by ops on tuesday"}

    assert MTLS.secret_digest(noisy) == MTLS.secret_digest(SECRET)


def test_the_identity_does_not_change_the_fingerprint() -> None:
    renamed = dataclasses.replace(MTLS, identity=dataclasses.replace(IDENTITY, name="prod-2"))

    assert renamed.fingerprint("d") == MTLS.fingerprint("d")


def test_no_secret_material_appears_in_the_spec_or_the_fingerprint() -> None:
    document = json.dumps(MTLS.spec_document())
    fingerprint = MTLS.fingerprint(MTLS.secret_digest(SECRET))
    digest = MTLS.secret_digest(SECRET)

    for value in SECRET.values():
        body = value.split(b"\n")[1].decode()
        assert body not in document
        assert body not in fingerprint
        assert body not in digest
    assert "BEGIN" not in document


def test_secret_digests_distinguish_key_and_value_boundaries() -> None:
    assert secret_data_digest({"ab": b"c"}) != secret_data_digest({"a": b"bc"})
    assert secret_data_digest({"a": "x"}) == secret_data_digest({"a": b"x"})
    assert secret_data_digest({}) != secret_data_digest({"": b""})


def test_a_resolved_connection_rejects_inconsistent_auth_settings() -> None:
    with pytest.raises(ValueError, match="does not match the secret references"):
        dataclasses.replace(MTLS, mtls_secret_name=None)
    with pytest.raises(ValueError, match="credentials require TLS"):
        dataclasses.replace(MTLS, tls=TLSSettings(enabled=False))
    with pytest.raises(ValueError, match="must be host:port"):
        dataclasses.replace(MTLS, host_port="nope")


def test_resolved_connections_can_key_a_dict() -> None:
    with_extra = dataclasses.replace(MTLS, extra={"region": "eu"})

    assert {MTLS: 1, with_extra: 2}[with_extra] == 2
