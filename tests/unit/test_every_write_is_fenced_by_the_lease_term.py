"""Every cluster write of a leader is fenced by its Lease term, call by call: none is sent
without a term, and each one's timeout ends before the term does. Reads are not fenced.

An API server in the test process records each request; the writers are the daemon's
own (scale, views, status, finalizers, Events, early apply and its deletes, the record).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from twc.kube.client import KubeClient, TimeoutApiClient
from twc.kube.lease import NotLeadingError
from twc.kube.record import RecordStore
from twc.kube.workloads import ObjectRef, ReplicaScaler, Workloads
from twc.kube.writer import NativeWriter, TemporalWorkerViews
from twc.native.objects import NativeObject


@dataclass
class ApiServer:
    """Answers every write with what was sent; writes hang while ``writes_answer`` is
    clear."""

    url: str = ""
    methods: list[str] = field(default_factory=list)
    writes_answer: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def api_server() -> Iterator[ApiServer]:
    state = ApiServer()
    state.writes_answer.set()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            state.methods.append(self.command)
            length = int(self.headers.get("Content-Length") or 0)
            sent = self.rfile.read(length)
            if self.command != "GET" and not state.writes_answer.is_set():
                state.released.wait(30)  # a hung server: the connection stays silent
                return
            body = sent if sent.startswith(b"{") else b"{}"  # as stored
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    state.released.set()
    server.shutdown()


class Term:
    """The Lease term as the engine guard's channel tells it (seconds left)."""

    def __init__(self, left: float) -> None:
        self.left = left

    def __call__(self) -> float:
        return self.left


def _kube(url: str) -> KubeClient:
    config = client.Configuration()
    config.host = url
    return KubeClient(TimeoutApiClient(config))


OBJ = NativeObject(
    group="temporal.io",
    version="v1alpha1",
    plural="temporalworkers",
    kind="TemporalWorker",
    namespace="team",
    name="orders",
    uid="u1",
    resource_version="7",
)
REF = ObjectRef("Deployment", "team", "orders")
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "orders", "namespace": "team"},
    "spec": {"selector": {}, "template": {}},
}

WRITES: dict[str, Callable[[KubeClient], Any]] = {
    "scale": lambda k: ReplicaScaler(k).scale("team", "orders", 3),
    "status": lambda k: NativeWriter(k.custom, k.core).patch_status(OBJ, {"status": {}}),
    "finalizers": lambda k: NativeWriter(k.custom, k.core).set_finalizers(OBJ, []),
    "event": lambda k: NativeWriter(k.custom, k.core).event(OBJ, "Failed", "no"),
    "view": lambda k: TemporalWorkerViews(k.custom).replace_spec("team", "orders", {}, "7"),
    "view delete": lambda k: TemporalWorkerViews(k.custom).delete("team", "orders", "u1"),
    "early apply": lambda k: Workloads(k, stack="s").apply(DEPLOYMENT, "twc-early"),
    "early delete": lambda k: Workloads(k, stack="s").delete(REF),
    "record": lambda k: RecordStore(k.core, namespace="twc", stack="s").approve("d1"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_no_write_is_sent_once_the_term_is_over(api_server: ApiServer, write: str) -> None:
    term = Term(left=30.0)
    kube = _kube(api_server.url).fenced(term)
    WRITES[write](kube)  # within the term: sent
    sent = [m for m in api_server.methods if m != "GET"]
    assert sent
    api_server.methods.clear()

    term.left = 0.0  # the term ended (lost, handed over, the Lease deleted)
    with pytest.raises(NotLeadingError):
        WRITES[write](kube)

    assert [m for m in api_server.methods if m != "GET"] == []
    kube.close()


def test_a_write_to_a_hung_api_server_gives_up_before_the_term_ends(
    api_server: ApiServer,
) -> None:
    kube = _kube(api_server.url).fenced(Term(left=0.6))
    api_server.writes_answer.clear()

    with pytest.raises(Exception, match=r"(?i)timed? ?out"):
        ReplicaScaler(kube).scale("team", "orders", 3)

    # The server never answered: the call's own timeout, shorter than the term, ended it.
    assert not api_server.released.is_set()
    assert api_server.methods.count("PATCH") == 1  # and it was not retried
    kube.close()


def test_reads_are_not_fenced(api_server: ApiServer) -> None:
    kube = _kube(api_server.url).fenced(Term(left=0.0))

    kube.apps.read_namespaced_deployment("orders", "team", _preload_content=False)

    assert api_server.methods == ["GET"]
    kube.close()
