"""Cluster access for dynamic providers (imported lazily, inside provider methods).

The provider process inherits the engine's environment, so twc's one client factory
(:mod:`twc.kube.client`) reaches the same API server the kubernetes provider uses, with
the same default timeouts as every other call twc makes.
"""

from __future__ import annotations


def read_secret_data(namespace: str, name: str) -> dict[str, bytes]:
    """A Secret's decoded data.

    Raises:
        LookupError: the Secret does not exist.
    """
    from twc.kube.client import kube_client
    from twc.kube.workloads import read_secret_data as read

    with kube_client() as kube:
        return read(kube, namespace, name)
