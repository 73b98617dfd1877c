"""A manual ``twc up`` on a stack the daemon manages (output ``daemonLease``) takes part
in its Lease as ``manual:<user>@<host>:<pid>``: it asks for a hand-over, waits up to
``wait`` seconds for the daemon's current step, runs its engine under the guard with the
Lease's term, and releases the Lease once its engine is gone."""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from twc.engine import engine
from twc.engine.supervisor import GuardChannel
from twc.kube.client import KubeClient, kube_client, read_json, status_of
from twc.kube.lease import (
    DAEMON_LEASE_ENV,
    DAEMON_LEASE_OUTPUT,
    MANUAL_PREFIX,
    LeaseElector,
    LeaseHooks,
    LeaseRecord,
    LeaseTimings,
    call_timeout,
)
from twc.reconcile.settings import KILL_MARGIN, EngineSettings, LeaderElectionSettings
from twc.timestamps import parse_rfc3339

DEFAULT_WAIT = 600.0  # seconds ``twc up`` waits for the daemon's current step


def lease_client(ref: engine.StackRef, timings: LeaseTimings) -> KubeClient:
    """The Leases' own client: calls that fit a round, no retries hiding a hung API."""
    return kube_client((ref.env or {}).get("KUBECONFIG"), timeout=call_timeout(timings), retries=0)


def guard_elector(
    leases: KubeClient,
    channel: GuardChannel,
    *,
    name: str,
    namespace: str,
    identity: str,
    timings: LeaseTimings,
    on_lost: Callable[[], None],
    may_acquire: Callable[[], bool] = lambda: True,
    **extra: Any,
) -> LeaseElector:
    """A Lease elector whose terms the engine guard's ``channel`` follows."""
    hooks = LeaseHooks(
        on_renewed=channel.lease_renewed,
        on_lost=on_lost,
        on_ended=channel.lease_ended,
        announced=channel.announced,
        may_acquire=may_acquire,
    )
    return LeaseElector(
        leases.coordination,
        name=name,
        namespace=namespace,
        identity=identity,
        settings=timings,
        hooks=hooks,
        **extra,
    )


def daemon_lease(ref: engine.StackRef) -> tuple[str, str] | None:
    """``(namespace, name)`` of the daemon's Lease the stack's outputs name (raises when
    they cannot be read)."""
    found = engine.select_stack(ref).outputs().get(DAEMON_LEASE_OUTPUT)
    value = found.value if found is not None and not found.secret else None
    if not isinstance(value, str) or "/" not in value:
        return None
    namespace, name = value.split("/", 1)
    return namespace, name


def daemon_holder(ref: engine.StackRef) -> str | None:
    """The daemon holding the stack's Lease now (``None``: no such Lease, or released,
    manual or expired); raises when the outputs or the Lease cannot be read."""
    lease = daemon_lease(ref)
    if lease is None:
        return None
    namespace, name = lease
    with kube_client((ref.env or {}).get("KUBECONFIG")) as kube:
        found = read_json(kube.coordination.read_namespaced_lease, name, namespace)
    record = LeaseRecord.from_lease(found or {})
    if not record.holder or record.holder.startswith(MANUAL_PREFIX):
        return None
    try:
        renewed = parse_rfc3339(record.renew_time)
    except ValueError:
        return record.holder  # no time to judge by: held
    return record.holder if renewed + record.duration > time.time() else None


@contextmanager
def stack_lease(
    ref: engine.StackRef, err: TextIO, *, wait: float = DEFAULT_WAIT
) -> Iterator[engine.StackRef | None]:
    """``ref`` for a manual engine run under the guard (and the daemon's Lease, if any);
    ``None``, after saying why on ``err``, when the run must not start."""
    try:
        lease = daemon_lease(ref)
    except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
        print(f"cannot read the stack's outputs: {exc}; nothing was applied", file=err)
        yield None
        return
    with guarded(ref) if lease is None else _held(ref, lease, err, wait) as run:
        yield run


@contextmanager
def guarded(ref: engine.StackRef) -> Iterator[engine.StackRef]:
    """``ref`` for one engine run outside any Lease, under the guard and its deadline."""
    settings = EngineSettings()
    with tempfile.TemporaryDirectory(prefix="twc-run-") as tmp:
        channel = GuardChannel(Path(tmp) / "guard", grace=settings.interrupt_grace)
        with channel.run(settings.deadline):
            yield ref.with_env(channel.env())


@contextmanager
def _held(
    ref: engine.StackRef, lease: tuple[str, str], err: TextIO, wait: float
) -> Iterator[engine.StackRef | None]:
    namespace, name = lease
    where = f"{namespace}/{name}"
    timings, settings = LeaderElectionSettings(), EngineSettings()
    with tempfile.TemporaryDirectory(prefix="twc-up-") as tmp:
        channel = GuardChannel(Path(tmp) / "guard", grace=settings.interrupt_grace, leased=True)
        try:
            kube = lease_client(ref, timings)
        except Exception as exc:  # noqa: BLE001 - any failure stops the command with its reason
            print(_refusal(where, exc), file=err)
            yield None
            return
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        with kube:
            elector = guard_elector(
                kube,
                channel,
                name=name,
                namespace=namespace,
                identity=f"{MANUAL_PREFIX}{user}@{socket.gethostname()}:{os.getpid()}",
                timings=timings,
                on_lost=channel.lease_ended,
                yields=False,
            )
            failure = _acquire(elector, where, err, wait)
            if failure is not None:
                with contextlib.suppress(Exception):  # best effort: costs the daemon a round
                    elector.request_handover(withdraw=True)
                print(failure, file=err)
                yield None
                return
            print(
                f"holding the stack's Lease {where} as {elector.identity}: "
                "the daemon waits until this run ends",
                file=err,
            )
            elector.start()
            try:
                with channel.run(settings.deadline):
                    yield ref.with_env({**channel.env(), DAEMON_LEASE_ENV: where})
            finally:  # released only with no engine left
                channel.lease_ended()
                elector.stop(release=channel.wait_idle(settings.interrupt_grace + KILL_MARGIN))


def _acquire(elector: LeaseElector, where: str, err: TextIO, wait: float) -> str | None:
    """Join the election until this run holds the Lease; the reason when it cannot."""
    deadline = time.monotonic() + wait
    told = requested = False
    while True:
        try:
            if elector.try_once():
                elector.round()  # from now on leading (renewed at once)
                return None
            holder = elector.holder
            if holder and not holder.startswith(MANUAL_PREFIX) and not requested:
                requested = elector.request_handover()
        except Exception as exc:  # noqa: BLE001 - any failure stops the command with its reason
            if status_of(exc) != 409:  # a conflict only means someone wrote first: again
                return _refusal(where, exc)
            holder = elector.holder
        if not told:
            who = f"the daemon {holder}" if holder else "the stack's last holder"
            print(
                f"{who} holds the stack's Lease {where}: waiting up to {wait:.0f} s for its "
                "current step to finish",
                file=err,
            )
            told = True
        if time.monotonic() >= deadline:
            return (
                f"the stack's Lease {where} is still held by {holder or 'another run'} after "
                f"{wait:.0f} s: its step is not over; nothing was applied (try again later, "
                "or wait longer with --wait-for-daemon)"
            )
        time.sleep(1.0)


def _refusal(where: str, exc: BaseException) -> str:
    return (
        f"this stack is managed by a daemon (Lease {where}), and this run cannot take part "
        f"in its Lease: {exc}; nothing was applied"
    )
