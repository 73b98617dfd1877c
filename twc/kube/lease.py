"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's protocol): one writer
per stack, provable. A term ends ``renew_deadline`` after its last renewal was sent
(``CLOCK_BOOTTIME``), and the guard kills the engine by then plus ``grace``, before anyone
else may take the Lease. The Lease records each holder's engine host and CLI pids
(``twc.io/engines``) so a new holder breaks only locks of holders proven gone; ``twc up``
asks for a hand-over (``twc.io/handover-to``), granted between engine runs."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from twc.kube.client import NotLeadingError as NotLeadingError
from twc.kube.client import annotations_of, unless_404
from twc.timestamps import boottime, parse_rfc3339, rfc3339_micro

logger = logging.getLogger(__name__)

ENGINES_ANNOTATION = "twc.io/engines"
HANDOVER_ANNOTATION = "twc.io/handover-to"
MANUAL_PREFIX = "manual:"
"""Identities of ``twc up`` runs start with this."""
DAEMON_LEASE_ENV = "TWC_DAEMON_LEASE"
"""``<namespace>/<name>`` of the Lease the engine runs under (exported by the program)."""
DAEMON_LEASE_OUTPUT = "daemonLease"
MAX_RECORDS = 4  # holders whose engine records a Lease keeps
MAX_PIDS = 32  # CLI pids one holder's record keeps
TICK = 0.05  # seconds between the elector thread's checks
HANDOVER_QUIET = 300.0
"""Seconds a leader ignores hand-over requests after one whose taker never renewed."""
MAX_WITNESSED = 8  # holders whose engine records an elector keeps from what it saw


class LeaseTimings(Protocol):
    """The election's timings in seconds (the daemon's ``LeaderElectionSettings``)."""

    @property
    def lease_duration(self) -> float: ...
    @property
    def renew_deadline(self) -> float: ...
    @property
    def retry_period(self) -> float: ...


def call_timeout(timings: LeaseTimings) -> tuple[float, float]:
    """``(connect, read)`` seconds for each Lease call: a round fits the renew deadline."""
    budget = max(0.5, (timings.renew_deadline - timings.retry_period) / 2)
    return (min(5.0, budget), budget)


