"""The test bed's pod runner configures a worker from the pod as a kubelet would.

Fast checks of ``WorkerPod.build_env`` on a pod object and a fake API (the real pods,
secrets and worker processes are exercised end to end in tests/e2e): envFrom and env in
order, ``$(VAR)`` references, secret and config-map keys, the downward API from the pod's
own fields, volumes written to a private directory with the env paths pointing there,
and a missing secret that is not optional refusing to start.
"""

from __future__ import annotations

import base64
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from twc.local.workerpod import PodConfigError, WorkerPod, is_running


class FakeCore:
    def __init__(self, secrets: dict[str, dict[str, bytes]], maps: dict[str, dict[str, str]]):
        self.secrets = secrets
        self.maps = maps

    def read_namespaced_secret(self, name: str, namespace: str) -> Any:
        assert namespace == "apps"
        if name not in self.secrets:
            raise ApiException(status=404)
        data = {k: base64.b64encode(v).decode() for k, v in self.secrets[name].items()}
        return SimpleNamespace(data=data)

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        if name not in self.maps:
            raise ApiException(status=404)
        return SimpleNamespace(data=self.maps[name], binary_data=None)


SECRETS = {"mtls": {"tls.crt": b"CERT", "tls.key": b"KEY"}, "key": {"api-key": b"k-1"}}
MAPS = {"settings": {"LOG_LEVEL": "debug", "REGION": "eu"}}


def _pod(env: list[dict[str, Any]], **container: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "echo-5d8c-x2x",
            "namespace": "apps",
            "uid": "u-1",
            "labels": {"app.kubernetes.io/name": "echo"},
        },
        "spec": {
            "nodeName": "twc-node-1",
            "serviceAccountName": "echo",
            "containers": [{"name": "worker", "image": "w:1", "env": env, **container}],
            "volumes": [
                {"name": "tls", "secret": {"secretName": "mtls"}},
                {
                    "name": "cfg",
                    "configMap": {
                        "name": "settings",
                        "items": [{"key": "REGION", "path": "region/name"}],
                    },
                },
            ],
        },
        "status": {"phase": "Running", "podIP": "127.11.0.7", "hostIP": "127.0.0.1"},
    }


def _worker_pod(pod: dict[str, Any]) -> WorkerPod:
    kube = SimpleNamespace(core=FakeCore(SECRETS, MAPS))
    return WorkerPod(kube, pod)  # type: ignore[arg-type]


def test_env_comes_from_values_secrets_config_maps_and_the_pods_own_fields() -> None:
    env: list[dict[str, Any]] = [
        {"name": "TEMPORAL_TASK_QUEUE", "value": "orders"},
        {"name": "QUEUE_COPY", "value": "$(TEMPORAL_TASK_QUEUE)-$(UNDEFINED)-$$(X)"},
        {
            "name": "TEMPORAL_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "key", "key": "api-key"}},
        },
        {
            "name": "LEVEL",
            "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LOG_LEVEL"}},
        },
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {
            "name": "APP",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app.kubernetes.io/name']"}},
        },
        {
            "name": "OPTIONAL",
            "valueFrom": {"secretKeyRef": {"name": "absent", "key": "x", "optional": True}},
        },
    ]
    pod = _worker_pod(_pod(env, envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CM_"}]))
    try:
        got = pod.build_env()
    finally:
        pod.stop()
    assert got == {
        "CM_LOG_LEVEL": "debug",
        "CM_REGION": "eu",
        "TEMPORAL_TASK_QUEUE": "orders",
        "QUEUE_COPY": "orders-$(UNDEFINED)-$(X)",
        "TEMPORAL_API_KEY": "k-1",
        "LEVEL": "debug",
        "POD_NAME": "echo-5d8c-x2x",
        "POD_NAMESPACE": "apps",
        "NODE_NAME": "twc-node-1",
        "POD_IP": "127.11.0.7",
        "APP": "echo",
    }


def test_volumes_are_written_privately_and_env_paths_point_at_them() -> None:
    env = [
        {"name": "TEMPORAL_TLS_CLIENT_CERT_PATH", "value": "/etc/temporal/tls/tls.crt"},
        {"name": "REGION_FILE", "value": "/etc/cfg/region/name"},
        {"name": "ELSEWHERE", "value": "/etc/temporal/tlsx"},
    ]
    mounts = [
        {"name": "tls", "mountPath": "/etc/temporal/tls"},
        {"name": "cfg", "mountPath": "/etc/cfg/"},
    ]
    pod = _worker_pod(_pod(env, volumeMounts=mounts))
    try:
        got = pod.build_env()
        cert = Path(got["TEMPORAL_TLS_CLIENT_CERT_PATH"])
        assert cert.read_bytes() == b"CERT"
        assert (cert.parent / "tls.key").read_bytes() == b"KEY"
        assert stat.S_IMODE(cert.stat().st_mode) == 0o600
        assert Path(got["REGION_FILE"]).read_text() == "eu"
        assert got["ELSEWHERE"] == "/etc/temporal/tlsx"  # not inside the mount
        private = cert.parent.parent.parent
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
    finally:
        pod.stop()
    assert not cert.exists(), "the pod's files outlived its worker"


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ({"secretKeyRef": {"name": "absent", "key": "x"}}, "secret absent not found"),
        ({"secretKeyRef": {"name": "key", "key": "nope"}}, "key 'nope' not in key"),
        ({"configMapKeyRef": {"name": "absent", "key": "x"}}, "config map absent not found"),
    ],
)
def test_a_missing_reference_that_is_not_optional_refuses_to_start(
    item: dict[str, Any], reason: str
) -> None:
    pod = _worker_pod(_pod([{"name": "X", "valueFrom": item}]))
    try:
        with pytest.raises(PodConfigError, match=reason):
            pod.start()
        assert pod.proc is None
    finally:
        pod.stop()


def test_only_a_scheduled_running_pod_that_is_not_being_deleted_gets_a_worker() -> None:
    pod = _pod([])
    assert is_running(pod)
    assert not is_running({**pod, "status": {"phase": "Pending"}})
    assert not is_running({**pod, "spec": {**pod["spec"], "nodeName": ""}})
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert not is_running(deleting)
