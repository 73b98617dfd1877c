"""A kube-apiserver that accepts connections but never answers cannot block the loop."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from kubernetes import client

from twc.controller.cluster import Cluster
from twc.controller.outcome import FailureReason, classify


@pytest.fixture
def hung_server() -> Iterator[str]:
    """A listening socket nobody accepts from: connections succeed, answers never come."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def _cluster(host: str) -> Cluster:
    config = client.Configuration()
    config.host = host
    config.retries = 0
    return Cluster(client.ApiClient(config), request_timeout=(1.0, 1.0))


def test_the_replica_read_of_a_hung_api_server_times_out(hung_server: str) -> None:
    cluster = _cluster(hung_server)
    with pytest.raises(Exception) as raised:
        cluster.worker_replicas()
    assert "timed out" in str(raised.value).lower()
    assert classify(raised.value).reason is FailureReason.TIMEOUT
    cluster.close()


def test_the_secret_read_of_a_hung_api_server_times_out(hung_server: str) -> None:
    cluster = _cluster(hung_server)
    with pytest.raises(Exception, match=r"(?i)timed out"):
        cluster.read_secret("team", "temporal-api-key")
    cluster.close()