def lease_name_for(project: str, stack: str) -> str:
    """The default Lease name of a stack: a valid object name from project and stack."""
    raw = f"{project}-{stack}-daemon".lower()
    cleaned = "".join(c if c.isalnum() or c in "-." else "-" for c in raw).strip("-.")
    return cleaned[:253] or "twc-daemon"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease spec's election record (client-go's)."""

    holder: str
    duration: float
    renew_time: str
    acquire_time: str
    transitions: int

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
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
    host: str
    pids: tuple[int, ...] = ()  # newest last


def engine_records(lease: Mapping[str, Any] | None) -> tuple[EngineRecord, ...]:
    """The engine records of a Lease object (none when absent or unreadable)."""
    try:
        data = json.loads(annotations_of(lease).get(ENGINES_ANNOTATION) or "[]")
    except ValueError:
        return ()
    return tuple(
        EngineRecord(
            str(item.get("holder") or ""),
            str(item.get("host") or ""),
            tuple(p for p in _listed(item.get("pids")) if isinstance(p, int)),
        )
        for item in _listed(data)
        if isinstance(item, dict)
    )


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _handover(lease: Mapping[str, Any] | None) -> str:
    return str(annotations_of(lease).get(HANDOVER_ANNOTATION) or "")


class LeaseAction(StrEnum):
    """What a candidate does this round."""

    ACQUIRE = "acquire"
    RENEW = "renew"
    WAIT = "wait"


def lease_action(
    record: LeaseRecord | None,
    *,
    identity: str,
    observed_at: float | None,
    now: float,
    lease_duration: float,
) -> LeaseAction:
    """This round's move; ``observed_at``: when the record was last seen to change (an
    absent Lease, ``record`` ``None``, is taken once absent for ``lease_duration``)."""
    if record is not None and not record.holder:
        return LeaseAction.ACQUIRE
    if record is not None and record.holder == identity:
        return LeaseAction.RENEW
    duration = record.duration if record is not None and record.duration > 0 else lease_duration
    if observed_at is None or now - observed_at < duration:
        return LeaseAction.WAIT
    return LeaseAction.ACQUIRE


@dataclass(frozen=True, slots=True)
class LeaseHooks:
    """What an elector's process gives it: hooks to its owner, its host and its clock."""

    on_renewed: Callable[[float, tuple[int, ...]], None] = lambda _until, _pids: None
    """After each write: the term's end (on ``clock``) and the CLI pids recorded."""
    on_lost: Callable[[], None] = lambda: None
    """The term was lost (another holder, or its time ran out)."""
    on_ended: Callable[[], None] = lambda: None
    """The term ended otherwise (released, handed over, the Lease deleted)."""
    announced: Callable[[], Sequence[int]] = tuple
    """CLI pids waiting to be recorded."""
    may_acquire: Callable[[], bool] = lambda: True
    """Asked before taking a free Lease."""
    host: str = ""
    """Where the engine commands run (this host's name when empty)."""
    clock: Callable[[], float] = boottime


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
        hooks: LeaseHooks | None = None,
        yields: bool = True,
        thread_name: str = "twc-leader",
    ) -> None:
        """Prepare the elector (its client has :func:`call_timeout` timeouts, no retries);
        ``yields``: hand over to a manual run that asks."""
        self._hooks = hooks or LeaseHooks()
        self._api = coordination_api
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.host = self._hooks.host or socket.gethostname()
        self._settings = settings
        self._yields = yields
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._leading = False
        self._renewed_at: float | None = None
        self._observed: LeaseRecord | None = None
        self._observed_at: float | None = None  # set by the first read
        self._witnessed: dict[str, EngineRecord] = {}
        self._handed: tuple[str, float] | None = None  # to whom, and the renew time written
        self._quiet_until = -math.inf
        self._last_round: float | None = None
        self._inherited: tuple[EngineRecord, ...] = ()
        self._recorded: tuple[int, ...] = ()
        self._busy = 0
        self._handover = ""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def is_leader(self) -> bool:
        """Whether this candidate may start engine runs (a valid term, no manual run waits)."""
        with self._lock:
            return self._term_valid() and not self._handover

    def _term_valid(self) -> bool:
        if not self._leading or self._renewed_at is None:
            return False
        return self._hooks.clock() - self._renewed_at < self._settings.renew_deadline

    @property
    def holder(self) -> str:
        """The holder last seen on the Lease (empty when free or never read)."""
        observed = self._observed
        return observed.holder if observed is not None else ""

    def inherited_engines(self) -> tuple[EngineRecord, ...]:
        """Engine records of earlier holders this holder witnessed (proven gone)."""
        with self._lock:
            return self._inherited if self._leading else ()

    def last_round(self) -> float | None:
        """When (on the elector's clock) the last round ended, successful or not."""
        return self._last_round

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Around an engine run: no hand-over during it (NotLeadingError when not leading)."""
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

    def start(self) -> LeaseElector:
        """Run the election in a daemon thread."""
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, *, release: bool = True) -> None:
        """Stop taking part; ``release`` frees the Lease (only once the engine stopped)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            timeout = call_timeout(self._settings)
            self._thread.join(timeout=self._settings.retry_period + 2 * sum(timeout))
        if release and self._leading:
            try:
                self._write_release()
                logger.info("released lease %s/%s", self.namespace, self.name)
            except Exception as exc:  # noqa: BLE001 - the lease then simply expires
                logger.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc)
        with self._lock:
            self._leading = False
        self._hooks.on_ended()

    def try_once(self) -> bool:
        """One round: read, decide, maybe write. Returns whether this candidate leads."""
        lease = self._read()
        record = LeaseRecord.from_lease(lease) if lease is not None else None
        seen = self._hooks.clock()
        if self._observed_at is None or record != self._observed:
            self._observed, self._observed_at = record, seen
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
                self._end_term(lost=True)
            return False
        if action is LeaseAction.ACQUIRE and not self._hooks.may_acquire():
            return False  # free, but this daemon holds its share of Leases already
        wanted = _handover(lease)  # a manual run's, not answered while quiet
        manual = wanted.startswith(MANUAL_PREFIX) and wanted != self.identity
        with self._lock:
            self._handover = wanted if manual and seen >= self._quiet_until else ""
            give_to = self._handover if self._yields and self._busy == 0 else ""
        if action is LeaseAction.RENEW and give_to:
            self._hand_over(lease, record, give_to)
            return False
        inherited = self._inherited
        if action is LeaseAction.ACQUIRE:
            self._taking_back(record, seen)
            inherited = tuple(r for r in self._witnessed.values() if r.holder != self.identity)
        fresh = [p for p in dict.fromkeys(self._hooks.announced()) if p not in self._recorded]
        pids = (*self._recorded, *fresh)[-MAX_PIDS:]
        sent = self._hooks.clock()
        spec = self._spec(self.identity, record, time.time(), renew=action is LeaseAction.RENEW)
        self._write(lease, spec, inherited, pids)
        with self._lock:
            self._renewed_at, self._inherited, self._recorded = sent, inherited, pids
        self._hooks.on_renewed(sent + self._settings.renew_deadline, pids)
        return True

    def _witness(self, lease: Mapping[str, Any] | None, record: LeaseRecord | None) -> None:
        # Keep the holder's engine record, on the host it first named.
        if record is None or not record.holder or record.holder == self.identity:
            return
        found = next((r for r in engine_records(lease) if r.holder == record.holder), None)
        if found is None:
            return
        known = self._witnessed.pop(record.holder, None)
        if known is not None:
            same_host = found.host == known.host
            added = [p for p in found.pids if p not in known.pids] if same_host else []
            found = replace(known, pids=(*known.pids, *added)[-MAX_PIDS:])
        self._witnessed[record.holder] = found
        for holder in list(self._witnessed)[:-MAX_WITNESSED]:
            del self._witnessed[holder]

    def _taking_back(self, record: LeaseRecord | None, now: float) -> None:
        # Taking back a Lease whose taker never renewed: ignore requests for a while.
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

    def request_handover(self, *, withdraw: bool = False) -> bool:
        """As a manual run: ask for (or withdraw) a hand-over; whether the Lease exists."""
        lease = self._read()
        if lease is None or (_handover(lease) == self.identity) != withdraw:
            return lease is not None
        annotations = annotations_of(lease)
        annotations.pop(HANDOVER_ANNOTATION, None)
        if not withdraw:
            annotations[HANDOVER_ANNOTATION] = self.identity
        self._replace(lease, dict(lease.get("spec") or {}), annotations)
        return True

    def round(self) -> bool:
        """One :meth:`try_once`, failures included, and its consequences; whether leading."""
        try:
            leading = self.try_once()
        except Exception as exc:  # noqa: BLE001 - a failed round is retried; losing the lease is decided by time
            logger.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            leading = False
        self._update(leading)
        self._last_round = self._hooks.clock()
        return leading

    def _run(self) -> None:
        next_round = 0.0
        tried: tuple[int, ...] = ()
        while not self._stop.is_set():
            now = self._hooks.clock()
            fresh = tuple(p for p in self._hooks.announced() if p not in self._recorded)
            early = bool(self._leading and fresh and fresh != tried)
            if now >= next_round or early or self._wake.is_set():
                self._wake.clear()
                tried = fresh
                self.round()
                next_round = now + self._settings.retry_period
            elif self._leading and not self._term_valid():
                self._update(False)
            self._wake.wait(max(0.0, min(TICK, next_round - self._hooks.clock())))

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
            self._hooks.on_lost()
        else:
            self._hooks.on_ended()

    def _hand_over(self, lease: Any, record: LeaseRecord | None, to: str) -> None:
        # End the term first, so hold() refuses while the write is on its way.
        with self._lock:
            if self._busy:
                return
            renewed, self._renewed_at = self._renewed_at, None
        self._hooks.on_ended()
        wall = time.time()
        spec = self._spec(to, record, wall, renew=False)
        try:
            self._write(lease, spec, self._inherited, self._recorded)
        except Exception:
            with self._lock:
                self._renewed_at = renewed
            if renewed is not None:
                self._hooks.on_renewed(renewed + self._settings.renew_deadline, self._recorded)
            raise
        with self._lock:
            self._leading, self._handover, self._handed = False, "", (to, wall)
        logger.info("handed lease %s/%s over to %s", self.namespace, self.name, to)

    def _timeout(self) -> dict[str, tuple[float, float]]:
        return {"_request_timeout": call_timeout(self._settings)}

    def _read(self) -> dict[str, Any] | None:
        read = self._api.read_namespaced_lease
        lease = unless_404(read, self.name, self.namespace, **self._timeout())
        return (
            None if lease is None else dict(self._api.api_client.sanitize_for_serialization(lease))
        )

    def _write(
        self,
        lease: dict[str, Any] | None,
        spec: dict[str, Any],
        engines: tuple[EngineRecord, ...],
        pids: tuple[int, ...],
    ) -> None:
        # A term (this candidate's, one handed over, or none: released) with the engine records.
        own = EngineRecord(self.identity, self.host, pids)
        records = [*[r for r in engines if r.holder != self.identity][-(MAX_RECORDS - 1) :], own]
        annotations = annotations_of(lease)
        annotations[ENGINES_ANNOTATION] = json.dumps(
            list(map(asdict, records)), separators=(",", ":")
        )
        if (holder := spec["holderIdentity"]) and annotations.get(HANDOVER_ANNOTATION) == holder:
            annotations.pop(HANDOVER_ANNOTATION)  # granted
        if lease is not None:
            self._replace(lease, spec, annotations)
            return
        meta = {"name": self.name, "namespace": self.namespace, "annotations": annotations}
        body = {"metadata": meta, "spec": spec}
        self._api.create_namespaced_lease(self.namespace, body, **self._timeout())

    def _spec(
        self, holder: str, record: LeaseRecord | None, wall: float, *, renew: bool
    ) -> dict[str, Any]:
        now = rfc3339_micro(wall)
        return {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, math.ceil(self._settings.lease_duration)),
            "renewTime": now,
            "acquireTime": record.acquire_time if renew and record else now,
            "leaseTransitions": (record.transitions if record else 0) + (0 if renew else 1),
        }

    def _replace(
        self, lease: Mapping[str, Any], spec: Mapping[str, Any], annotations: Mapping[str, str]
    ) -> None:
        old = lease.get("metadata") or {}
        keep = ("labels", "ownerReferences", "finalizers")
        metadata = {key: old[key] for key in keep if old.get(key) is not None}
        metadata |= {
            "name": self.name,
            "namespace": self.namespace,
            # Optimistic concurrency: a competing write in between makes this one 409.
            "resourceVersion": old.get("resourceVersion"),
            "annotations": dict(annotations),
        }
        body = {"metadata": metadata, "spec": dict(spec)}
        self._api.replace_namespaced_lease(self.name, self.namespace, body, **self._timeout())

    def _write_release(self) -> None:
        lease = self._read()
        if lease is None or LeaseRecord.from_lease(lease).holder != self.identity:
            return
        spec = {**(lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1}
        spec["renewTime"] = rfc3339_micro(time.time())
        self._write(lease, spec, self._inherited, self._recorded)
