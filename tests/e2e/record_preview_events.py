"""Record the engine events of real previews as golden scenarios for the renderer tests.

Run ``python -m tests.e2e.record_preview_events`` (after ``make setup``). It starts a
private embedded environment, applies a small fleet, previews each change below on the
real engine, and writes ``tests/unit/golden/preview/real_<scenario>.events.json``:
the engine's JSON events exactly as ``on_event`` parsed them, made reproducible
(random namespace, stack name, ports and paths replaced by fixed ones) and smaller
(``managedFields`` dropped; nothing reads them). Then regenerate the renderings with
``TWC_UPDATE_GOLDEN=1 pytest tests/unit/test_preview_renders_golden.py`` and review
the diff.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pulumi.automation import events as engine_events

from tests.e2e.conftest import FleetStack, fleet_doc
from twc.engine import engine
from twc.local.cluster import Kube
from twc.local.environment import LocalEnvironment

GOLDEN = Path(__file__).resolve().parents[1] / "unit" / "golden" / "preview"
NAMESPACE, STACK, PORT = "apps", "local", "7233"
NEW_IMAGE = "registry.example/worker:1.5.0"
TLS_KEY = "-----BEGIN PRIVATE KEY-----\nRECORDED-tls-key-{}\n-----END PRIVATE KEY-----\n"
API_KEY = "RECORDED-api-key-{}"


@contextmanager
def raw_events() -> Iterator[list[dict[str, Any]]]:
    """Collect the JSON of every engine event while the block runs.

    The Automation API parses each line of the engine's event log with
    ``EngineEvent.from_json`` and keeps no raw form, so the recorder listens there.
    """
    seen: list[dict[str, Any]] = []
    original = engine_events.EngineEvent.from_json

    def record(data: dict[str, Any]) -> engine_events.EngineEvent:
        seen.append(copy.deepcopy(data))
        return original(data)

    engine_events.EngineEvent.from_json = record  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        engine_events.EngineEvent.from_json = original  # type: ignore[method-assign]


def normalize(events: list[dict[str, Any]], replace: dict[str, str]) -> list[dict[str, Any]]:
    """The events with ``replace`` applied to every string and ``managedFields`` gone."""
    pairs = sorted(replace.items(), key=lambda kv: -len(kv[0]))

    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            return {fix(k): fix(v) for k, v in value.items() if k != "managedFields"}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, str):
            for old, new in pairs:
                value = value.replace(old, new)
        return value

    return [fix(e) for e in events]


def write(name: str, events: list[dict[str, Any]]) -> Path:
    """One event per line, like the hand-made scenarios."""
    path = GOLDEN / f"real_{name}.events.json"
    lines = [json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in events]
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    return path


def main(only: list[str] | None = None) -> int:
    """Record every scenario, or ``only`` the named groups (``fleet``, ``credentials``,
    ``versioned``)."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        # Recorded events are the goldens' input: CI checks them, never records them.
        print("refusing to record preview events when CI=true", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="twc-record-") as tmp:
        local = LocalEnvironment(Path(tmp) / "env")
        local.up(progress=lambda m: print(f"[local] {m}", file=sys.stderr))
        try:
            os.environ.update(local.env())
            _record_all(local, Path(tmp), set(only or ("fleet", "credentials", "versioned")))
        finally:
            local.down(progress=lambda m: None)
    return 0


