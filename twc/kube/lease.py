"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it, plus what
makes one writer per stack provable.

With ``--leader-elect`` only the daemon holding the Lease applies the stack; the others
wait as hot standbys. The protocol is client-go's ``leaderelection``: a candidate takes
the Lease when it is free or when its record has not changed for the Lease's own
``leaseDurationSeconds`` *as observed on the candidate's own clock* (so clock skew
between pods does not matter); the leader renews every ``retry_period`` and stops
leading when it could not renew for ``renew_deadline``. Writes carry the
``resourceVersion`` they read, so two candidates can never both win the same round.

**Why two engines never overlap.** Let the leader's last successful renewal be sent at
``t``. Every other candidate first sees that record at or after the server wrote it, so
it cannot take the Lease before ``t + lease_duration``. The leader's :meth:`is_leader`
turns false at ``t + renew_deadline`` by time alone (no call needs to return), and its
engine guard (:mod:`twc.stackrun.guard`) is told the same moment as the end of the term
(``on_renewed``): it interrupts the engine then and kills what is left ``grace`` seconds
later, even if the daemon is stopped or hung. The settings require
``renew_deadline + grace + margin < lease_duration``, so the old engine is dead before
anyone else may start one. Each call of a round has a timeout shorter than the renew
deadline and is not retried, so a hung API server fails rounds instead of hiding them.

**Whose lock is it.** A killed run leaves the backend's lock, naming the CLI's host and
pid. The Lease records, in the annotation ``twc.io/engines``, the host and CLI pids of
each holder's engine commands, written *before* a command starts (the guard waits for
it). A new holder keeps the records it inherited, so it can break exactly the locks of
holders the Lease proves gone, and no one else's (a ``twc up`` on a laptop that does not
take part in the Lease, for one).

**Manual runs.** ``twc up`` on a stack the daemon manages takes part in the same Lease
with an identity ``manual:<user>@<host>:<pid>``. It asks the leader to hand the Lease
over (annotation ``twc.io/handover-to``); the leader does so between steps, never
during an engine run (:meth:`LeaseElector.hold`), and takes it back after the manual
run released it.

**The Lease is input, not trust.** Whoever may edit Leases must not be able to make two
writers or stall the daemon:

* a deleted Lease ends the holder's term at its next round (it competes again), and a
  candidate takes an absent Lease only after seeing it absent for the lease duration,
  as it would an expired one: the deletion erased the proof of who held it;
* a new holder inherits only engine records it *witnessed*: written for a holder it saw
  hold the Lease, at a round where that holder's record changed, on the host that
  holder first named. A record edited in later, or naming another host for a known
  holder, is ignored, so no lock is ever broken on the Lease's word alone;
* only ``manual:`` identities may ask for a hand-over, and after one whose taker never
  renewed (nobody was there to take it), requests are ignored for
  :data:`HANDOVER_QUIET`: a stream of forged requests costs at most one lease duration
  in that time.

Terms are measured on ``CLOCK_BOOTTIME`` (:func:`~twc.timestamps.boottime`), which
counts the time a host was suspended: a laptop that sleeps mid-term wakes with its term
over, and its engine guard stops the engine before anything else is written.

:func:`lease_action` holds the decision and is pure (time is an argument).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from twc.timestamps import boottime, parse_rfc3339, rfc3339_micro

__all__ = [
    "DAEMON_LEASE_ENV",
    "DAEMON_LEASE_OUTPUT",
    "ENGINES_ANNOTATION",
    "HANDOVER_ANNOTATION",
    "MANUAL_PREFIX",
    "EngineRecord",
    "LeaseAction",
    "LeaseElector",
    "LeaseRecord",
    "LeaseTimings",
    "NotLeadingError",
    "call_timeout",
    "engine_records",
    "lease_action",
    "lease_name_for",
]

logger = logging.getLogger(__name__)

