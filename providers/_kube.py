"""Cluster access for dynamic providers, through twc's client factory (the engine's env)."""

from __future__ import annotations


def read_secret_data(namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's decoded data; raises ``LookupError`` when it does not exist."""
    from twc.kube.client import kube_client
    from twc.kube.workloads import read_secret_data as read

    with kube_client() as kube:
        return read(kube, namespace, name)