def _record_all(local: LocalEnvironment, tmp: Path, groups: set[str]) -> None:
    kube = Kube(local.kubeconfig)
    ns = f"r-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(ns)
    address = local.temporal_address()
    port = address.rsplit(":", 1)[1]
    env = {**local.env(), "PATH": os.environ.get("PATH", "")}

    def stack(fleet: dict[str, Any]) -> FleetStack:
        name = f"rec-{uuid.uuid4().hex[:8]}"
        return FleetStack(name, tmp / f"{name}.yaml", env).write(fleet)

    def replacements(fs: FleetStack) -> dict[str, str]:
        return {
            fs.name: STACK,
            str(fs.fleet_file): f"stacks/{STACK}.yaml",
            ns: NAMESPACE,
            f"127.0.0.1:{port}": f"127.0.0.1:{PORT}",
            f"localhost:{port}": f"localhost:{PORT}",
        }

    def scenario(fs: FleetStack, name: str, fleet: dict[str, Any]) -> None:
        fs.write(fleet)
        with raw_events() as seen:
            try:
                fs.preview()
            except Exception as exc:  # a failing preview is a scenario too  # noqa: BLE001 - the test records the failure and retries
                print(f"{name}: preview failed: {exc}", file=sys.stderr)
        print(write(name, normalize(seen, replacements(fs))), file=sys.stderr)

    # Workers alpha and beta on ClusterConnection `local`; gamma on a namespaced
    # Connection to the same server under another name.
    base = fleet_doc(
        ns,
        host_port=address,
        workers=[
            {"name": "alpha", "namespace": ns, "taskQueueName": "orders"},
            {"name": "beta", "namespace": ns, "taskQueueName": "billing"},
            {
                "name": "gamma",
                "namespace": ns,
                "taskQueueName": "reports",
                "connectionRef": {"name": "other"},
            },
        ],
    )
    base["connections"] = [{"name": "other", "namespace": ns, "hostPort": f"localhost:{port}"}]
    if "fleet" in groups:
        _with(stack(base), lambda fs: _fleet_scenarios(fs, base, scenario, ns, port))

    # A versioned worker (Progressive, the default sunset) whose image changes: a new
    # version's Deployment next to the running one, and the plan in words.
    versioned = fleet_doc(
        ns,
        host_port=address,
        workers=[
            {
                "name": "orders",
                "namespace": ns,
                "taskQueueName": "orders",
                "rollout": {
                    "strategy": "Progressive",
                    "steps": [
                        {"rampPercentage": 1, "pauseDuration": "10m"},
                        {"rampPercentage": 5, "pauseDuration": "15m"},
                    ],
                },
            }
        ],
    )
    new_image = copy.deepcopy(versioned)
    new_image["workers"][0]["image"] = NEW_IMAGE
    if "versioned" in groups:
        _with(
            stack(versioned),
            lambda fs: scenario(fs, "versioned_image_change", new_image),
        )
    if "credentials" not in groups:
        return

    # Credentials: an mTLS ClusterConnection copying its secret from another namespace,
    # and an API-key Connection; both rotated.
    source = f"{ns}-src"
    kube.ensure_namespace(source)
    kube.core.create_namespaced_secret(
        source,
        {
            "metadata": {"name": "temporal-mtls"},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": TLS_KEY.format("crt"), "tls.key": TLS_KEY.format("v1")},
        },
    )
    kube.core.create_namespaced_secret(
        ns, {"metadata": {"name": "temporal-api-key"}, "stringData": {"api-key": API_KEY.format(1)}}
    )
    creds = fleet_doc(
        ns,
        host_port=address,
        connection={
            "mutualTLSSecretRef": {"name": "temporal-mtls"},
            "secretSource": {"namespace": source},
            "allowedNamespaces": [ns],
        },
        workers=[
            {"name": "payments", "namespace": ns, "taskQueueName": "payments"},
            {
                "name": "cloud-sync",
                "namespace": ns,
                "taskQueueName": "cloud-sync",
                "connectionRef": {"name": "cloud"},
            },
        ],
    )
    creds["connections"] = [
        {
            "name": "cloud",
            "namespace": ns,
            "hostPort": address,
            "apiKeySecretRef": {"name": "temporal-api-key", "key": "api-key"},
        }
    ]

    def rotate(fs: FleetStack) -> None:
        kube.core.patch_namespaced_secret(
            "temporal-mtls", source, {"data": {"tls.key": _b64(TLS_KEY.format("v2"))}}
        )
        kube.core.patch_namespaced_secret(
            "temporal-api-key", ns, {"data": {"api-key": _b64(API_KEY.format(2))}}
        )
        scenario(fs, "credentials_rotated", creds)

    _with(stack(creds), rotate)


def _fleet_scenarios(
    fs: FleetStack,
    base: dict[str, Any],
    scenario: Callable[[FleetStack, str, dict[str, Any]], None],
    ns: str,
    port: str,
) -> None:
    scenario(fs, "no_changes", base)
    queue = copy.deepcopy(base)
    queue["queues"] = [{"name": "shipments", "namespace": ns, "workerEnabled": True}]
    scenario(fs, "new_queue", queue)
    host = copy.deepcopy(base)
    # Now equal to `other`'s address: the new fingerprint is one another connection has.
    host["clusterConnections"][0]["hostPort"] = f"localhost:{port}"
    scenario(fs, "connection_hostport", host)
    image = copy.deepcopy(base)
    image["workers"][0]["image"] = NEW_IMAGE
    scenario(fs, "image_change", image)
    deleted = copy.deepcopy(base)
    deleted["workers"] = [w for w in deleted["workers"] if w["name"] != "beta"]
    scenario(fs, "worker_deleted", deleted)


def _with(fs: FleetStack, body: Callable[[FleetStack], None]) -> None:
    """Apply the stack's fleet, run ``body``, destroy and remove the stack."""
    fleet_file = fs.fleet_file.read_text()
    try:
        fs.up()
        body(fs)
    finally:
        fs.fleet_file.write_text(fleet_file)
        try:
            fs.destroy()
        finally:
            engine.select_stack(fs.ref).workspace.remove_stack(fs.name, force=True)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or None))
