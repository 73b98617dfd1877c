"""The Kubernetes client of the test bed and its tests: twc's :class:`KubeClient` over a
kubeconfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from twc.kube.client import KubeClient, api_client, read_json
from twc.kube.workloads import ensure_namespace


class Kube(KubeClient):
    """One API server through a kubeconfig, on an ``ApiClient`` of its own."""

    def __init__(self, kubeconfig: Path | str) -> None:
        self.kubeconfig = str(kubeconfig)
        super().__init__(api_client(self.kubeconfig))
        self.ext = self.extensions

    def ensure_namespace(self, name: str) -> None:
        ensure_namespace(self, name)

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return read_json(self.apps.read_namespaced_deployment, name, namespace)