ENGINES_ANNOTATION = "twc.io/engines"
"""JSON list of :class:`EngineRecord`: whose engine commands ran where."""
HANDOVER_ANNOTATION = "twc.io/handover-to"
"""The identity of a manual run waiting for the leader to hand the Lease over."""
MANUAL_PREFIX = "manual:"
"""Identities of ``twc up`` runs start with this."""
DAEMON_LEASE_ENV = "TWC_DAEMON_LEASE"
"""``<namespace>/<name>`` of the Lease the engine's caller runs under; the program
exports it as :data:`DAEMON_LEASE_OUTPUT`, so a later ``twc up`` knows the stack is
managed by a daemon and which Lease to take part in."""
DAEMON_LEASE_OUTPUT = "daemonLease"
"""The stack output naming the daemon's Lease."""
MAX_RECORDS = 4
"""Holders whose engine records a Lease keeps (the newest)."""
MAX_PIDS = 32
"""CLI pids one holder's record keeps (the newest)."""
TICK = 0.05
"""Seconds between the elector thread's checks (new engine commands, the deadline)."""
HANDOVER_QUIET = 300.0
"""Seconds a leader ignores hand-over requests after one whose taker never renewed."""
MAX_WITNESSED = 8
"""Holders whose engine records an elector keeps from what it saw (the newest)."""


class LeaseTimings(Protocol):
    """The election's timings (the daemon's ``LeaderElectionSettings``)."""

    @property
    def lease_duration(self) -> float:
        """Seconds a non-leader waits after the last renewal before taking the lease."""
        ...

    @property
    def renew_deadline(self) -> float:
        """Seconds the leader keeps retrying a renewal before it stops leading."""
        ...

    @property
    def retry_period(self) -> float:
        """Seconds between attempts to acquire or renew."""
        ...


def call_timeout(timings: LeaseTimings) -> tuple[float, float]:
    """``(connect, read)`` seconds for each Lease call.

    A round is a read and a write; both must fit before the renew deadline with a retry
    period to spare, so a hung API server fails the round (and the next ones) in time
    for the leader to stop at its deadline instead of inside a blocked call.
    """
    budget = max(0.5, (timings.renew_deadline - timings.retry_period) / 2)
    return (min(5.0, budget), budget)


def lease_name_for(project: str, stack: str) -> str:
    """The default Lease name of a stack: a valid object name from project and stack."""
    raw = f"{project}-{stack}-daemon".lower()
    cleaned = "".join(c if c.isalnum() or c in "-." else "-" for c in raw).strip("-.")
    return cleaned[:253] or "twc-daemon"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What the Lease's spec says, as far as the election cares (client-go's record)."""

    holder: str
    """``spec.holderIdentity``; empty when released."""
    duration: float
    """``spec.leaseDurationSeconds``."""
    renew_time: str
    """``spec.renewTime`` as written; compared for change, never parsed."""
    acquire_time: str
    """``spec.acquireTime`` as written."""
    transitions: int
    """``spec.leaseTransitions``."""

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        """Read the record from a Lease object (camelCase dict)."""
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=float(spec.get("leaseDurationSeconds") or 0),
            renew_time=str(spec.get("renewTime") or ""),
            acquire_time=str(spec.get("acquireTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """One holder's engine commands: where they ran and the CLI pids the locks name."""

    holder: str
    """The holder's identity."""
    host: str
    """The host name its engine runs on (what the backend's lock records)."""
    pids: tuple[int, ...] = ()
    """The CLI pids of its engine commands, newest last."""

    def to_json(self) -> dict[str, Any]:
        """The annotation's form."""
        return {"holder": self.holder, "host": self.host, "pids": list(self.pids)}

    @classmethod
    def from_json(cls, data: Any) -> EngineRecord | None:
        """Read one entry; ``None`` when it is not one."""
        if not isinstance(data, dict):
            return None
        pids = data.get("pids")
        return cls(
            holder=str(data.get("holder") or ""),
            host=str(data.get("host") or ""),
            pids=tuple(p for p in pids if isinstance(p, int)) if isinstance(pids, list) else (),
        )


def engine_records(lease: Mapping[str, Any] | None) -> tuple[EngineRecord, ...]:
    """The engine records of a Lease object (none when absent or unreadable)."""
    annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    try:
        data = json.loads(annotations.get(ENGINES_ANNOTATION) or "[]")
    except ValueError:
        return ()
    found = [EngineRecord.from_json(item) for item in data] if isinstance(data, list) else []
    return tuple(r for r in found if r is not None)


def _handover(lease: Mapping[str, Any] | None) -> str:
    annotations = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(HANDOVER_ANNOTATION) or "")


class LeaseAction(StrEnum):
    """What a candidate does this round."""

    ACQUIRE = "acquire"
    """Write the Lease with itself as holder (it is free or expired)."""
    RENEW = "renew"
    """It already holds the Lease: write a new renew time."""
    WAIT = "wait"
    """Someone else holds a live Lease."""


