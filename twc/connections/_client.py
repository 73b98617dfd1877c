"""The cached temporalio client factory behind :meth:`ResolvedConnection.client`.

One client per connection, namespace and credential, per event loop, and a bounded
number of them: a client whose connection and namespace got another credential (a
rotated secret) is dropped as soon as the new one is asked for, a client unused for
:data:`IDLE_SECONDS` is dropped at the next call, and beyond :data:`MAX_CLIENTS` the
least recently used goes. A dropped client's connection closes when the SDK frees it
(it has no close call).

temporalio is imported inside functions only: the fleet loader, the CLI's ``validate``
and the pure builders must not pay for (or depend on) the SDK's native bridge.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from twc.errors import Reason, TwcConnectionError
from twc.spec import AuthMode

if TYPE_CHECKING:
    from temporalio.client import Client

    from twc.connections._resolved import ConnectOptions

__all__ = ["cached_client", "clear_client_cache", "connect", "map_connect_error"]

logger = logging.getLogger(__name__)

MAX_CLIENTS = 256
"""Clients one event loop keeps (the most recently used)."""
IDLE_SECONDS = 900.0
"""A client unused this long is dropped."""


@dataclass
class _Entry:
    slot: Hashable
    """The connection and namespace: one credential's client per slot."""
    task: asyncio.Task[Client]
    used: float


# Clients are cached per event loop: a client's tasks belong to the loop that made it,
# and a weak key lets a closed loop take its clients with it.
_CACHE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OrderedDict[Hashable, _Entry]] = (
    weakref.WeakKeyDictionary()
)
_CLOCK: Callable[[], float] = time.monotonic

# Substrings of the SDK's connect errors that blame the client's credentials or the CA
# it was given, as opposed to the network or the server.
_CREDENTIAL_MARKERS = (
    "privatekeyparseerror",
    "certificateparseerror",
    "invalidcertificate",
    "unknownissuer",
    "bad certificate",
    "certificate required",
    "private key",
    "pem",
)


def map_connect_error(error: BaseException, auth_mode: AuthMode, target: str) -> TwcConnectionError:
    """Translate a temporalio connect failure into a :class:`TwcConnectionError`.

    ``RPCError`` with UNAUTHENTICATED or PERMISSION_DENIED, and ``RuntimeError``s
    whose text blames certificates or keys while credentials are in use, map to
    ``AuthSecretInvalid``; everything else to ``TemporalClientCreationFailed``.

    Args:
        error: What ``Client.connect`` raised.
        auth_mode: The connection's auth mode.
        target: ``host:port``, for the message.

    Returns:
        The error to raise (chained by the caller).
    """
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(error, RPCError):
        auth_codes = (RPCStatusCode.UNAUTHENTICATED, RPCStatusCode.PERMISSION_DENIED)
        reason = (
            Reason.AUTH_SECRET_INVALID
            if error.status in auth_codes
            else Reason.TEMPORAL_CLIENT_CREATION_FAILED
        )
        return TwcConnectionError(reason, f"{target}: {error.status.name}: {error.message}")
    if isinstance(error, TimeoutError):
        return TwcConnectionError(
            Reason.TEMPORAL_CLIENT_CREATION_FAILED, f"{target}: timed out connecting"
        )
    text = str(error)
    lowered = text.lower()
    if auth_mode is not AuthMode.NONE and any(m in lowered for m in _CREDENTIAL_MARKERS):
        return TwcConnectionError(Reason.AUTH_SECRET_INVALID, f"{target}: {text}")
    return TwcConnectionError(Reason.TEMPORAL_CLIENT_CREATION_FAILED, f"{target}: {text}")


