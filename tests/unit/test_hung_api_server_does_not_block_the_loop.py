"""A kube-apiserver that accepts connections but never answers cannot block the loop."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from kubernetes import client

from twc.kube.client import KubeClient, TimeoutApiClient
from twc.kube.workloads import Workloads
from twc.loop.outcome import FailureReason, classify


@pytest.fixture
def hung_server() -> Iterator[str]:
    """A listening socket nobody accepts from: connections succeed, answers never come."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def _cluster(host: str) -> Workloads:
    # The one client wrapper every call goes through: its default timeout applies.
    config = client.Configuration()
    config.host = host
    config.retries = 0
    return Workloads(KubeClient(TimeoutApiClient(config, (1.0, 1.0))))


def test_the_replica_read_of_a_hung_api_server_times_out(hung_server: str) -> None:
    cluster = _cluster(hung_server)
    with pytest.raises(Exception, match=r"(?i)timed out") as raised:
        cluster.worker_replicas()
    assert classify(raised.value).reason is FailureReason.TIMEOUT
    cluster.kube.close()


def test_the_secret_read_of_a_hung_api_server_times_out(hung_server: str) -> None:
    cluster = _cluster(hung_server)
    with pytest.raises(Exception, match=r"(?i)timed out"):
        cluster.read_secret("team", "temporal-api-key")
    cluster.kube.close()


@pytest.fixture
def lists_then_hangs() -> Iterator[str]:
    """An API server that answers a list, then never answers the watch that follows."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if "watch=" in self.path:
                release.wait(30)  # a hung server: the connection stays open, silent
                return
            body = b'{"items": [], "metadata": {"resourceVersion": "5"}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("server", ["hung_server", "lists_then_hangs"])
def test_a_watch_on_a_hung_api_server_fails_and_is_reported(
    server: str, request: pytest.FixtureRequest
) -> None:
    import threading
    import time

    from twc.kube.watch import ObjectWatcher

    host = request.getfixturevalue(server)
    config = client.Configuration()
    config.host = host
    config.retries = 0
    api = client.ApiClient(config)
    watcher = ObjectWatcher(
        client.CustomObjectsApi(api),
        group="kmsvc.io",
        version="v1",
        plural="queues",
        resync_interval=3600,
        watch_timeout=1,
        retry_delay=0.1,
        request_timeout=1.0,
    )
    watcher.start(threading.Event())
    deadline = time.monotonic() + 20
    while watcher.failure() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    failure = watcher.failure()
    watcher.stop()
    api.close()
    assert failure is not None, "the watch thread never noticed the hung server"
    assert "timed out" in failure.lower() or "timeout" in failure.lower(), failure
