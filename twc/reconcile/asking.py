"""The daemon's one Temporal querier: backlogs and pollers, under one request budget.

An :class:`Asker` hands a loop's due questions to its :class:`AskerThread` and returns at
once (backlog samples: within :data:`SAMPLE_WAIT`, so the asking iteration scales on them);
a later answer that says something new wakes the loop. Every question keeps to the
process's one :class:`Budget`, at most :data:`SAMPLE_CONCURRENCY` at once per loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import timedelta
from typing import Any, NamedTuple, Protocol

from twc.connections import ResolvedConnection, default_registry, poller_failure
from twc.errors import Reason, TwcConnectionError
from twc.spec import ConnectionTarget, Fleet, ResolvedWorker
from twc.versioning import Backlog as Backlog
from twc.versioning import SecretReader as SecretReader

logger = logging.getLogger(__name__)

SAMPLE_CONCURRENCY = 8
"""Most questions to Temporal in flight at once, per loop."""
RATE_PER_S = 40.0
"""Questions per second one daemon process asks Temporal, on average."""
BURST = 50
"""Questions asked back to back before that rate applies."""
FIRST_RESERVE = BURST / 2
"""Questions' worth of the budget a re-ask leaves for first questions (new workers)."""
SAMPLE_WAIT = 0.25
"""Seconds an iteration waits for the backlog samples it asked for."""
POLLERS_DEADLINE = 2.0
"""Seconds one poller question may take; unanswered, it is asked again when next due."""


class TaskQueueRef(NamedTuple):
    """A task queue to ask about; workers on one queue share a question (a tuple: hashed and
    compared at C speed, as every iteration looks up each worker's)."""

    namespace: str
    name: str
    connection: str = ""  # opaque outside TemporalBacklogs: which client asks

    def __str__(self) -> str:
        prefix = f"{self.connection}:" if self.connection else ""
        return f"{prefix}{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    """One answer: ``value`` or ``error``, when it came (monotonic ``at``, Unix ``wall``)."""

    value: Any
    error: Exception | None = dataclasses.field(default=None, compare=False)
    at: float = 0.0
    wall: float = 0.0
    repeats: int = 0

    @property
    def ok(self) -> bool:
        """Whether the question was answered without an error."""
        return self.error is None


class Budget:
    """A token bucket: ``burst`` questions back to back, then ``rate_per_s`` on average."""

    def __init__(
        self,
        rate_per_s: float = RATE_PER_S,
        *,
        burst: int = BURST,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError(f"need rate_per_s > 0 and burst >= 1, got {rate_per_s}, {burst}")
        self._rate, self._burst, self._tokens = rate_per_s, burst, float(burst)
        self._clock, self._sleep = clock, sleep
        self._updated: float | None = None
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        if self._updated is not None and now > self._updated:
            self._tokens = min(self._burst, self._tokens + (now - self._updated) * self._rate)
        self._updated = now if self._updated is None else max(self._updated, now)

    def take(self, wanted: int, keep: float = 0.0) -> int:
        """Take up to ``wanted`` tokens now, leaving ``keep``; how many."""
        with self._lock:
            self._refill()
            allowed = max(0, min(wanted, int(self._tokens - keep)))
            self._tokens -= allowed
            return allowed

    def reserve(self) -> float:
        """Take a token now; seconds to wait before using it."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            wait = -self._tokens / self._rate
        return 0.0 if wait < 1e-9 else wait  # refill arithmetic leaves float dust

    async def acquire(self) -> None:
        """Return when one more question fits the budget."""
        wait = self.reserve()
        if wait > 0:
            await self._sleep(wait)


