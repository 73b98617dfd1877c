"""The daemon's engine: ``up``/``refresh`` of one stack, and repair after a killed run.

:class:`AutomationEngine` writes the desired state's inputs to the file the program
reads (``TWC_DESIRED_INPUTS``) before each ``up``, so the program computes exactly the
desired state the caller decided on; a program that refuses its input is a
:class:`~twc.errors.PermanentError`. Every operation runs under the engine guard's
channel with a deadline and inside the Lease's ``hold``; a run the guard stopped raises
:class:`~twc.stackrun.errors.EngineInterrupted` (or a subclass).

A killed run's lock is broken only when its holder is provably gone (:func:`stale_lock`:
a process a guard of this host recorded that is gone, judged by boot id, pid and start
time, never by the host name alone, or an earlier Lease holder's CLI); its pending
operations are then dropped, and the next ``up``'s forced server-side apply adopts what
it created.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from twc.desired import INPUTS_ENV, BuildScope, DesiredInputs
from twc.errors import PermanentError
from twc.kube.lease import EngineRecord
from twc.stackrun import engine, workspace
from twc.stackrun.errors import (
    EngineDeadlineExceeded,
    EngineInterrupted,
    EngineYielded,
    engine_failure,
)
from twc.stackrun.guard import GuardChannel, engine_alive
from twc.stackrun.retention import backend_url, prune_backups

__all__ = [
    "INPUTS_PREFIX",
    "PATCH_FORCE_ENV",
    "AutomationEngine",
    "LockHolder",
    "StackEngine",
    "UpReport",
    "lock_holders",
    "new_worker_targets",
    "stale_lock",
    "under_queue",
    "worker_urns_from_state",
]

logger = logging.getLogger(__name__)

# The Kubernetes provider's switch for server-side apply with force, for every resource.
PATCH_FORCE_ENV = "PULUMI_K8S_ENABLE_PATCH_FORCE"

INPUTS_PREFIX = "inputs-"
"""The name of an engine's inputs file (the desired state handed to the program), before
its stack's name."""
WORKER_TYPE = "twc:temporal:TemporalWorker"
QUEUE_TYPE = "twc:kmsvc:Queue"


def new_worker_targets(scheme: str, project: str, key: str, *, queue: str | None) -> list[str]:
    """The targets that create a worker the stack does not hold yet: its component's
    URN, and its queue's component's when it hangs on one (the ``up`` then targets their
    dependents, the worker's children).

    Args:
        scheme: ``urn:pulumi:<stack>``, as the stack's URNs start.
        project: The project's name, as its URNs have it.
        key: The worker, ``<namespace>/<name>``.
        queue: Its queue, ``<namespace>/<name>``, when it is derived from one.
    """
    prefix = f"{scheme}::{project}::"
    if queue is None:
        return [f"{prefix}{WORKER_TYPE}::{key}"]
    return [f"{prefix}{QUEUE_TYPE}::{queue}", f"{prefix}{QUEUE_TYPE}${WORKER_TYPE}::{key}"]


def under_queue(urn: str) -> bool:
    """Whether a worker component's URN has it under a queue's component."""
    parts = urn.split("::")
    return len(parts) == 4 and parts[2] == f"{QUEUE_TYPE}${WORKER_TYPE}"


def _created(urn: str) -> tuple[str, str] | None:
    """``(kind, name)`` of a component :func:`new_worker_targets` names: ``worker``
    and its key, or ``queue``; ``None`` for any other URN."""
    parts = urn.split("::")
    if len(parts) != 4:
        return None
    chain, name = parts[2], parts[3]
    if chain in (WORKER_TYPE, f"{QUEUE_TYPE}${WORKER_TYPE}"):
        return ("worker", name)
    if chain == QUEUE_TYPE:
        return ("queue", name)
    return None


@dataclass(frozen=True, slots=True)
class UpReport:
    """What an ``up`` changed."""

    changes: Mapping[str, int] = field(default_factory=dict)
    """Operation (``create``, ``update``, ``same``...) to resource count."""
    recoveries: Sequence[str] = ()
    """What the ``up`` repaired before it could run (as :meth:`StackEngine.recover`)."""
    update: str | None = None
    """This update's identity in the stack's history (:func:`update_id`), when known."""


@dataclass
class _Known:
    """What this engine knows of its stack as of one update (``update`` in the stack's
    history): valid while that update is still the stack's last."""

    update: str
    """The update's identity in the stack's history (:func:`update_id`)."""
    urns: dict[str, list[str]] | None = None
    """Per worker, its component's and descendants' URNs (:func:`worker_urns_from_state`)."""
    statuses: dict[str, Any] | None = None
    """The ``workers`` stack output that update recorded."""
    checked: bool = False
    """Whether ``update`` was just found to be the last update (for the ``up`` next)."""


