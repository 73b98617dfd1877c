"""A TLS front for the dev server that demands client certificates: every gRPC call is
forwarded as it is (bytes in, bytes out) and recorded with the common name of the
certificate it came with, so a test sees who called what."""

from __future__ import annotations

import datetime
import threading
from collections import Counter, defaultdict
from concurrent import futures
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "temporal.test"
_PEM = serialization.Encoding.PEM


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class Authority:
    """A throwaway CA issuing server and client certificates."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.cert = self._sign(_name("twc test CA"), self.key, ca=True)
        self.ca = self.cert.public_bytes(_PEM).decode()

    def _sign(
        self, subject: x509.Name, key: Any, *, ca: bool = False, usage: Any = None
    ) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        issuer = subject if ca else self.cert.subject
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            if usage == ExtendedKeyUsageOID.SERVER_AUTH:
                names = x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)])
                builder = builder.add_extension(names, critical=False)
        return builder.sign(self.key, hashes.SHA256())

    def issue(self, common_name: str, *, server: bool = False) -> dict[str, str]:
        """A ``kubernetes.io/tls`` secret's data (``tls.crt``, ``tls.key``, ``ca.crt``)."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        cert = self._sign(_name(common_name), key, usage=usage)
        private = key.private_bytes(
            _PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        pem = cert.public_bytes(_PEM).decode()
        return {"tls.crt": pem, "tls.key": private.decode(), "ca.crt": self.ca}


class MutualTLSFront:
    """Listens on ``address`` with TLS, forwards every call to ``upstream`` (plaintext)."""

    def __init__(self, authority: Authority, upstream: str) -> None:
        self.calls: dict[str, set[str]] = defaultdict(set)
        """Per client certificate's common name, the gRPC methods it called."""
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._upstream = grpc.insecure_channel(upstream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=200))
        self._server.add_generic_rpc_handlers([_Forward(self)])
        pair = authority.issue("temporal front", server=True)
        credentials = grpc.ssl_server_credentials(
            [(pair["tls.key"].encode(), pair["tls.crt"].encode())],
            root_certificates=authority.ca.encode(),
            require_client_auth=True,
        )
        port = self._server.add_secure_port("127.0.0.1:0", credentials)
        self.address = f"127.0.0.1:{port}"
        self._server.start()

    def record(self, common_name: str, method: str) -> None:
        with self._lock:
            self.calls[common_name].add(method.rsplit("/", 1)[-1])
            self._counts[common_name] += 1

    def methods(self, common_name: str) -> set[str]:
        """The methods called with that certificate so far."""
        with self._lock:
            return set(self.calls.get(common_name, ()))

    def count(self, common_name: str) -> int:
        """How many calls came with that certificate so far."""
        with self._lock:
            return self._counts[common_name]

    def forward(self, method: str, request: bytes, context: grpc.ServicerContext) -> bytes:
        names = context.auth_context().get("x509_common_name") or [b"?"]
        self.record(names[0].decode(), method)
        metadata = [(k, v) for k, v in context.invocation_metadata() if not k.startswith(":")]
        remaining = context.time_remaining()
        try:
            answer: bytes = self._upstream.unary_unary(method)(
                request, metadata=metadata, timeout=remaining if remaining < 1e6 else None
            )
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "")
        return answer

    def close(self) -> None:
        self._server.stop(grace=None)
        self._upstream.close()


class _Forward:
    """A generic handler (grpc takes any object with ``service``): every method forwarded."""

    def __init__(self, front: MutualTLSFront) -> None:
        self.front = front

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = str(details.method)
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self.front.forward(method, request, context)
        )
