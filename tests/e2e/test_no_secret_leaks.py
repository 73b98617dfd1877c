"""No credential ever leaks, in every output but the preview renderer's.

An API key and a TLS key are planted in the cluster; a fleet uses both (the TLS secret
copied into the workers' namespace through ``secretSource``). Every output of ``up``,
the engine's own ``preview``, ``refresh``, ``twc status`` (table and JSON), a failing
``twc up`` and the logs is grepped for the values and their base64, and so is every file
under the Pulumi backend. The preview renderer has its own leak test
(``test_preview_explains_changes.py``).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import create_tls_secret, credentialed_fleet
from twc.cli import status as status_cmd
from twc.cli import up as up_cmd
from twc.local.environment import LocalEnvironment

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

TLS_KEY = (
    "-----BEGIN PRIVATE KEY-----\n"
    f"LEAKCANARYtlsKEY{uuid.uuid4().hex}MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
    "-----END PRIVATE KEY-----\n"
)
TLS_CRT = "-----BEGIN CERTIFICATE-----\nMIIBcanarycert\n-----END CERTIFICATE-----\n"
API_KEY = f"LEAKCANARY-api-key-{uuid.uuid4().hex}"
SECRET_SIG = "4dabf18193072939515e22adb298388d"  # Pulumi's marker of a secret value


def needles() -> list[str]:
    """Each planted value, its base64 (a Secret's ``data``) and its distinctive line."""
    out = []
    for value in (TLS_KEY, API_KEY):
        out += [value, base64.b64encode(value.encode()).decode()]
        out += [line for line in value.splitlines() if "LEAKCANARY" in line]
    return out


def leaks(text: str) -> list[str]:
    return [n for n in needles() if n in text]


def test_no_output_log_error_or_state_file_shows_the_api_key_or_the_tls_key(
    local_env: LocalEnvironment,
    kube: Any,
    namespace: str,
    fleet_stack: Any,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    address = local_env.temporal_address()
    source = f"{namespace}-src"
    kube.ensure_namespace(source)
    create_tls_secret(kube, source, crt=TLS_CRT, key=TLS_KEY)
    kube.core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "temporal-api-key"}, "stringData": {"api-key": API_KEY}},
    )
    fleet = credentialed_fleet(namespace, address, source)
    fs = fleet_stack(fleet)
    outputs: list[str] = []

    up = fs.up()
    assert up.summary.result == "succeeded"
    outputs += [up.stdout, up.stderr, json.dumps({k: v.value for k, v in up.outputs.items()})]
    # The copy really happened, so the test has a secret to lose.
    copied = kube.core.read_namespaced_secret("temporal-mtls", namespace)
    assert base64.b64decode(copied.data["tls.key"]).decode() == TLS_KEY

    preview = fs.stack().preview(diff=True, color="never")
    outputs += [preview.stdout, preview.stderr]
    refresh = fs.stack().refresh(color="never")
    outputs += [refresh.stdout, refresh.stderr]
    for fmt in ("table", "json"):
        out = io.StringIO()
        assert status_cmd.run_status(fs.name, fmt, out=out) == 0
        outputs.append(out.getvalue())
    assert "mtls" in outputs[-1]
    assert "keyed" in outputs[-1]

    # A failing run: the secret source is missing the secret for a new namespace's copy.
    other = f"{namespace}-b"
    kube.ensure_namespace(other)
    broken = dict(
        fleet,
        clusterConnections=[
            dict(
                fleet["clusterConnections"][0],
                secretSource={"namespace": f"{source}-gone"},
                allowedNamespaces=[*fleet["clusterConnections"][0]["allowedNamespaces"], other],
            )
        ],
        workers=[*fleet["workers"], {"name": "late", "namespace": other, "taskQueueName": "tq"}],
    )
    fs.write(broken)
    out = io.StringIO()
    assert up_cmd.run_up(fs.name, str(fs.fleet_file), out=out) == 1
    captured = capsys.readouterr()
    outputs += [out.getvalue(), captured.out, captured.err]
    assert "AuthSecretInvalid" in captured.err, captured.err
    fs.write(fleet)

    outputs += [caplog.text]
    outputs += [str(r.exc_info[1]) for r in caplog.records if r.exc_info and r.exc_info[1]]
    for text in outputs:
        assert leaks(text) == [], text[:2000]

    # The state: no plain value anywhere, and the copied Secret's data is ciphertext.
    files = [p for p in Path(local_env.backend_dir).rglob("*") if p.is_file()]
    assert any(fs.name in p.name for p in files)
    for path in files:
        assert leaks(path.read_text(errors="replace")) == [], path
    # The file itself (the Automation API's export shows secrets decrypted).
    (state,) = Path(local_env.backend_dir).rglob(f"stacks/**/{fs.name}.json")
    resources = json.loads(state.read_text())["checkpoint"]["latest"]["resources"]
    copies = [
        r
        for r in resources
        if r["type"] == "kubernetes:core/v1:Secret" and r["urn"].endswith(f"-secret-{namespace}")
    ]
    assert len(copies) == 1, [r["urn"] for r in resources]
    for section in ("inputs", "outputs"):
        data = copies[0][section]["data"]
        assert data.get(SECRET_SIG) == "1b47061264138c4ac30d75fd1eb44270", data
        assert "ciphertext" in data
        assert "plaintext" not in data