_WORKER_SET_CHANGES = frozenset(
    {"create", "delete", "replace", "create-replacement", "delete-replaced", "import"}
)
"""Operations after which a worker's resources may be other ones (other URNs)."""


class StackEngine(Protocol):
    """The engine operations the loop uses; :class:`AutomationEngine` is the real one."""

    def recover(self) -> Sequence[str]:
        """Repair what a killed run left behind; returns the actions taken."""
        ...

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        """Apply the program with ``inputs``; only ``targets`` (URNs) when given."""
        ...

    def refresh(self) -> Sequence[str]:
        """Refresh the state from the cluster; returns the resources that drifted."""
        ...

    def preempt(self, reason: str) -> bool:
        """Stop the refresh in progress (it raises ``EngineYielded``) so a change runs
        first; returns whether one was told to."""
        ...

    def worker_urns(self) -> Mapping[str, Sequence[str]]:
        """Per worker key, the URNs of its component and everything under it."""
        ...

    def last_update(self) -> str | None:
        """The identity of the stack's last update (``None``: none, or unreadable)."""
        ...


@dataclass(frozen=True, slots=True)
class LockHolder:
    """One lock on a stack, as the backend's ``ConcurrentUpdateError`` describes it."""

    user: str
    """Who took it."""
    host: str
    """Host name of the process."""
    pid: int
    """Process id of the ``pulumi`` CLI that took it."""


_LOCK_LINE = re.compile(r"created by (?P<user>[^@\s]+)@(?P<host>\S+) \(pid (?P<pid>\d+)\)")


def lock_holders(message: str) -> list[LockHolder]:
    """Parse the holders out of a "the stack is currently locked by" error.

    Args:
        message: The error text (the engine's stderr).

    Returns:
        One entry per lock line; empty when the text names none (e.g. a service
        backend's 409, which names no process).
    """
    return [LockHolder(m["user"], m["host"], int(m["pid"])) for m in _LOCK_LINE.finditer(message)]


def stale_lock(
    holders: Sequence[LockHolder],
    *,
    hostname: str,
    alive: Callable[[int], bool],
    previous: Sequence[EngineRecord] = (),
) -> bool:
    """Whether every lock is provably left behind by a process that is gone.

    A lock naming this host's name is gone when ``alive`` says its process is (a guard
    of this boot recorded it, and it runs no more); any lock is gone if it names the CLI
    of an earlier Lease holder (whose engine guard stopped it by the end of its term).
    Nothing else is proof: a manual ``up`` elsewhere keeps its lock.

    Args:
        holders: The locks, from :func:`lock_holders`.
        hostname: This host's name.
        alive: Whether the engine CLI a lock naming this host's name took may still run.
        previous: Engine records of earlier Lease holders, given only while this
            process holds the Lease (empty without leader election).

    Returns:
        True only if there is at least one lock and every one is provably gone.
    """
    if not holders:
        return False
    return all(_holder_gone(h, hostname=hostname, alive=alive, previous=previous) for h in holders)


def _holder_gone(
    holder: LockHolder,
    *,
    hostname: str,
    alive: Callable[[int], bool],
    previous: Sequence[EngineRecord],
) -> bool:
    if holder.host == hostname and not alive(holder.pid):
        return True
    return any(r.host == holder.host and holder.pid in r.pids for r in previous)


def update_id(summary: Any) -> str | None:
    """An update's identity in the stack's history: its version with its start and end
    time (the file backend numbers every update 0). ``None`` when the summary says
    nothing."""
    if summary is None or getattr(summary, "start_time", None) is None:
        return None
    end = getattr(summary, "end_time", None)
    return "@".join(
        (
            str(getattr(summary, "version", None)),
            summary.start_time.isoformat(),
            end.isoformat() if end is not None else "-",
        )
    )


def _last_update(stack: Any) -> str | None:
    """The identity of the stack's last update, ``None`` when it has none (or the
    history cannot be read)."""
    try:
        history = stack.history(page_size=1)
    except Exception as exc:  # noqa: BLE001 - without it nothing is reused; the export answers
        logger.debug("stack history not read: %s", exc)
        return None
    return update_id(history[0]) if history else None


