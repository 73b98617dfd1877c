"""A worker configured only from its pod's env gets the right client settings.

The test plays kubelet: it resolves the container env (values, secretKeyRef, downward
API) and writes the mTLS secret where the volume mount points, then hands the env to
temporalio's own environment-config loader, as a worker image would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.envconfig import ClientConfig, ClientConfigProfile
from temporalio.service import TLSConfig

from tests.unit.fleet_data import CA_PEM, CERT_PEM, KEY_PEM, valid_fleet
from twc import builders
from twc.connections import (
    ConnectionIdentity,
    PodSpecOptions,
    ResolvedConnection,
    SecretKeySelector,
    TLSSettings,
)
from twc.spec import AuthMode, load_fleet

WORKER = {w.name: w for w in load_fleet(valid_fleet(), "f.yaml").resolved_workers()}["billing"]
SECRETS: dict[str, dict[str, bytes]] = {
    "temporal-mtls": {"tls.crt": CERT_PEM, "tls.key": KEY_PEM, "ca.crt": CA_PEM},
    "temporal-api-key": {"api-key": b"key-123"},
}


def _kubelet_env(template: dict[str, Any], mount_dir: Path) -> dict[str, str]:
    """Resolve the first container's env and mount its secret volumes under mount_dir."""
    spec = template["spec"]
    container = spec["containers"][0]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        secret = SECRETS[volumes[mount["name"]]["secret"]["secretName"]]
        target = Path(mount["mountPath"])
        assert target.is_relative_to(mount_dir), "the test mounts only under tmp_path"
        target.mkdir(parents=True, exist_ok=True)
        for key, value in secret.items():
            (target / key).write_bytes(value)
    env: dict[str, str] = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
            continue
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[item["name"]] = SECRETS[ref["name"]][ref["key"]].decode()
        else:
            field = source["fieldRef"]["fieldPath"]
            env[item["name"]] = {
                "metadata.name": "billing-7d9f-abcde",
                "metadata.namespace": "sqs",
                "spec.nodeName": "node-1",
            }[field]
    return env


def _connect_config(env: dict[str, str]) -> dict[str, Any]:
    profile = ClientConfigProfile.load(disable_file=True, override_env_vars=env)
    return dict(profile.to_client_connect_config())


def test_mtls_env_loads_address_namespace_and_tls_files(tmp_path: Path) -> None:
    connection = ResolvedConnection(
        identity=ConnectionIdentity("temporal.io", "ClusterConnection", "prod", None),
        host_port="temporal.example:7233",
        tls=TLSSettings(enabled=True, server_name="temporal.internal"),
        auth_mode=AuthMode.MTLS,
        mtls_secret_name="temporal-mtls",
    )
    options = PodSpecOptions(
        secret_keys=frozenset(SECRETS["temporal-mtls"]), tls_mount_path=str(tmp_path / "tls")
    )
    template = builders.worker_pod_template(WORKER, connection, "f" * 64, options)

    config = _connect_config(_kubelet_env(template, tmp_path))

    assert config["target_host"] == "temporal.example:7233"
    assert config["namespace"] == "default"
    assert config["tls"] == TLSConfig(
        domain="temporal.internal",
        server_root_ca_cert=CA_PEM,
        client_cert=CERT_PEM,
        client_private_key=KEY_PEM,
    )
    assert "api_key" not in config


def test_api_key_env_loads_the_key_with_tls(tmp_path: Path) -> None:
    connection = ResolvedConnection(
        identity=ConnectionIdentity("temporal.io", "ClusterConnection", "cloud", None),
        host_port="ns.acct.tmprl.cloud:7233",
        tls=TLSSettings(enabled=True),
        auth_mode=AuthMode.API_KEY,
        api_key_secret=SecretKeySelector("temporal-api-key", "api-key"),
    )
    template = builders.worker_pod_template(WORKER, connection, "f" * 64)

    env = _kubelet_env(template, tmp_path)
    config = ClientConfig.load_client_connect_config(disable_file=True, override_env_vars=env)

    assert config["target_host"] == "ns.acct.tmprl.cloud:7233"
    assert config["api_key"] == "key-123"
    assert config["tls"] == TLSConfig()


def test_plain_env_loads_without_tls(tmp_path: Path) -> None:
    connection = ResolvedConnection(
        identity=ConnectionIdentity("temporal.io", "Connection", "orders", "sqs"),
        host_port="10.0.0.5:7233",
        tls=TLSSettings(enabled=False),
    )
    template = builders.worker_pod_template(WORKER, connection, "f" * 64)

    env = _kubelet_env(template, tmp_path)
    config = _connect_config(env)

    assert config == {"target_host": "10.0.0.5:7233", "namespace": "default"}
    assert env["TEMPORAL_TASK_QUEUE"] == "billing"
    assert env["POD_NAME"] == "billing-7d9f-abcde"
