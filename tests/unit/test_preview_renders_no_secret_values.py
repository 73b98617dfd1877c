"""No secret value (API key, TLS key, Secret data) reaches any rendering of the preview."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulumi.automation.events import EngineEvent

from tests.unit._preview import PLANTED, RENDERERS, SCENARIOS, raw_events, report
from twc.preview import SECRET, build_report

SIG = "4dabf18193072939515e22adb298388d"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


def _forms(value: str) -> list[str]:
    """A value as it may appear: plain, base64 (Secret data), JSON-escaped."""
    return [value, base64.b64encode(value.encode()).decode(), json.dumps(value)[1:-1]]


def test_the_secrets_recording_really_carries_the_planted_values() -> None:
    # Guards the test below: it proves nothing if the fixture lost its secrets.
    recording = json.dumps(raw_events("secrets"))
    for value in PLANTED:
        assert any(form in recording for form in _forms(value)), value


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_planted_secrets_appear_in_no_output(scenario: str, fmt: str) -> None:
    rendered = RENDERERS[fmt](report(scenario))
    for value in PLANTED:
        for form in _forms(value):
            assert form not in rendered, f"{value!r} leaked into {scenario}.{fmt}"
    assert "PLANTED" not in rendered


def test_hidden_changes_are_still_reported_as_changes() -> None:
    r = report("secrets")
    reasons = {reason.message for group in r.groups for reason in group.reasons}
    assert "env `LEGACY_TOKEN` changed (value hidden)" in reasons
    assert "env `PAYMENTS_API_KEY` added (value hidden)" in reasons
    assert "secret `temporal-api-key` changed (values hidden)" in reasons
    secret_fields = [
        fc
        for group in r.groups
        for res in group.resources
        if res.type == "kubernetes:core/v1:Secret"
        for fc in res.fields
    ]
    assert secret_fields
    assert all(fc.old == SECRET and fc.new == SECRET for fc in secret_fields)


# --- property: whatever the secret, wherever the rules say it hides -------------------

WORKER = "urn:pulumi:prod::twc::twc:temporal:TemporalWorker::temporal/w"
DEPLOY = (
    "urn:pulumi:prod::twc::twc:temporal:TemporalWorker$kubernetes:apps/v1:Deployment"
    "::temporal/w-deployment"
)
SECRET_URN = (
    "urn:pulumi:prod::twc::twc:temporal:TemporalWorker$kubernetes:core/v1:Secret::temporal/w-secret"
)


def _state(urn: str, rtype: str, parent: str, inputs: dict[str, Any]) -> dict[str, Any]:
    return {"type": rtype, "urn": urn, "parent": parent, "inputs": inputs, "outputs": inputs}


def _update(
    urn: str, rtype: str, old: dict[str, Any], new: dict[str, Any], paths: list[str]
) -> dict[str, Any]:
    return {
        "resourcePreEvent": {
            "metadata": {
                "op": "update",
                "urn": urn,
                "type": rtype,
                "old": _state(urn, rtype, WORKER, old),
                "new": _state(urn, rtype, WORKER, new),
                "detailedDiff": {p: {"diffKind": "update", "inputDiff": False} for p in paths},
            }
        }
    }


def _deployment(env: list[dict[str, Any]], annotation: str) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"example.com/note": annotation}},
        "spec": {
            "template": {"spec": {"containers": [{"name": "worker", "image": "w:1", "env": env}]}}
        },
    }


def _events(old: str, new: str) -> list[EngineEvent]:
    wrapped_old = {SIG: SECRET_SIG, "plaintext": json.dumps(old)}
    wrapped_new = {SIG: SECRET_SIG, "value": new}
    pem_old = f"-----BEGIN PRIVATE KEY-----\n{old}\n-----END PRIVATE KEY-----"
    pem_new = f"-----BEGIN PRIVATE KEY-----\n{new}\n-----END PRIVATE KEY-----"
    dep_old = _deployment(
        [{"name": "TEMPORAL_API_KEY", "value": old}, {"name": "SIGNING", "value": wrapped_old}],
        pem_old,
    )
    dep_new = _deployment(
        [{"name": "TEMPORAL_API_KEY", "value": new}, {"name": "SIGNING", "value": wrapped_new}],
        pem_new,
    )
    sec_old = {"data": {"k": base64.b64encode(old.encode()).decode()}, "stringData": {"k": old}}
    sec_new = {"data": {"k": base64.b64encode(new.encode()).decode()}, "stringData": {"k": new}}
    items = [
        {
            "resourcePreEvent": {
                "metadata": {"op": "same", "urn": WORKER, "type": "twc:temporal:TemporalWorker"}
            }
        },
        _update(
            DEPLOY,
            "kubernetes:apps/v1:Deployment",
            dep_old,
            dep_new,
            [
                "spec.template.spec.containers[0].env[0].value",
                "spec.template.spec.containers[0].env[1].value",
                'metadata.annotations["example.com/note"]',
            ],
        ),
        _update(
            SECRET_URN, "kubernetes:core/v1:Secret", sec_old, sec_new, ["data.k", "stringData.k"]
        ),
        # A Secret with no detailed diff: the renderer diffs the inputs itself.
        _update(SECRET_URN + "2", "kubernetes:core/v1:Secret", sec_old, sec_new, []),
    ]
    return [EngineEvent.from_json(item) for item in items]


@settings(max_examples=40, deadline=None)
@given(
    old=st.text(alphabet="abcdefghijkmnopqrstuvwxyz0123456789", min_size=10, max_size=40),
    new=st.text(alphabet="abcdefghijkmnopqrstuvwxyz0123456789", min_size=10, max_size=40),
)
def test_no_secret_from_any_hiding_place_reaches_any_format(old: str, new: str) -> None:
    old, new = f"s3cr3t-{old}", f"s3cr3t-{new}-2"
    r = build_report(_events(old, new), "twc", "prod")
    assert r.summary.has_changes
    for render in RENDERERS.values():
        rendered = render(r)
        assert "s3cr3t" not in rendered
        for value in (old, new):
            assert base64.b64encode(value.encode()).decode() not in rendered