def lease_action(
    record: LeaseRecord | None,
    *,
    identity: str,
    observed_at: float | None,
    now: float,
    lease_duration: float,
) -> LeaseAction:
    """Decide this round's move.

    Args:
        record: The Lease's record, or ``None`` if the Lease does not exist (it is taken
            once absent for ``lease_duration``: it may have been deleted under a
            holder whose term still runs).
        identity: This candidate's identity.
        observed_at: When (on this candidate's clock) the record was last seen
            to change; ``None`` if it was never seen.
        now: The current time on the same clock.
        lease_duration: This candidate's own lease duration, used only when the record
            names none: the holder's ``leaseDurationSeconds`` is what counts.

    Returns:
        The action.
    """
    if record is not None and not record.holder:
        return LeaseAction.ACQUIRE
    if record is not None and record.holder == identity:
        return LeaseAction.RENEW
    duration = record.duration if record is not None and record.duration > 0 else lease_duration
    if observed_at is None or now - observed_at < duration:
        # Someone else's record, seen changing within its duration (or just now for the
        # first time: give its holder a full duration to renew).
        return LeaseAction.WAIT
    return LeaseAction.ACQUIRE


class NotLeadingError(RuntimeError):
    """An engine run was about to start without a valid term."""


class LeaseElector:
    """Takes part in the election for one Lease from a background thread."""

    def __init__(
        self,
        coordination_api: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        settings: LeaseTimings,
        on_lost: Callable[[], None] = lambda: None,
        on_renewed: Callable[[float, tuple[int, ...]], None] = lambda _until, _pids: None,
        on_ended: Callable[[], None] = lambda: None,
        announced: Callable[[], Sequence[int]] = tuple,
        host: str | None = None,
        yields: bool = True,
        clock: Callable[[], float] = boottime,
        wall: Callable[[], float] = time.time,
        may_acquire: Callable[[], bool] = lambda: True,
        thread_name: str = "twc-leader",
    ) -> None:
        """Prepare the elector.

        Args:
            coordination_api: A ``kubernetes.client.CoordinationV1Api`` whose client has
                :func:`call_timeout` timeouts and no retries.
            name: The Lease's name.
            namespace: The Lease's namespace.
            identity: This candidate's identity (unique per process).
            settings: Lease duration, renew deadline and retry period.
            on_lost: Called (from the elector thread) when leadership is lost.
            on_renewed: Called after each successful write with the end of the term
                (on ``clock``) and the CLI pids the Lease now records (the engine guard's
                control).
            on_ended: Called when the term ends without a loss (handed over, released).
            announced: The CLI pids of engine commands waiting to be recorded.
            host: The host name the engine runs on (default: this host's).
            yields: Whether to hand the Lease over to a manual run that asks.
            clock: The host's boot time clock (counts suspended time).
            wall: Unix time, for the timestamps written into the Lease.
            may_acquire: Asked before taking a free or expired Lease (never before a
                renewal): a daemon sharing many shards' Leases with other replicas
                takes no more than its share.
            thread_name: The election thread's name. ``twc-*`` threads are the daemon's
                roots (their end ends the daemon); a shard's elector, which is replaced
                when it hands its Lease back, is not one.
        """
        self._api = coordination_api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.host = host or socket.gethostname()
        self._settings = settings
        self._on_lost = on_lost
        self._on_renewed = on_renewed
        self._on_ended = on_ended
        self._announced = announced
        self._yields = yields
        self._clock = clock
        self._wall = wall
        self._may_acquire = may_acquire
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._leading = False
        self._renewed_at: float | None = None
        self._observed: LeaseRecord | None = None
        self._observed_at: float | None = None
        self._read_once = False
        self._witnessed: dict[str, EngineRecord] = {}
        self._handed: tuple[str, float] | None = None
        """Whom this elector last handed the Lease to, and the renew time it wrote."""
        self._quiet_until = -math.inf
        self._last_round: float | None = None
        self._inherited: tuple[EngineRecord, ...] = ()
        self._recorded: tuple[int, ...] = ()
        self._busy = 0
        self._handover = ""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ queries
    def is_leader(self) -> bool:
        """Whether this candidate may start engine runs: it holds a Lease it renewed
        within the renew deadline, and no manual run waits for it."""
        with self._lock:
            return self._term_valid() and not self._handover

    def _term_valid(self) -> bool:
        if not self._leading or self._renewed_at is None:
            return False
        return self._clock() - self._renewed_at < self._settings.renew_deadline

    @property
    def holder(self) -> str:
        """The holder last seen on the Lease (empty when free or never read)."""
        observed = self._observed
        return observed.holder if observed is not None else ""

    @property
    def waiting(self) -> str:
        """The manual run waiting for this leader to hand over, if any."""
        return self._handover

    def inherited_engines(self) -> tuple[EngineRecord, ...]:
        """Engine records of earlier holders this candidate witnessed, taken over with
        the Lease: the Lease proves each of them gone (it expired, or they released or
        handed it over)."""
        with self._lock:
            return self._inherited if self._leading else ()

    def last_round(self) -> float | None:
        """When (on the elector's clock) the last round ended, successful or not."""
        return self._last_round

    def thread(self) -> threading.Thread | None:
        """The election's thread, once started."""
        return self._thread

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Around an engine operation: the Lease is never handed over during it.

        Raises:
            NotLeadingError: This candidate may not start an engine run now.
        """
        with self._lock:
            if not self._term_valid():
                raise NotLeadingError(f"not holding the lease {self.namespace}/{self.name}")
            if self._handover:
                raise NotLeadingError(f"{self._handover} waits for the lease: not starting")
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
            if self._handover:
                self._wake.set()

    # ------------------------------------------------------------ running
    def start(self) -> LeaseElector:
        """Run the election in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, *, release: bool = True) -> None:
        """Stop taking part; with ``release``, hand the Lease back so a standby takes
        over at once instead of after the lease duration.

        The caller must have stopped its engine first: releasing ends the proof that
        this holder's engine is gone.
        """
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self._settings.retry_period + 2 * sum(self._timeout()))
        if release and self._leading:
            try:
                self._write_release()
                logger.info("released lease %s/%s", self.namespace, self.name)
            except Exception as exc:  # noqa: BLE001 - the lease then simply expires
                logger.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        with self._lock:
            self._leading = False
        self._on_ended()

    def try_once(self) -> bool:
        """One round: read, decide, maybe write. Returns whether this candidate leads."""
        lease = self._read()
        record = LeaseRecord.from_lease(lease) if lease is not None else None
        seen = self._clock()
        if not self._read_once or record != self._observed:
            # After the read returned: the record was written before this moment, so
            # counting the lease duration from here is never too early.
            self._observed, self._observed_at, self._read_once = record, seen, True
            self._witness(lease, record)
        if record is None and self._leading:
            logger.warning("lease %s/%s was deleted: this term ends now", self.namespace, self.name)
            self._end_term(lost=False)
            return False
        action = lease_action(
            record,
            identity=self.identity,
            observed_at=self._observed_at,
            now=seen,
            lease_duration=self._settings.lease_duration,
        )
        if action is LeaseAction.WAIT:
            if self._leading:
                # Someone else holds it: whatever the clock says, this term is over.
                self._end_term(lost=True)
            return False
        if action is LeaseAction.ACQUIRE and not self._may_acquire():
            return False  # free, but this daemon holds its share of Leases already
        with self._lock:
            self._handover = self._requested(lease, seen)
            give_to = self._handover if self._yields and self._busy == 0 else ""
        if action is LeaseAction.RENEW and give_to:
            self._hand_over(lease, record, give_to)
            return False
        inherited = self._inherited
        if action is LeaseAction.ACQUIRE:
            self._taking_back(record, seen)
            inherited = tuple(r for r in self._witnessed.values() if r.holder != self.identity)
        pids = self._pids_to_record()
        sent = self._clock()
        self._write(lease, record, renew=action is LeaseAction.RENEW, engines=inherited, pids=pids)
        with self._lock:
            self._renewed_at = sent
            self._inherited = inherited
            self._recorded = pids
        self._on_renewed(sent + self._settings.renew_deadline, pids)
        return True

    def _witness(self, lease: Mapping[str, Any] | None, record: LeaseRecord | None) -> None:
        """At a round where the holder's record changed: keep its engine record, on the
        host it first named, with the pids it added since."""
        if record is None or not record.holder or record.holder == self.identity:
            return
        found = next((r for r in engine_records(lease) if r.holder == record.holder), None)
        if found is None:
            return
        known = self._witnessed.pop(record.holder, None)
        if known is not None:
            added = (
                [p for p in found.pids if p not in known.pids] if found.host == known.host else []
            )
            found = replace(known, pids=(*known.pids, *added)[-MAX_PIDS:])
        self._witnessed[record.holder] = found
        for holder in list(self._witnessed)[:-MAX_WITNESSED]:
            del self._witnessed[holder]

    def _requested(self, lease: Mapping[str, Any] | None, now: float) -> str:
        """The hand-over request this leader honours: a manual run's, outside the quiet
        time after a hand-over nobody took."""
        wanted = _handover(lease)
        if wanted == self.identity or not wanted.startswith(MANUAL_PREFIX):
            return ""
        return wanted if now >= self._quiet_until else ""

    def _taking_back(self, record: LeaseRecord | None, now: float) -> None:
        """Acquiring: if the Lease is still as this elector handed it over (its taker never
        renewed), the request was nobody's: ignore requests for a while."""
        handed, self._handed = self._handed, None
        if handed is not None and record is not None and record.holder == handed[0]:
            try:
                renewed = abs(parse_rfc3339(record.renew_time) - handed[1]) > 0.001
            except ValueError:
                renewed = True
            if renewed:
                return
            self._quiet_until = now + HANDOVER_QUIET
            logger.warning(
                "lease %s/%s: %s never took the lease handed over to it; hand-over "
                "requests are ignored for %g s",
                self.namespace,
                self.name,
                handed[0],
                HANDOVER_QUIET,
            )

    def request_handover(self) -> bool:
        """As a manual run: ask the current holder to hand the Lease over between its
        steps. Returns whether the request is on the Lease."""
        lease = self._read()
        if lease is None or _handover(lease) == self.identity:
            return lease is not None
        annotations = dict((lease.get("metadata") or {}).get("annotations") or {})
        annotations[HANDOVER_ANNOTATION] = self.identity
        self._replace(lease, dict(lease.get("spec") or {}), annotations)
        return True

    def withdraw_handover(self) -> None:
        """As a manual run that gives up waiting: take the request off the Lease."""
        lease = self._read()
        if lease is None or _handover(lease) != self.identity:
            return
        annotations = dict((lease.get("metadata") or {}).get("annotations") or {})
        annotations.pop(HANDOVER_ANNOTATION, None)
        self._replace(lease, dict(lease.get("spec") or {}), annotations)

    def round(self) -> bool:
        """One round (:meth:`try_once`), a failure included, and its consequences:
        leading from now on, or the term lost. Returns whether this candidate leads."""
        try:
            leading = self.try_once()
        except Exception as exc:  # noqa: BLE001 - a failed round is retried; losing the lease is decided by time
            logger.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            leading = False
        self._update(leading)
        self._last_round = self._clock()
        return leading

    def _run(self) -> None:
        next_round = 0.0
        tried: tuple[int, ...] = ()
        while not self._stop.is_set():
            now = self._clock()
            fresh = tuple(p for p in self._announced() if p not in self._recorded)
            # A new engine command waits for its pid to be recorded: write at once.
            early = bool(self._leading and fresh and fresh != tried)
            if now >= next_round or early or self._wake.is_set():
                self._wake.clear()
                tried = fresh
                self.round()
                next_round = now + self._settings.retry_period
            elif self._leading and not self._term_valid():
                self._update(False)
            self._wake.wait(max(0.0, min(TICK, next_round - self._clock())))

    def _update(self, succeeded: bool) -> None:
        with self._lock:
            if succeeded and not self._leading:
                self._leading = True
                logger.info("acquired lease %s/%s as %s", self.namespace, self.name, self.identity)
                return
            expired = self._leading and not succeeded and not self._term_valid()
        if expired:
            self._end_term(lost=True)

    def _end_term(self, *, lost: bool) -> None:
        with self._lock:
            if not self._leading:
                return
            self._leading = False
        if lost:
            logger.error("lost lease %s/%s", self.namespace, self.name)
            self._on_lost()
        else:
            self._on_ended()

    def _pids_to_record(self) -> tuple[int, ...]:
        pids = list(self._recorded)
        for pid in self._announced():
            if pid not in pids:
                pids.append(pid)
        return tuple(pids[-MAX_PIDS:])

    def _hand_over(self, lease: Any, record: LeaseRecord | None, to: str) -> None:
        # Under the lock the engine runs' counter was 0: mark the term over first, so no
        # engine run starts (hold() refuses) while the write is on its way.
        with self._lock:
            if self._busy:
                return
            renewed, self._renewed_at = self._renewed_at, None
        self._on_ended()
        wall = self._wall()
        now = rfc3339_micro(wall)
        spec = {
            "holderIdentity": to,
            "leaseDurationSeconds": max(1, math.ceil(self._settings.lease_duration)),
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": (record.transitions if record else 0) + 1,
        }
        mine = EngineRecord(self.identity, self.host, self._recorded)
        annotations = dict((lease.get("metadata") or {}).get("annotations") or {})
        annotations.pop(HANDOVER_ANNOTATION, None)
        annotations[ENGINES_ANNOTATION] = _engines_json(self._inherited, mine)
        try:
            self._replace(lease, spec, annotations)
        except Exception:
            # Still the holder (the last renewal stands): the term goes on until then.
            with self._lock:
                self._renewed_at = renewed
            if renewed is not None:
                self._on_renewed(renewed + self._settings.renew_deadline, self._recorded)
            raise
        with self._lock:
            self._leading = False
            self._handover = ""
            self._handed = (to, wall)
        logger.info("handed lease %s/%s over to %s", self.namespace, self.name, to)

    # ------------------------------------------------------------- calls
    def _timeout(self) -> tuple[float, float]:
        return call_timeout(self._settings)

    def _read(self) -> dict[str, Any] | None:
        try:
            lease = self._api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout()
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise
        return dict(self._api.api_client.sanitize_for_serialization(lease))

    def _write(
        self,
        lease: dict[str, Any] | None,
        record: LeaseRecord | None,
        *,
        renew: bool,
        engines: tuple[EngineRecord, ...],
        pids: tuple[int, ...],
    ) -> None:
        now = rfc3339_micro(self._wall())
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self._settings.lease_duration)),
            "renewTime": now,
            "acquireTime": record.acquire_time if renew and record else now,
            "leaseTransitions": (record.transitions if record else 0) + (0 if renew else 1),
        }
        mine = EngineRecord(self.identity, self.host, pids)
        if lease is None:
            body = {
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "annotations": {ENGINES_ANNOTATION: _engines_json(engines, mine)},
                },
                "spec": spec,
            }
            self._api.create_namespaced_lease(
                self.namespace, body, _request_timeout=self._timeout()
            )
            return
        annotations = dict((lease.get("metadata") or {}).get("annotations") or {})
        annotations[ENGINES_ANNOTATION] = _engines_json(engines, mine)
        if annotations.get(HANDOVER_ANNOTATION) == self.identity:
            annotations.pop(HANDOVER_ANNOTATION)  # granted
        self._replace(lease, spec, annotations)

    def _replace(
        self, lease: Mapping[str, Any], spec: Mapping[str, Any], annotations: Mapping[str, str]
    ) -> None:
        old = dict(lease.get("metadata") or {})
        metadata = {
            key: old[key]
            for key in ("labels", "ownerReferences", "finalizers")
            if old.get(key) is not None
        }
        metadata.update(
            {
                "name": self.name,
                "namespace": self.namespace,
                # Optimistic concurrency: a competing write in between makes this one 409.
                "resourceVersion": old.get("resourceVersion"),
                "annotations": dict(annotations),
            }
        )
        self._api.replace_namespaced_lease(
            self.name,
            self.namespace,
            {"metadata": metadata, "spec": dict(spec)},
            _request_timeout=self._timeout(),
        )

    def _write_release(self) -> None:
        lease = self._read()
        if lease is None or LeaseRecord.from_lease(lease).holder != self.identity:
            return
        spec = dict(lease.get("spec") or {})
        spec.update(
            {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": rfc3339_micro(self._wall()),
            }
        )
        annotations = dict((lease.get("metadata") or {}).get("annotations") or {})
        mine = EngineRecord(self.identity, self.host, self._recorded)
        annotations[ENGINES_ANNOTATION] = _engines_json(self._inherited, mine)
        self._replace(lease, spec, annotations)


def _engines_json(inherited: Sequence[EngineRecord], mine: EngineRecord) -> str:
    records = [r for r in inherited if r.holder != mine.holder]
    records = [*records[-(MAX_RECORDS - 1) :], mine]
    return json.dumps([r.to_json() for r in records], separators=(",", ":"))