async def connect(options: ConnectOptions, auth_mode: AuthMode, timeout: float) -> Client:
    """Open a temporalio client (uncached).

    Raises:
        TwcConnectionError: See :func:`map_connect_error`.
    """
    from temporalio.client import Client
    from temporalio.service import RPCError, TLSConfig

    tls: bool | TLSConfig = options.tls
    if options.tls and (options.client_cert or options.server_root_ca_cert or options.server_name):
        tls = TLSConfig(
            server_root_ca_cert=options.server_root_ca_cert,
            domain=options.server_name,
            client_cert=options.client_cert,
            client_private_key=options.client_private_key,
        )
    try:
        # connect_timeout bounds the dial; wait_for is a backstop for the handshake
        # and the first RPC, which the SDK does not bound.
        return await asyncio.wait_for(
            Client.connect(
                options.target_host,
                namespace=options.namespace,
                api_key=options.api_key,
                tls=tls,
                connect_timeout=timedelta(seconds=timeout),
            ),
            timeout=timeout * 2,
        )
    except (RPCError, RuntimeError, TimeoutError, OSError) as err:
        raise map_connect_error(err, auth_mode, options.target_host) from err


async def cached_client(
    key: Hashable,
    options: ConnectOptions,
    auth_mode: AuthMode,
    timeout: float,
    *,
    slot: Hashable | None = None,
) -> Client:
    """Return the cached client for ``key``, connecting once if needed.

    Concurrent callers share one connection attempt; a failed attempt is forgotten so
    the next call retries.

    Args:
        key: The client's identity (connection, credential and namespace).
        options: How to connect.
        auth_mode: The connection's auth mode (for error mapping).
        timeout: Seconds to wait for the frontend.
        slot: What ``key`` is a version of (the connection and namespace, without the
            credential): a new key in a slot drops the slot's older client.
    """
    loop = asyncio.get_running_loop()
    clients = _CACHE.setdefault(loop, OrderedDict())
    now = _CLOCK()
    entry = clients.get(key)
    if entry is None:
        _evict(clients, now, slot=key if slot is None else slot)
        logger.info(
            "connecting to Temporal at %s (namespace %s)", options.target_host, options.namespace
        )
        task = loop.create_task(connect(options, auth_mode, timeout))
        entry = clients[key] = _Entry(key if slot is None else slot, task, now)
    entry.used = now
    clients.move_to_end(key)
    task = entry.task
    try:
        # shield: one caller being cancelled must not cancel the shared attempt.
        return await asyncio.shield(task)
    finally:
        failed = task.done() and (task.cancelled() or task.exception() is not None)
        if failed and key in clients and clients[key].task is task:
            del clients[key]


def _evict(clients: OrderedDict[Hashable, _Entry], now: float, *, slot: Hashable) -> None:
    """Before a new client in ``slot``: drop the slot's older ones, the idle ones, and the
    least recently used beyond the bound. Callers awaiting a dropped attempt still get
    its result."""
    stale = [k for k, e in clients.items() if e.slot == slot or now - e.used >= IDLE_SECONDS]
    for key in stale:
        del clients[key]
    while len(clients) >= MAX_CLIENTS:
        clients.popitem(last=False)
    if stale:
        logger.info("dropped %d Temporal client(s) of rotated credentials or unused", len(stale))


def clear_client_cache() -> None:
    """Forget every cached client (for tests and after credential rotation)."""
    _CACHE.clear()


def poller_failure(error: BaseException) -> tuple[str, str]:
    """The condition reason and message of a failed task-queue check.

    One mapping for every place that describes a task queue (the TaskQueueCheck
    provider, the daemon's TemporalWorker status, ``twc status``): a missing credential
    secret or refused credentials are ``AuthSecretInvalid``, an unknown Temporal
    namespace ``NamespaceNotFound``, anything else ``TemporalUnavailable``.

    Args:
        error: What the describe (or the client behind it) raised.

    Returns:
        ``(reason, message)``; the message never holds secret material.
    """
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(error, LookupError):
        return "AuthSecretInvalid", str(error)
    if isinstance(error, TwcConnectionError):
        auth = error.reason == Reason.AUTH_SECRET_INVALID
        return ("AuthSecretInvalid" if auth else "TemporalUnavailable"), str(error)
    if isinstance(error, RPCError):
        reason = {
            RPCStatusCode.NOT_FOUND: "NamespaceNotFound",
            RPCStatusCode.UNAUTHENTICATED: "AuthSecretInvalid",
            RPCStatusCode.PERMISSION_DENIED: "AuthSecretInvalid",
        }.get(error.status, "TemporalUnavailable")
        return reason, f"{error.status.name}: {error.message}"
    return "TemporalUnavailable", f"{type(error).__name__}: {error}"
