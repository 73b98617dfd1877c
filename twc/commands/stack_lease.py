"""A manual ``twc up`` on a stack the daemon manages takes part in the daemon's Lease.

The daemon's runs export the stack output ``daemonLease`` (``<namespace>/<name>`` of its
Lease). ``twc up`` reads it first; when it is there, the run joins the election with an
identity that says it is a manual run (``manual:<user>@<host>:<pid>``):

* it asks the leading daemon to hand the Lease over and waits, saying so, while the
  daemon finishes its current step (the daemon hands over between steps, never during
  an engine run); after ``wait`` seconds it gives up with a clear message and applies
  nothing;
* while it holds the Lease the daemons are standbys: they start no engine run and never
  break this run's lock; its engine runs under the guard with the Lease's term, exactly
  as the daemon's, and its CLI pids are recorded in the Lease;
* it releases the Lease when the engine is gone, and a daemon takes it back at its next
  round. If the run dies, its Lease expires and the next holder may break its lock,
  which the Lease proves is gone.

``twc shards migrate`` does not take part either: it refuses while a daemon holds the
stack's Lease (:func:`daemon_holder`), since the daemon would go on applying the stack
it moves away.

``twc preview`` does not take part: a preview takes no lock and writes no state, so it
can run beside an ``up`` safely, and making pull-request previews wait for a daemon's
long ``up`` would buy nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from twc.kube.client import read_json, status_of
from twc.kube.lease import (
    DAEMON_LEASE_ENV,
    DAEMON_LEASE_OUTPUT,
    MANUAL_PREFIX,
    LeaseElector,
    LeaseRecord,
    call_timeout,
)
from twc.loop.settings import KILL_MARGIN, EngineSettings, LeaderElectionSettings
from twc.stackrun import engine
from twc.stackrun.guard import GuardChannel
from twc.timestamps import parse_rfc3339

__all__ = [
    "DEFAULT_WAIT",
    "daemon_holder",
    "daemon_lease",
    "guarded",
    "manual_identity",
    "stack_lease",
]

DEFAULT_WAIT = 600.0
"""Seconds ``twc up`` waits for the daemon's current step by default."""


def manual_identity() -> str:
    """This run's identity in the Lease: ``manual:<user>@<host>:<pid>``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{MANUAL_PREFIX}{user}@{socket.gethostname()}:{os.getpid()}"


def daemon_lease(ref: engine.StackRef) -> tuple[str, str] | None:
    """``(namespace, name)`` of the daemon's Lease when the stack's last run exported it.

    Raises:
        Exception: The stack's outputs could not be read (the backend is unreachable).
    """
    outputs = engine.outputs(ref)
    value = outputs.get(DAEMON_LEASE_OUTPUT)
    if not isinstance(value, str) or "/" not in value:
        return None
    namespace, name = value.split("/", 1)
    return namespace, name


def daemon_holder(ref: engine.StackRef) -> str | None:
    """The daemon holding the stack's Lease now, or ``None``: no daemon's Lease, or it
    is released, held by a manual run, or not renewed within its duration.

    Raises:
        Exception: The stack's outputs or its Lease cannot be read.
    """
    from twc.kube.client import kube_client

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
    """``ref`` for a manual engine run, under the guard and, on a stack the daemon
    manages, under the daemon's Lease; ``None`` (after saying why) when the run must not
    start.

    Args:
        ref: The stack, with the run's inputs.
        err: Where the waiting and the reasons are told.
        wait: Seconds to wait for the daemon's current step.
    """
    engine_settings = EngineSettings()
    with tempfile.TemporaryDirectory(prefix="twc-up-") as tmp:
        try:
            lease = daemon_lease(ref)
        except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
            print(f"cannot read the stack's outputs: {exc}; nothing was applied", file=err)
            yield None
            return
        if lease is None:
            with guarded(ref) as plain:
                yield plain
            return
        with _held(ref, lease, Path(tmp), err, wait, engine_settings) as held:
            yield held


@contextmanager
def guarded(ref: engine.StackRef) -> Iterator[engine.StackRef]:
    """``ref`` for one engine run outside any Lease (``twc preview``, or ``twc up`` on a
    stack no daemon manages): under the guard, with the engine deadline."""
    engine_settings = EngineSettings()
    with tempfile.TemporaryDirectory(prefix="twc-run-") as tmp:
        channel = GuardChannel(Path(tmp) / "guard", grace=engine_settings.interrupt_grace)
        with channel.run(engine_settings.deadline):
            yield _with_env(ref, channel.env())


@contextmanager
def _held(
    ref: engine.StackRef,
    lease: tuple[str, str],
    tmp: Path,
    err: TextIO,
    wait: float,
    engine_settings: EngineSettings,
) -> Iterator[engine.StackRef | None]:
    from twc.kube.client import kube_client

    namespace, name = lease
    where = f"{namespace}/{name}"
    timings = LeaderElectionSettings()
    channel = GuardChannel(tmp / "guard", grace=engine_settings.interrupt_grace, leased=True)
    try:
        kube = kube_client(
            (ref.env or {}).get("KUBECONFIG"), timeout=call_timeout(timings), retries=0
        )
    except Exception as exc:  # noqa: BLE001 - any failure stops the command with its reason
        print(_refusal(where, exc), file=err)
        yield None
        return
    with kube:
        elector = LeaseElector(
            kube.coordination,
            name=name,
            namespace=namespace,
            identity=manual_identity(),
            settings=timings,
            on_lost=channel.lease_ended,
            on_renewed=channel.lease_renewed,
            on_ended=channel.lease_ended,
            announced=channel.announced,
            yields=False,
        )
        failure = _acquire(elector, where, err, wait)
        if failure is not None:
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
            env = {**channel.env(), DAEMON_LEASE_ENV: where}
            with channel.run(engine_settings.deadline):
                yield _with_env(ref, env)
        finally:
            # Only with no engine left: releasing ends the proof that it is gone.
            channel.lease_ended()
            idle = channel.wait_idle(engine_settings.interrupt_grace + KILL_MARGIN)
            elector.stop(release=idle)


def _acquire(elector: LeaseElector, where: str, err: TextIO, wait: float) -> str | None:
    """Join the election until this run holds the Lease; the reason when it cannot."""
    deadline = time.monotonic() + wait
    told = requested = False
    retry = 1.0
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
                with contextlib.suppress(Exception):  # best effort: costs the daemon a round
                    elector.withdraw_handover()
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
            with contextlib.suppress(Exception):  # best effort: costs the daemon a round
                elector.withdraw_handover()
            return (
                f"the stack's Lease {where} is still held by {holder or 'another run'} after "
                f"{wait:.0f} s: its step is not over; nothing was applied (try again later, "
                "or wait longer with --wait-for-daemon)"
            )
        time.sleep(retry)


def _refusal(where: str, exc: BaseException) -> str:
    return (
        f"this stack is managed by a daemon (Lease {where}), and this run cannot take part "
        f"in its Lease: {exc}; nothing was applied"
    )


def _with_env(ref: engine.StackRef, extra: dict[str, str]) -> engine.StackRef:
    return dataclasses.replace(ref, env={**(ref.env or {}), **extra})
