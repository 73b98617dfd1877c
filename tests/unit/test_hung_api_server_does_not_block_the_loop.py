"""A kube-apiserver that accepts connections but never answers cannot block the loop."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from twc.kube.client import DEFAULT_TIMEOUT, KubeClient, TimeoutApiClient
from twc.kube.lease import LeaseElector
from twc.kube.workloads import Workloads
from twc.kube.writer import NativeWriter
from twc.native.objects import NativeObject
from twc.reconcile.outcome import FailureReason, classify
from twc.reconcile.settings import LeaderElectionSettings


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

    from twc.kube.watch import ObjectWatcher, Resource, WatchSettings

    host = request.getfixturevalue(server)
    config = client.Configuration()
    config.host = host
    config.retries = 0
    api = client.ApiClient(config)
    watcher = ObjectWatcher(
        client.CustomObjectsApi(api),
        Resource("kmsvc.io", "v1", "queues"),
        WatchSettings(3600, watch_timeout=1, retry_delay=0.1, request_timeout=1.0),
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


class Sent(Exception):
    """Stands in for the answer: the call got as far as the HTTP layer."""


def test_the_default_timeout_is_applied_to_a_call_that_sets_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[object] = []

    def record(self: object, *args: object, **kwargs: object) -> None:
        seen.append(kwargs.get("_request_timeout"))
        raise Sent

    monkeypatch.setattr(client.ApiClient, "call_api", record)
    config = client.Configuration()
    config.host = "http://127.0.0.1:9"
    kube = KubeClient(TimeoutApiClient(config))
    calls: list[Callable[[], object]] = [
        # Each sets no timeout of its own: the Lease, an Event, a status patch.
        lambda: kube.coordination.read_namespaced_lease("l", "ns"),
        lambda: kube.core.create_namespaced_event(
            "ns", {"metadata": {"name": "e"}, "involvedObject": {"name": "o"}}
        ),
        lambda: kube.custom.patch_namespaced_custom_object_status("g", "v1", "ns", "p", "n", {}),
        # One that sets its own keeps it.
        lambda: kube.coordination.read_namespaced_lease("l", "ns", _request_timeout=(1.0, 2.0)),
    ]

    for call in calls:
        with pytest.raises(Sent):
            call()

    assert seen == [DEFAULT_TIMEOUT, DEFAULT_TIMEOUT, DEFAULT_TIMEOUT, (1.0, 2.0)]


def _hung_kube(host: str) -> KubeClient:
    config = client.Configuration()
    config.host = host
    config.retries = 0
    return KubeClient(TimeoutApiClient(config, (1.0, 1.0)))


OBJECT = NativeObject(
    group="temporal.kmsvc.io",
    version="v1",
    plural="temporalworkers",
    kind="TemporalWorker",
    name="orders",
    namespace="team",
    resource_version="3",
)


def test_status_patches_finalizers_and_events_on_a_hung_api_server_time_out(
    hung_server: str,
) -> None:
    kube = _hung_kube(hung_server)
    writer = NativeWriter(kube.custom, kube.core)

    with pytest.raises(Exception, match=r"(?i)timed out"):
        writer.patch_status(OBJECT, {"status": {"phase": "Ready"}})
    with pytest.raises(Exception, match=r"(?i)timed out"):
        writer.set_finalizers(OBJECT, [])
    with pytest.raises(Exception, match=r"(?i)timed out"):
        writer.event(OBJECT, "Applied", "up succeeded", warning=False)
    kube.close()


def test_an_election_round_on_a_hung_api_server_fails_instead_of_blocking(
    hung_server: str,
) -> None:
    kube = _hung_kube(hung_server)
    timings = LeaderElectionSettings(lease_duration=4, renew_deadline=3, retry_period=1)
    elector = LeaseElector(
        kube.coordination, name="twc-s", namespace="ops", identity="a", settings=timings
    )

    assert not elector.round()  # the round's own call timeout, not the client's
    assert elector.last_round() is not None
    kube.close()
