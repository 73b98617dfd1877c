"""The cached temporalio client factory and its error mapping."""

from __future__ import annotations

import asyncio
import gc
import socket
import weakref
from typing import Any

import pytest
from temporalio.service import RPCError, RPCStatusCode

from tests.unit.fleet_data import CA_PEM, CERT_PEM, KEY_PEM
from twc import connections as client_module
from twc.connections import (
    ConnectionIdentity,
    ConnectOptions,
    ResolvedConnection,
    SecretKeySelector,
    TLSSettings,
    map_connect_error,
)
from twc.errors import Reason, TwcConnectionError
from twc.spec import AuthMode

MTLS = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "ClusterConnection", "prod", None),
    host_port="127.0.0.1:7233",
    tls=TLSSettings(enabled=True, server_name="temporal.internal"),
    auth_mode=AuthMode.MTLS,
    mtls_secret_name="temporal-mtls",
)
API_KEY = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "ClusterConnection", "cloud", None),
    host_port="127.0.0.1:7233",
    tls=TLSSettings(enabled=True),
    auth_mode=AuthMode.API_KEY,
    api_key_secret=SecretKeySelector("temporal-api-key", "api-key"),
)
PLAIN = ResolvedConnection(
    identity=ConnectionIdentity("temporal.io", "Connection", "local", "default"),
    host_port="127.0.0.1:7233",
    tls=TLSSettings(enabled=False),
)
SECRET = {"tls.crt": CERT_PEM, "tls.key": KEY_PEM, "ca.crt": CA_PEM}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_mtls_options_carry_the_secret_files() -> None:
    options = MTLS.connect_options("orders", SECRET)

    assert options == ConnectOptions(
        target_host="127.0.0.1:7233",
        namespace="orders",
        tls=True,
        server_name="temporal.internal",
        server_root_ca_cert=CA_PEM,
        client_cert=CERT_PEM,
        client_private_key=KEY_PEM,
    )
    assert "fakekey" not in repr(options)


def test_the_ca_is_optional_and_str_values_are_accepted() -> None:
    options = MTLS.connect_options(
        "orders", {"tls.crt": CERT_PEM.decode(), "tls.key": KEY_PEM.decode()}
    )

    assert options.server_root_ca_cert is None
    assert options.client_cert == CERT_PEM


def test_api_key_options_carry_the_key() -> None:
    assert API_KEY.connect_options("ns", {"api-key": b" key-123\n"}).api_key == "key-123"


def test_plain_options_ignore_secret_data() -> None:
    assert PLAIN.connect_options("ns") == ConnectOptions(
        target_host="127.0.0.1:7233", namespace="ns", tls=False
    )


@pytest.mark.parametrize(
    ("connection", "data", "message"),
    [
        (MTLS, None, "no secret data given"),
        (MTLS, {"tls.crt": CERT_PEM}, "key 'tls.key' is missing"),
        (MTLS, {"tls.crt": b"hunter2", "tls.key": KEY_PEM}, "does not hold a PEM certificate"),
        (MTLS, {"tls.crt": CERT_PEM, "tls.key": CERT_PEM}, "does not hold a PEM private key"),
        (API_KEY, {"api-key": b"  "}, "key 'api-key' is missing or empty"),
        (API_KEY, {"other": b"x"}, "key 'api-key' is missing or empty"),
    ],
)
def test_unusable_secrets_are_auth_secret_invalid(
    connection: ResolvedConnection, data: dict[str, bytes] | None, message: str
) -> None:
    with pytest.raises(TwcConnectionError) as caught:
        connection.connect_options("ns", data)

    assert caught.value.reason is Reason.AUTH_SECRET_INVALID
    assert message in caught.value.message
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("error", "auth", "reason"),
    [
        (
            RPCError("no", RPCStatusCode.UNAUTHENTICATED, b""),
            AuthMode.MTLS,
            Reason.AUTH_SECRET_INVALID,
        ),
        (
            RPCError("no", RPCStatusCode.PERMISSION_DENIED, b""),
            AuthMode.API_KEY,
            Reason.AUTH_SECRET_INVALID,
        ),
        (
            RPCError("down", RPCStatusCode.UNAVAILABLE, b""),
            AuthMode.MTLS,
            Reason.TEMPORAL_CLIENT_CREATION_FAILED,
        ),
        (
            RuntimeError(
                "Failed client connect: tonic::transport::Error(Transport, PrivateKeyParseError)"
            ),
            AuthMode.MTLS,
            Reason.AUTH_SECRET_INVALID,
        ),
        (
            RuntimeError("Failed client connect: invalid peer certificate: UnknownIssuer"),
            AuthMode.NONE,
            Reason.TEMPORAL_CLIENT_CREATION_FAILED,
        ),
        (
            RuntimeError("Failed client connect: Connection refused"),
            AuthMode.MTLS,
            Reason.TEMPORAL_CLIENT_CREATION_FAILED,
        ),
        (TimeoutError(), AuthMode.NONE, Reason.TEMPORAL_CLIENT_CREATION_FAILED),
    ],
)
def test_connect_errors_map_to_stable_reasons(
    error: BaseException, auth: AuthMode, reason: Reason
) -> None:
    mapped = map_connect_error(error, auth, "temporal:7233")

    assert mapped.reason is reason
    assert mapped.message.startswith("temporal:7233: ")
    assert mapped.retryable is (reason is Reason.TEMPORAL_CLIENT_CREATION_FAILED)


