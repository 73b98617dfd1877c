"""``twc preview`` on the real engine, API server and Temporal dev server.

One fleet is applied once for the module; each test writes its own variant of the fleet
file and previews it (a preview changes nothing, so the tests do not disturb each
other). Every scenario is previewed twice, through the real command line
(``python -m twc preview --format json``) and in-process (``run_preview``, text); the
Markdown is rendered from the JSON.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import FleetStack, credentialed_fleet, fleet_doc
from twc.cli import preview as preview_cmd
from twc.engine.engine import ROOT
from twc.local.environment import LocalEnvironment
from twc.preview import PreviewReport, render_markdown

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("engine_env")]

OLD_IMAGE = "registry.example/worker:1.4.2"
NEW_IMAGE = "registry.example/worker:1.5.0"


@pytest.fixture(scope="module")
def applied(
    local_env: LocalEnvironment,
    kube: Any,
    pulumi_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[FleetStack, dict[str, Any], str]]:
    """A fleet applied once: ``alpha`` and ``beta`` on ClusterConnection ``local``,
    ``gamma`` on a namespaced Connection ``other`` to the same server."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(namespace)
    address = local_env.temporal_address()
    fleet = fleet_doc(
        namespace,
        host_port=address,
        workers=[
            {"name": "alpha", "namespace": namespace, "taskQueueName": f"tq-{namespace}-a"},
            {"name": "beta", "namespace": namespace, "taskQueueName": f"tq-{namespace}-b"},
            {
                "name": "gamma",
                "namespace": namespace,
                "taskQueueName": f"tq-{namespace}-g",
                "connectionRef": {"name": "other"},
            },
        ],
    )
    # The same server under another name: a distinct fingerprint until the host-port
    # test gives `local` this very address.
    other = f"localhost:{address.rsplit(':', 1)[1]}"
    fleet["connections"] = [{"name": "other", "namespace": namespace, "hostPort": other}]
    name = f"e2e-pv-{uuid.uuid4().hex[:8]}"
    tmp = tmp_path_factory.mktemp("preview")
    fs = FleetStack(name, tmp / f"{name}.yaml", dict(pulumi_env)).write(fleet)
    assert fs.up().summary.result == "succeeded"
    try:
        yield fs, fleet, namespace
    finally:
        try:
            fs.write(fleet).destroy()
        finally:
            fs.stack().workspace.remove_stack(fs.name, force=True)