async def ask_all(
    refs: Iterable[TaskQueueRef],
    question: Callable[[TaskQueueRef], Awaitable[Any]],
    *,
    limiter: Budget | None = None,
    concurrency: int = SAMPLE_CONCURRENCY,
    deadline: float | None = None,
    answered: Callable[[TaskQueueRef, Answer | None], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> dict[TaskQueueRef, Answer]:
    """Ask ``question`` about each distinct queue, ``concurrency`` at a time in ``limiter``."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    slots = asyncio.Semaphore(concurrency)

    async def one(ref: TaskQueueRef) -> Answer | None:
        async with slots:
            # The token inside the slot: one taken while waiting would break the budget.
            if limiter is not None:
                await limiter.acquire()
            answer: Answer | None
            try:
                answer = Answer(
                    await asyncio.wait_for(question(ref), deadline), None, clock(), wall()
                )
            except TimeoutError as exc:
                answer = None if deadline is not None else Answer(None, exc, clock(), wall())
            except Exception as exc:  # noqa: BLE001 - one queue failing hides no other
                answer = Answer(None, exc, clock(), wall())
        if answered is not None:
            answered(ref, answer)
        return answer

    async with asyncio.TaskGroup() as group:
        tasks = {ref: group.create_task(one(ref)) for ref in dict.fromkeys(refs)}
    return {ref: a for ref, task in tasks.items() if (a := task.result()) is not None}


def import_temporal() -> None:
    """Import temporalio's modules from one thread (concurrent imports can half-initialise)."""
    import temporalio.api.enums.v1
    import temporalio.api.taskqueue.v1
    import temporalio.api.workflowservice.v1
    import temporalio.client
    import temporalio.service  # noqa: F401 - imported for its side effect


class BacklogSource(Protocol):
    """What the loop asks Temporal; :class:`TemporalBacklogs` implements it."""

    def refs(self, fleet: Fleet, workers: Iterable[ResolvedWorker]) -> dict[str, TaskQueueRef]:
        """Per worker key, its task queue."""
        ...

    async def describe(self, ref: TaskQueueRef) -> Backlog:
        """One task queue's backlog."""
        ...


class TemporalBacklogs:
    """Backlogs and pollers read from Temporal through each worker's own connection."""

    def __init__(
        self,
        *,
        read_secret: SecretReader | None = None,
        temporal_address: str | None = None,
    ) -> None:
        self._read_secret = read_secret
        self._address = temporal_address
        self._connections: dict[str, tuple[ResolvedConnection, str | None, bool]] = {}
        self._sleepers: set[TaskQueueRef] = set()  # with minReplicas 0

    def refs(self, fleet: Fleet, workers: Iterable[ResolvedWorker]) -> dict[str, TaskQueueRef]:
        """Resolve each worker's connection and name its task queue."""

        @functools.cache  # once per connection and namespace (a target's is its worker's)
        def connection(to: ConnectionTarget) -> str:
            resolved = default_registry().resolve(to, fleet)
            conn = resolved.for_twc()
            if self._address:
                conn = dataclasses.replace(conn, host_port=self._address)
            ns = conn.secret_source_namespace or conn.identity.namespace or to.namespace
            secret_ns = ns if conn.secret_name is not None else None
            conn_id = f"{conn.identity}@{conn.host_port}@{secret_ns or ''}"
            self._connections[conn_id] = (conn, secret_ns, resolved.twc is not None)
            return conn_id

        out: dict[str, TaskQueueRef] = {}
        for worker in workers:
            conn_id = connection(worker.connection)
            ref = TaskQueueRef(worker.temporal_namespace, worker.task_queue_name, conn_id)
            out[worker.stack_key] = ref
            sleeps = worker.autoscaling is not None and worker.autoscaling.min_replicas == 0
            (self._sleepers.add if sleeps else self._sleepers.discard)(ref)
        return out

    async def _describe(
        self, ref: TaskQueueRef, types: Sequence[str], stats: bool
    ) -> tuple[Any, list[Any]]:
        """The client of ``ref``'s connection and its answers; a credential failure is
        named as twc's own (``TwcCredentialInvalid``) where the connection gives twc one."""
        from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
        from temporalio.service import RPCError

        found = self._connections.get(ref.connection)
        if found is None:
            raise LookupError(f"no connection known for {ref}")
        conn, secret_ns, own = found
        try:
            secret_data = None
            if conn.secret_name is not None:
                if self._read_secret is None or secret_ns is None:
                    raise LookupError(f"cannot read the secret of {conn.identity}")
                read = self._read_secret
                secret_data = await asyncio.to_thread(read, secret_ns, conn.secret_name)
            client = await conn.client(ref.namespace, secret_data)
            queue = TaskQueue(name=ref.name, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL)
            describe = client.workflow_service.describe_task_queue
            timeout = timedelta(seconds=10.0)  # each DescribeTaskQueue call

            async def ask(name: str) -> Any:
                request = DescribeTaskQueueRequest(
                    namespace=ref.namespace,
                    task_queue=queue,
                    task_queue_type=TaskQueueType.Value(f"TASK_QUEUE_TYPE_{name}"),
                    report_stats=stats,
                )
                try:
                    return await describe(request, timeout=timeout)
                except RPCError:
                    if name != "NEXUS":
                        raise
                    return None  # a server without Nexus

            answers = await asyncio.gather(*map(ask, types))  # the types at once
            return client, [a for a in answers if a is not None]
        except Exception as exc:
            reason, message = poller_failure(exc)
            if not own or reason != Reason.AUTH_SECRET_INVALID:
                raise
            # The workers' credential is not in question: say it is twc's own.
            said = f"twc's own credential (twcCredentials, secret {conn.secret_name}): {message}"
            raise TwcConnectionError(Reason.TWC_CREDENTIAL_INVALID, said) from exc

    async def pollers(self, ref: TaskQueueRef) -> int:
        """Pollers of the workflow and activity task queues (what ``twc status`` checks)."""
        _, answers = await self._describe(ref, ("WORKFLOW", "ACTIVITY"), stats=False)
        return sum(len(a.pollers) for a in answers)

    async def describe(self, ref: TaskQueueRef) -> Backlog:
        """The backlog of the workflow, activity and Nexus task queues summed; a worker that
        may sleep at zero stays busy while an activity runs on it (which leaves no backlog
        and, once it runs long, no task rate)."""
        client, answers = await self._describe(ref, ("WORKFLOW", "ACTIVITY", "NEXUS"), stats=True)
        found = backlog_from_stats([a.stats for a in answers if a.HasField("stats")], ref)
        if found.scaled or ref not in self._sleepers:
            return found
        return dataclasses.replace(found, busy=await _activity_running(client, ref.name))


OPEN_LOOKED_AT = 20
"""Open workflows of a queue whose pending activities are looked at; more count as busy."""


async def _activity_running(client: Any, task_queue: str) -> bool:
    """Whether an open workflow on ``task_queue`` has an activity on a worker now (a
    workflow waiting for a signal or a timer has none: it wakes the worker with a task)."""
    from temporalio.api.enums.v1 import PendingActivityState

    on_worker = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    query = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
    found = [w async for w in client.list_workflows(query, limit=OPEN_LOOKED_AT + 1)]
    if len(found) > OPEN_LOOKED_AT:
        return True
    for run in found:
        described = await client.get_workflow_handle(run.id, run_id=run.run_id).describe()
        if any(a.state == on_worker for a in described.raw_description.pending_activities):
            return True
    return False


def backlog_from_stats(stats: Sequence[Any], ref: TaskQueueRef) -> Backlog:
    """Sum DescribeTaskQueue ``stats`` (one per type) into one backlog."""
    if not stats:
        raise LookupError(f"Temporal reported no backlog statistics for {ref}")
    return Backlog.of(stats)


class AskerThread:
    """An event loop on a daemon thread (``twc-ask-<name>``), started by the first question."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._batches: list[concurrent.futures.Future[Any]] = []

    def submit(self, batch: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run ``batch`` on the thread and return at once; its future."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name=f"twc-ask-{self.name}", daemon=True
                )
                self._thread.start()
            self._batches = [b for b in self._batches if not b.done()]
            self._batches.append(asyncio.run_coroutine_threadsafe(batch, self._loop))
            return self._batches[-1]

    def settle(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) for every batch submitted so far; whether done."""
        with self._lock:
            batches = list(self._batches)
        return not concurrent.futures.wait(batches, timeout=timeout).not_done

    def close(self) -> None:
        """Stop the thread, cancelling questions in flight; closing twice is fine."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        # A stuck question must not hold the daemon's stop.
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=5.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            loop.close()


class Asker:
    """A loop's questions between its iterations: each queue's latest answer, those in flight."""

    def __init__(
        self,
        *,
        thread: AskerThread,
        wake: Callable[[], None] | None = None,
        wall: Callable[[], float] = time.time,
        wait: float = 0.0,
    ) -> None:
        self.thread = thread
        self.wake = wake
        self._wall = wall
        self.wait = wait  # seconds :meth:`poll` waits for the answers it asked for
        self._lock = threading.Lock()
        self._flying: set[TaskQueueRef] = set()
        self._awaited: set[TaskQueueRef] = set()  # poll takes their answers in: no wake
        self._latest: dict[TaskQueueRef, Answer] = {}

    def poll(
        self,
        refs: Iterable[TaskQueueRef],
        question: Callable[[TaskQueueRef], Awaitable[Any]],
        *,
        now: float,
        reuse: Callable[[Answer], float],
        limiter: Budget | None = None,
        deadline: float | None = None,
        take: Callable[[int, float], int] | None = None,
    ) -> dict[TaskQueueRef, Answer]:
        """Ask about the due ``refs``; each one's latest answer, at once or within ``wait``."""
        wanted = dict.fromkeys(refs)  # ordered, and a set's lookups
        with self._lock:
            self._latest = {r: a for r, a in self._latest.items() if r in wanted}
            latest = self._latest
            due = [
                r
                for r in wanted
                if r not in self._flying
                and (r not in latest or now - latest[r].at >= reuse(latest[r]))
            ]
            if take is not None:  # first questions first; a re-ask leaves other loops' theirs
                first = [r for r in due if r not in latest]
                again = sorted((r for r in due if r in latest), key=lambda r: (latest[r].at, r))
                due = first[: take(len(first), 0.0)] + again[: take(len(again), FIRST_RESERVE)]
            self._flying.update(due)
            self._awaited = set(due) if self.wait > 0 else set()
            if not due:
                return {r: latest[r] for r in wanted if r in latest}
        batch = ask_all(
            due,
            question,
            limiter=limiter,
            deadline=deadline,
            answered=self._answered,
            clock=lambda: now,
            wall=self._wall,
        )
        concurrent.futures.wait([self.thread.submit(batch)], timeout=self.wait)  # 0: not at all
        with self._lock:
            self._awaited.clear()
            return {r: self._latest[r] for r in wanted if r in self._latest}

    def next_due(self, now: float, reuse: float) -> float | None:
        """Seconds until an answered queue is due again (in flight: answered now), or ``None``."""
        with self._lock:
            times = [a.at for r, a in self._latest.items() if a.ok and r not in self._flying]
            times += [now] if self._flying else []
        return max(0.0, min(times) + reuse - now) if times else None

    def _answered(self, ref: TaskQueueRef, answer: Answer | None) -> None:
        # Each answer as it comes: one slow queue holds no other.
        with self._lock:
            self._flying.discard(ref)
            if answer is None:
                return
            last = self._latest.get(ref)
            news = last is None or _news(last) != _news(answer)
            if not news and last is not None:
                answer = dataclasses.replace(answer, repeats=last.repeats + 1)
            self._latest[ref] = answer
            news = news and ref not in self._awaited
        if news and self.wake is not None:
            self.wake()

    def in_flight(self) -> frozenset[TaskQueueRef]:
        """The queues asked about and not answered yet."""
        with self._lock:
            return frozenset(self._flying)


def _news(answer: Answer) -> object:
    return answer.value if answer.error is None else repr(answer.error)