def test_an_unreachable_frontend_is_temporal_client_creation_failed() -> None:
    connection = ResolvedConnection(
        identity=PLAIN.identity, host_port=f"127.0.0.1:{_closed_port()}", tls=PLAIN.tls
    )

    with pytest.raises(TwcConnectionError) as caught:
        asyncio.run(connection.client("default", connect_timeout=3))

    assert caught.value.reason is Reason.TEMPORAL_CLIENT_CREATION_FAILED
    assert "Connection refused" in caught.value.message


def test_a_key_the_tls_stack_cannot_parse_is_auth_secret_invalid() -> None:
    connection = ResolvedConnection(
        identity=MTLS.identity,
        host_port=f"127.0.0.1:{_closed_port()}",
        tls=MTLS.tls,
        auth_mode=AuthMode.MTLS,
        mtls_secret_name="temporal-mtls",
    )

    with pytest.raises(TwcConnectionError) as caught:
        asyncio.run(connection.client("default", SECRET, connect_timeout=3))

    assert caught.value.reason is Reason.AUTH_SECRET_INVALID
    assert "fakekey" not in str(caught.value)


class _FakeConnect:
    """Stands in for the real dial: counts calls, optionally fails the first."""

    def __init__(self, fail_first: bool = False) -> None:
        self.calls: list[ConnectOptions] = []
        self.fail_first = fail_first

    async def __call__(self, options: ConnectOptions, auth: AuthMode, timeout: float) -> Any:
        self.calls.append(options)
        await asyncio.sleep(0.01)
        if self.fail_first and len(self.calls) == 1:
            raise TwcConnectionError(Reason.TEMPORAL_CLIENT_CREATION_FAILED, "down")
        return object()


def test_clients_are_cached_per_connection_secret_and_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeConnect()
    monkeypatch.setattr(client_module, "connect", fake)
    rotated = {**SECRET, "tls.crt": CERT_PEM.replace(b"fakecert", b"newcert")}

    async def scenario() -> list[Any]:
        first, concurrent = await asyncio.gather(
            MTLS.client("orders", SECRET), MTLS.client("orders", SECRET)
        )
        return [
            first,
            concurrent,
            await MTLS.client("orders", SECRET),
            await MTLS.client("payments", SECRET),
            await MTLS.client("orders", rotated),
        ]

    first, concurrent, again, other_ns, after_rotation = asyncio.run(scenario())

    assert first is concurrent is again
    assert other_ns is not first
    assert after_rotation is not first
    assert [o.namespace for o in fake.calls] == ["orders", "payments", "orders"]


def test_a_failed_connect_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeConnect(fail_first=True)
    monkeypatch.setattr(client_module, "connect", fake)

    async def scenario() -> Any:
        with pytest.raises(TwcConnectionError):
            await PLAIN.client("default")
        return await PLAIN.client("default")

    assert asyncio.run(scenario()) is not None
    assert len(fake.calls) == 2


class _Client:
    """A connected client stand-in that can be watched for being freed."""


class _Connects:
    def __init__(self) -> None:
        self.made: list[weakref.ref[_Client]] = []

    async def __call__(self, options: ConnectOptions, auth: AuthMode, timeout: float) -> Any:
        made = _Client()
        self.made.append(weakref.ref(made))
        return made


def _freed(ref: weakref.ref[_Client]) -> bool:
    gc.collect()
    return ref() is None


def test_a_rotated_credential_drops_the_old_client(monkeypatch: pytest.MonkeyPatch) -> None:
    connects = _Connects()
    monkeypatch.setattr(client_module, "connect", connects)
    rotated = {**SECRET, "tls.crt": CERT_PEM.replace(b"fakecert", b"newcert")}

    async def scenario() -> None:
        await MTLS.client("orders", SECRET)
        await MTLS.client("payments", SECRET)
        await MTLS.client("orders", rotated)
        assert _freed(connects.made[0])  # orders' client of the old certificate
        assert not _freed(connects.made[1])  # another namespace keeps its own

    asyncio.run(scenario())


def test_a_client_unused_for_a_while_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    connects = _Connects()
    now = [0.0]
    monkeypatch.setattr(client_module, "connect", connects)
    monkeypatch.setattr(client_module, "_CLOCK", lambda: now[0])

    async def scenario() -> None:
        await PLAIN.client("idle")
        await PLAIN.client("busy")
        now[0] += client_module.IDLE_SECONDS - 1
        await PLAIN.client("busy")
        now[0] += 1
        await PLAIN.client("new")
        assert _freed(connects.made[0])
        assert not _freed(connects.made[1])

    asyncio.run(scenario())


def test_the_cache_holds_a_bounded_number_of_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    connects = _Connects()
    monkeypatch.setattr(client_module, "connect", connects)

    async def scenario() -> None:
        for index in range(client_module.MAX_CLIENTS + 1):
            await PLAIN.client(f"ns-{index}")
        assert _freed(connects.made[0])  # the least recently used
        assert not _freed(connects.made[-1])

    asyncio.run(scenario())