def _run_in_process(fs: FleetStack, fmt: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = preview_cmd.run_preview(
        fs.name, fmt=fmt, detailed=True, fleet_file=str(fs.fleet_file), out=out, err=err
    )
    assert not err.getvalue(), err.getvalue()
    return code, out.getvalue()


def _run_cli(fs: FleetStack, fmt: str, *, detailed: bool = True) -> tuple[int, str]:
    argv = [sys.executable, "-m", "twc", "preview", "--stack", fs.name]
    argv += ["--fleet-file", str(fs.fleet_file), "--format", fmt]
    if detailed:
        argv.append("--detailed-exitcode")
    proc = subprocess.run(
        argv, cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode in (0, 1, 2), proc.stderr
    return proc.returncode, proc.stdout


def _three_formats(fs: FleetStack) -> tuple[str, str, dict[str, Any]]:
    """Two real previews, both exiting 2 (changes): JSON through the command line, text
    in-process; the Markdown is rendered from the JSON document read back as a report,
    which also proves the JSON holds the whole report."""
    code, raw = _run_cli(fs, "json")
    assert code == 2, raw
    code, text = _run_in_process(fs, "text")
    assert code == 2, text
    doc = json.loads(raw)
    markdown = render_markdown(PreviewReport.model_validate(doc))
    return text, markdown, doc


def _assert_shows(rendered: str, *fragments: str) -> None:
    missing = [f for f in fragments if f not in rendered]
    assert not missing, f"missing {missing!r} in:\n{rendered}"


def _groups(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in doc["groups"]}


def _codes(group: dict[str, Any]) -> list[str]:
    return [r["code"] for r in group["reasons"]]


def test_preview_without_changes_exits_0_in_every_format(
    applied: tuple[FleetStack, dict[str, Any], str],
) -> None:
    fs, fleet, _ = applied
    fs.write(fleet)
    code, text = _run_cli(fs, "text")
    assert code == 0, text
    assert "No changes" in text, text
    code, markdown = _run_in_process(fs, "markdown")
    assert code == 0
    assert "**No changes.**" in markdown, markdown
    code, raw = _run_cli(fs, "json")
    assert code == 0
    doc = json.loads(raw)
    assert doc["summary"]["hasChanges"] is False
    assert doc["errors"] == []
    assert {g["operation"] for g in doc["groups"]} == {"same"}


def test_preview_of_a_new_worker_enabled_queue_shows_the_queue_and_its_new_worker(
    applied: tuple[FleetStack, dict[str, Any], str],
) -> None:
    fs, fleet, ns = applied
    changed = copy.deepcopy(fleet)
    changed["queues"] = [{"name": "orders", "namespace": ns, "workerEnabled": True}]
    fs.write(changed)
    text, markdown, doc = _three_formats(fs)

    _assert_shows(
        text,
        f"+ create Queue {ns}/orders\n    - new queue\n",
        f"+ create TemporalWorker {ns}/worker-orders\n"
        f"    - new worker: image `{OLD_IMAGE}`, 1 replica, task queue `orders`, "
        "connection `local`\n",
        f"    + Deployment {ns}/worker-orders-deployment\n",
    )
    assert "Workers that will restart" not in text, text
    _assert_shows(
        markdown,
        f"| **create** | Queue | `{ns}/orders` | new queue |",
        f"| **create** | TemporalWorker | `{ns}/worker-orders` | new worker: ",
    )

    groups = _groups(doc)
    queue = groups[f"{ns}/orders"]
    assert (queue["kind"], queue["operation"], _codes(queue)) == ("queue", "create", ["NewQueue"])
    worker = groups[f"{ns}/worker-orders"]
    assert (worker["operation"], worker["connection"]) == ("create", "local")
    assert _codes(worker) == ["NewWorker"]
    assert doc["summary"]["groups"]["create"] == 2
    assert doc["summary"]["resources"]["update"] == 0
    assert doc["summary"]["restartingWorkers"] == []


def test_preview_of_a_host_port_change_says_every_worker_using_the_connection_will_roll(
    local_env: LocalEnvironment, applied: tuple[FleetStack, dict[str, Any], str]
) -> None:
    fs, fleet, ns = applied
    old = local_env.temporal_address()
    new = f"localhost:{old.rsplit(':', 1)[1]}"
    changed = copy.deepcopy(fleet)
    changed["clusterConnections"][0]["hostPort"] = new
    fs.write(changed)
    text, markdown, doc = _three_formats(fs)

    rolling = f"every worker using `local` will roll (`{ns}/alpha`, `{ns}/beta`)"
    _assert_shows(
        text,
        f"~ update ClusterConnection local\n    - connection fingerprint changed: {rolling}\n",
        f"    - hostPort {old} → {new}\n",
        f"Workers that will restart: {ns}/alpha, {ns}/beta\n",
        f"~ update TemporalWorker {ns}/alpha (pods restart)\n",
        f"~ update TemporalWorker {ns}/beta (pods restart)\n",
        f"    - env `TEMPORAL_ADDRESS`: {old} → {new}\n",
    )
    # gamma has a connection of its own: it stays.
    assert f"TemporalWorker {ns}/gamma" not in text, text
    _assert_shows(
        markdown,
        f"| **update** | ClusterConnection | `local` | connection fingerprint changed: {rolling} "
        "(+1 more) |",
        f"**Workers that will restart:** `{ns}/alpha`, `{ns}/beta`",
        "<details>",
    )

    groups = _groups(doc)
    conn = groups["local"]
    assert conn["operation"] == "update"
    assert _codes(conn) == ["ConnectionFingerprintChanged", "HostPortChanged"]
    assert rolling in conn["reasons"][0]["message"]
    for worker in ("alpha", "beta"):
        group = groups[f"{ns}/{worker}"]
        assert (group["operation"], group["restarts"], group["connection"]) == (
            "update",
            True,
            "local",
        )
        assert _codes(group)[0] == "ConnectionFingerprintChanged"
    assert groups[f"{ns}/gamma"]["operation"] == "same"
    assert doc["summary"]["restartingWorkers"] == [f"{ns}/alpha", f"{ns}/beta"]


def test_preview_of_an_image_change_names_the_tag_change_and_restarts_only_that_worker(
    applied: tuple[FleetStack, dict[str, Any], str],
) -> None:
    fs, fleet, ns = applied
    changed = copy.deepcopy(fleet)
    changed["workers"][0]["image"] = NEW_IMAGE
    fs.write(changed)
    text, markdown, doc = _three_formats(fs)

    _assert_shows(
        text,
        f"~ update TemporalWorker {ns}/alpha (pods restart)\n    - image tag 1.4.2 → 1.5.0\n",
        f'~ spec.template.spec.containers[0].image: "{OLD_IMAGE}" → "{NEW_IMAGE}"\n',
        f"Workers that will restart: {ns}/alpha\n",
    )
    _assert_shows(
        markdown,
        f"| **update** | TemporalWorker | `{ns}/alpha` | image tag 1.4.2 → 1.5.0 · pods restart |",
        f'| `spec.template.spec.containers[0].image` | `"{OLD_IMAGE}"` | `"{NEW_IMAGE}"` |',
    )

    groups = _groups(doc)
    alpha = groups[f"{ns}/alpha"]
    assert alpha["reasons"] == [{"code": "ImageChanged", "message": "image tag 1.4.2 → 1.5.0"}]
    deployment = next(r for r in alpha["resources"] if r["type"].endswith("Deployment"))
    assert deployment["fields"] == [
        {
            "path": "spec.template.spec.containers[0].image",
            "kind": "update",
            "replace": False,
            "old": OLD_IMAGE,
            "new": NEW_IMAGE,
        }
    ]
    assert {g["name"] for g in doc["groups"] if g["operation"] != "same"} == {f"{ns}/alpha"}
    assert doc["summary"]["restartingWorkers"] == [f"{ns}/alpha"]


def test_preview_of_a_deleted_worker_lists_everything_it_removes(
    applied: tuple[FleetStack, dict[str, Any], str],
) -> None:
    fs, fleet, ns = applied
    changed = copy.deepcopy(fleet)
    changed["workers"] = [w for w in changed["workers"] if w["name"] != "beta"]
    fs.write(changed)
    text, markdown, doc = _three_formats(fs)

    _assert_shows(
        text,
        "Plan: 0 to create, 0 to update, 0 to replace, 4 to delete",
        f"- delete TemporalWorker {ns}/beta\n    - worker removed\n",
        f"    - TaskQueueCheck {ns}/beta-check\n",
        f"    - Deployment {ns}/beta-deployment\n",
        f"    - ServiceAccount {ns}/beta-sa\n",
    )
    _assert_shows(markdown, f"| **delete** | TemporalWorker | `{ns}/beta` | worker removed |")

    groups = _groups(doc)
    beta = groups[f"{ns}/beta"]
    assert (beta["operation"], _codes(beta)) == ("delete", ["WorkerRemoved"])
    assert {r["operation"] for r in beta["resources"]} == {"delete"}
    assert doc["summary"]["resources"]["delete"] == 4
    assert groups[f"{ns}/alpha"]["operation"] == "same"


def test_preview_that_fails_in_the_engine_still_renders_the_error_and_exits_1(
    fleet_stack: Any, namespace: str, local_env: LocalEnvironment
) -> None:
    # Valid on paper, but the API-key secret does not exist in the cluster: only the
    # program, running under the engine, can tell.
    fleet = fleet_doc(
        namespace,
        host_port=local_env.temporal_address(),
        workers=[{"name": "alpha", "namespace": namespace, "taskQueueName": "tq-fail"}],
        connection={"apiKeySecretRef": {"name": "no-such-secret", "key": "api-key"}},
    )
    fs = fleet_stack(fleet)
    code, text = _run_cli(fs, "text", detailed=False)
    assert code == 1, text
    assert "Errors:" in text, text
    assert "no-such-secret" in text, text
    code, markdown = _run_in_process(fs, "markdown")
    assert code == 1
    assert "**The preview failed**" in markdown, markdown


# --- secrets --------------------------------------------------------------------------

_PLANTED_KEY_BODY = "PLANTEDtlsKEYMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC"


def _tls_key(version: str) -> str:
    return f"-----BEGIN PRIVATE KEY-----\n{_PLANTED_KEY_BODY}{version}\n-----END PRIVATE KEY-----\n"


def _api_key(version: str) -> str:
    return f"PLANTED-api-key-{version}-9c1e5b77d2"


def _needles(*values: str) -> list[str]:
    """Each value, its base64 form (a Secret's ``data``), and its distinctive line."""
    out: list[str] = []
    for value in values:
        out.append(value)
        out.append(base64.b64encode(value.encode()).decode())
        out.extend(line for line in value.splitlines() if line.startswith("PLANTED"))
    return out


def _leaks(text: str, needles: list[str]) -> list[str]:
    return [n for n in needles if n in text]


def test_preview_never_shows_the_api_key_or_the_tls_key_in_any_format_nor_the_state(
    local_env: LocalEnvironment, kube: Any, namespace: str, fleet_stack: Any
) -> None:
    address = local_env.temporal_address()
    source = f"{namespace}-src"
    kube.ensure_namespace(source)
    kube.core.create_namespaced_secret(
        source,
        {
            "metadata": {"name": "temporal-mtls"},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": _tls_key("crt-1"), "tls.key": _tls_key("v1")},
        },
    )
    kube.core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "temporal-api-key"}, "stringData": {"api-key": _api_key("v1")}},
    )
    fleet = credentialed_fleet(namespace, address, source)
    fs = fleet_stack(fleet)
    # A first preview creates the secret copy: its data is in the events as inputs.
    text, markdown, doc = _three_formats(fs)
    creating = [text, markdown, json.dumps(doc)]
    assert f"+ Secret local-secret-{namespace}\n" in text, text
    assert fs.up().summary.result == "succeeded"

    # Rotate both credentials: the preview must say so without showing either value.
    kube.core.patch_namespaced_secret(
        "temporal-mtls",
        source,
        {"data": {"tls.key": base64.b64encode(_tls_key("v2").encode()).decode()}},
    )
    kube.core.patch_namespaced_secret(
        "temporal-api-key",
        namespace,
        {"data": {"api-key": base64.b64encode(_api_key("v2").encode()).decode()}},
    )
    text, markdown, doc = _three_formats(fs)
    raw = json.dumps(doc)
    needles = _needles(_tls_key("v1"), _tls_key("v2"), _api_key("v1"), _api_key("v2"))
    needles.append(_PLANTED_KEY_BODY)
    for rendered in (*creating, text, markdown, raw):
        assert _leaks(rendered, needles) == []

    # The rotation is visible, and the secret copy shows as changed with values hidden.
    groups = _groups(doc)
    assert "CredentialsChanged" in _codes(groups["local"])
    assert "CredentialsChanged" in _codes(groups[f"{namespace}/cloud"])
    assert "credential secret changed (certificate or key rotated)" in text, text
    assert "secret `temporal-mtls` changed (values hidden)" in text, text
    assert "[secret]" in text, text
    assert {f"{namespace}/mtls", f"{namespace}/keyed"} <= set(doc["summary"]["restartingWorkers"])

    # Nor does the state under the local backend hold either value in plain text.
    state_files = [p for p in Path(local_env.backend_dir).rglob("*") if p.is_file()]
    assert any(fs.name in p.name for p in state_files), state_files
    for path in state_files:
        assert _leaks(path.read_text(errors="replace"), needles) == [], path