def worker_urns_from_state(resources: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per worker key, the URN of its component followed by every descendant's.

    Args:
        resources: ``deployment["resources"]`` of an exported stack.

    Returns:
        ``{"<ns>/<worker>": [component URN, child URNs...]}``.
    """
    items = list(resources)
    children: dict[str, list[str]] = {}
    for res in items:
        parent = res.get("parent")
        if parent:
            children.setdefault(str(parent), []).append(str(res["urn"]))
    out: dict[str, list[str]] = {}
    for res in items:
        if res.get("type") != WORKER_TYPE:
            continue
        urn = str(res["urn"])
        found = [urn]
        todo = list(children.get(urn, []))
        while todo:
            child = todo.pop(0)
            found.append(child)
            todo.extend(children.get(child, []))
        out[urn.rsplit("::", 1)[-1]] = found
    return out


class AutomationEngine:
    """The Automation API on the project, for one stack."""

    def __init__(
        self,
        ref: engine.StackRef,
        *,
        state_dir: Path | None = None,
        alive: Callable[[int], bool] = engine_alive,
        previous_engines: Callable[[], Sequence[EngineRecord]] = tuple,
        hold: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        channel: GuardChannel | None = None,
        deadline: float = 1800.0,
        keep_backups: int | None = None,
    ) -> None:
        """Prepare the engine.

        Args:
            ref: The stack, its ``twc:`` config and extra environment.
            state_dir: Where to write the inputs file (and the guard's channel); a
                private temporary directory by default.
            alive: Whether the engine CLI a lock naming this host's name took may still
                run (a dead pid no guard here recorded may be another machine's).
            previous_engines: Earlier Lease holders' engine records (see :func:`stale_lock`).
            hold: Entered around each engine operation (``LeaseElector.hold``).
            channel: The engine guard's channel; an unleased one in ``state_dir`` by
                default.
            deadline: Seconds one engine operation may take before the guard
                interrupts it.
            keep_backups: After each ``up``, prune the file backend's backups and
                history copies of the stack to this many (:func:`prune_backups`);
                ``None`` keeps them all.
        """
        self.ref = ref
        if state_dir is None:
            state_dir = Path(tempfile.mkdtemp(prefix="twc-daemon-"))
        state_dir.mkdir(parents=True, exist_ok=True)
        self.inputs_file = state_dir / f"{INPUTS_PREFIX}{ref.name}.json"
        self.channel = channel or GuardChannel(state_dir / "guard")
        self._hostname = socket.gethostname()  # as the backend records it in locks
        self._alive = alive
        self._previous = previous_engines
        self._hold = hold
        self._deadline = deadline
        self._prefix = f"[{ref.name}]"
        self.keep_backups = keep_backups
        self._known: _Known | None = None
        """The stack as this engine's last update left it, while no one else changed it."""

    @contextlib.contextmanager
    def _operation(self, *, preemptible: bool = False) -> Iterator[None]:
        """One engine operation: under the Lease's hold, with the deadline; a run the
        guard stopped raises what stopped it rather than the engine's error."""
        with self._hold(), self.channel.run(self._deadline, preemptible=preemptible) as started:
            try:
                yield
            except Exception as exc:
                stopped = [e for e in self.channel.journal(since=started) if e.interrupted]
                preempted = self.channel.preempted
                if preempted is not None and all(e.cause == "preempt" for e in stopped):
                    # Stopped, or refused to start, because a change came first.
                    raise EngineYielded(preempted) from exc
                if not stopped:
                    raise
                last = stopped[-1]
                error = EngineDeadlineExceeded if last.cause == "deadline" else EngineInterrupted
                raise error(str(last.interrupted)) from exc

    def preempt(self, reason: str) -> bool:
        """Stop the refresh in progress so a change can run first; returns whether one
        was running. Ups and repairs are never stopped this way."""
        return self.channel.preempt(reason)

    # ------------------------------------------------------------------ engine
    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        """Run ``up`` on ``inputs``; a stale lock is broken and the ``up`` retried once.

        Raises:
            PermanentError: The program refused its input.
            ConcurrentUpdateError: A live process holds the stack's lock.
            EngineDeadlineExceeded: The run took longer than its deadline.
            EngineInterrupted: The engine guard stopped the run (the term ended).
            CommandError: The engine failed otherwise.
        """
        scope = self._scope(targets)
        if scope is not None:
            inputs = inputs.model_copy(update={"scope": scope})
            logger.info(
                "%s the program builds %d of %d workers; the engine keeps the others as they are",
                self._prefix,
                len(scope.workers),
                len(scope.workers) + len(scope.statuses),
            )
        inputs.to_file(self.inputs_file)
        creating = self._creating(targets)
        known, self._known = self._known, None  # whatever happens, it changes the stack
        with self._operation():
            report = self._up(targets, known, creating=creating)
        if self.keep_backups is not None:
            self._prune(self.keep_backups)
        return report

    def _prune(self, keep: int) -> None:
        url = backend_url(self.ref.env)
        project = workspace.project_name(self.ref.work_dir)
        try:
            removed = prune_backups(url, project=project, stack=self.ref.name, keep=keep)
        except OSError as exc:
            logger.warning("%s could not prune old backups: %s", self._prefix, exc)
        else:
            if removed:
                logger.debug("%s removed %d old backup file(s)", self._prefix, removed)

    def _scope(self, targets: Sequence[str] | None) -> BuildScope | None:
        """The workers a targeted up builds: exactly those whose URNs are the targets,
        when the stack is as this engine's last update left it (just checked by
        :meth:`worker_urns`)."""
        known = self._known
        if not targets or known is None or not known.checked:
            return None
        if known.urns is None or known.statuses is None:
            return None
        wanted = set(targets)
        workers = sorted(k for k, urns in known.urns.items() if wanted & set(urns))
        covered = {u for k in workers for u in known.urns[k]}
        if not covered <= wanted:
            return None  # targets that are not whole workers: build everything
        created = [_created(u) for u in wanted - covered]
        if any(c is None or (c[0] == "worker" and c[1] in known.urns) for c in created):
            return None
        new = sorted(name for kind, name in filter(None, created) if kind == "worker")
        workers = sorted({*workers, *new})
        statuses = {k: v for k, v in known.statuses.items() if k not in workers}
        return BuildScope(workers=tuple(workers), statuses=statuses)

    def _creating(self, targets: Sequence[str] | None) -> bool:
        """Whether ``targets`` name a worker's or a queue's component, so that the ``up``
        targets the components' dependents (their children, which may not exist yet)."""
        return targets is not None and any(_created(u) is not None for u in targets)

    def _up(
        self, targets: Sequence[str] | None, known: _Known | None, *, creating: bool = False
    ) -> UpReport:
        from pulumi.automation import CommandError, ConcurrentUpdateError

        ref = self._ref_with_inputs()
        recoveries: list[str] = []
        for attempt in (1, 2):
            try:
                result = engine.up(
                    ref,
                    on_output=self._output,
                    target=list(targets or []) or None,
                    # New components' children are their dependents (nothing else
                    # depends on a worker's resources).
                    target_dependents=creating,
                )
            except ConcurrentUpdateError as exc:
                if attempt == 2 or not self._break_stale_lock(str(exc)):
                    raise
                recoveries = ["cancel", *self._drop_pending_operations()]
                continue
            except CommandError as exc:
                failure = engine_failure(exc)
                if failure.refused:
                    raise PermanentError(failure.text) from exc
                raise
            changes = {
                str(getattr(k, "value", k)): n
                for k, n in (result.summary.resource_changes or {}).items()
            }
            self._remember(result, targets, known, changes)
            update = update_id(result.summary)
            return UpReport(
                changes=changes,
                recoveries=tuple(recoveries),
                update=update,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _remember(
        self,
        result: Any,
        targets: Sequence[str] | None,
        known: _Known | None,
        changes: Mapping[str, int],
    ) -> None:
        """Keep what this up leaves behind: its identity, the workers' statuses, and the
        workers' URNs when they cannot have changed (a targeted up that created,
        replaced or deleted nothing)."""
        workers = (getattr(result, "outputs", None) or {}).get("workers")
        update = update_id(result.summary)
        if update is None or workers is None or workers.secret:
            return
        keep_urns = (
            bool(targets)
            and known is not None
            and not any(changes.get(op) for op in _WORKER_SET_CHANGES)
        )
        self._known = _Known(
            update=update,
            urns=known.urns if keep_urns and known is not None else None,
            statuses=dict(workers.value or {}),
        )

    def refresh(self) -> list[str]:
        """Refresh the state; returns names of resources whose live state differed.

        Raises:
            EngineYielded: :meth:`preempt` stopped it for a change.
        """
        with self._operation(preemptible=True):
            return self._refresh()

    def _refresh(self) -> list[str]:
        from pulumi.automation import ConcurrentUpdateError

        known, self._known = self._known, None  # a refresh is an update of its own
        drifted: list[str] = []

        def on_event(event: Any) -> None:
            out = getattr(event, "res_outputs_event", None)
            if out is None:
                return
            meta = out.metadata
            op = str(getattr(meta.op, "value", meta.op))
            if op in ("same", "read", "refresh") or meta.type.startswith("pulumi:"):
                return
            drifted.append(meta.urn.rsplit("::", 1)[-1])

        stack = engine.select_stack(self._ref_with_inputs())
        try:
            result = stack.refresh(on_event=on_event, on_output=self._output, color="never")
        except ConcurrentUpdateError as exc:
            if not self._break_stale_lock(str(exc)):
                raise
            self._drop_pending_operations()
            drifted.clear()
            known = None
            result = stack.refresh(on_event=on_event, on_output=self._output, color="never")
        update = update_id(getattr(result, "summary", None))
        if known is not None and not drifted and update is not None:
            # Nothing drifted: the same resources, the same outputs, one update later. A
            # change right after a refresh is still built alone.
            self._known = replace(known, update=update, checked=False)
        return drifted

    def last_update(self) -> str | None:
        """The identity of the stack's last update, from one page of its history
        (``None`` when it has none or the history cannot be read)."""
        with self._operation():
            return _last_update(engine.select_stack(self._ref_with_inputs()))

    def worker_urns(self) -> dict[str, list[str]]:
        """Per worker key, the URNs of its component and descendants: from what this
        engine's last update left while that is still the stack's last update, else from
        an export of the state."""
        with self._operation():
            stack = engine.select_stack(self._ref_with_inputs())
            last = _last_update(stack)
            known = self._known
            if known is not None and last == known.update and known.urns is not None:
                known.checked = True
                return {k: list(v) for k, v in known.urns.items()}
            state = stack.export_stack().deployment or {}
        logger.info("%s the workers' URNs read from an export of the state", self._prefix)
        urns = worker_urns_from_state(state.get("resources") or [])
        if known is not None and last == known.update:
            known.urns, known.checked = urns, True
        else:
            self._known = _Known(update=last, urns=urns) if last is not None else None
        return {k: list(v) for k, v in urns.items()}

    # ---------------------------------------------------------------- recovery
    def recover(self) -> list[str]:
        """Drop pending operations a killed run left, breaking its lock if stale.

        Returns:
            The actions taken, e.g. ``["cancel", "drop-pending-operations:2"]``.

        Raises:
            ConcurrentUpdateError: A live process holds the lock (nothing is touched).
        """
        with self._operation():
            return self._recover()

    def _recover(self) -> list[str]:
        from pulumi.automation import ConcurrentUpdateError

        actions: list[str] = []
        try:
            actions += self._drop_pending_operations()
        except ConcurrentUpdateError as exc:
            if not self._break_stale_lock(str(exc)):
                raise
            actions.append("cancel")
            actions += self._drop_pending_operations()
        return actions

    def _break_stale_lock(self, message: str) -> bool:
        holders = lock_holders(message)
        who = ", ".join(f"{h.user}@{h.host} pid {h.pid}" for h in holders) or "a process"
        previous = self._previous()
        if not stale_lock(holders, hostname=self._hostname, alive=self._alive, previous=previous):
            logger.info(
                "%s the stack is locked by %s, not provably gone (alive on this host, or "
                "not an earlier Lease holder's engine): waiting; `pulumi cancel` removes "
                "the lock if you know that process is gone",
                self._prefix,
                who,
            )
            return False
        logger.warning("%s breaking a stale lock (%s)", self._prefix, who)
        engine.select_stack(self._ref_with_inputs()).cancel()
        return True

    def _drop_pending_operations(self) -> list[str]:
        from pulumi.automation import Deployment

        stack = engine.select_stack(self._ref_with_inputs())
        found = stack.export_stack()
        state = dict(found.deployment or {})
        pending = state.get("pending_operations") or []
        if not pending:
            return []
        state.pop("pending_operations", None)
        stack.import_stack(Deployment(version=found.version, deployment=state))
        for op in pending:
            resource = op.get("resource") or {}
            logger.warning(
                "%s dropped the pending %s of %s left by an interrupted run",
                self._prefix,
                op.get("type", "operation"),
                str(resource.get("urn", "?")).rsplit("::", 1)[-1],
            )
        return [f"drop-pending-operations:{len(pending)}"]

    # ----------------------------------------------------------------- helpers
    def _ref_with_inputs(self) -> engine.StackRef:
        # Server-side apply with force: the daemon is the single writer of its objects,
        # and an object a killed run created (its field manager gone) or edited by hand
        # would otherwise fail every later ``up`` with a conflict.
        env = {
            **(self.ref.env or {}),
            **self.channel.env(),
            INPUTS_ENV: str(self.inputs_file),
            PATCH_FORCE_ENV: "true",
        }
        return replace(self.ref, env=env)

    def _output(self, line: str) -> None:
        text = line.rstrip()
        if text:
            # The engine's progress is verbose; the loop logs a summary at INFO.
            logger.debug("%s %s", self._prefix, text)
