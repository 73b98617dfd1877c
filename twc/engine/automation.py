"""The daemon's engine: ``up``/``refresh`` of one stack, and repair after a killed run.

Every operation runs under the engine guard with a deadline inside the Lease's ``hold``; a
lock is broken only when its holder is provably gone (:func:`stale_lock`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pulumi.automation import CommandError, ConcurrentUpdateError, Deployment

from twc.desired import INPUTS_ENV, BuildScope, DesiredInputs
from twc.engine import engine, workspace
from twc.engine.errors import (
    EngineDeadlineExceeded,
    EngineInterrupted,
    EngineYielded,
    engine_failure,
)
from twc.engine.supervisor import GuardChannel, engine_alive
from twc.engine.workspace import DEFAULT_KEEP_BACKUPS, backend_url, prune_backups
from twc.errors import PermanentError
from twc.kube.lease import EngineRecord

logger = logging.getLogger(__name__)
T = TypeVar("T")

PATCH_FORCE_ENV = "PULUMI_K8S_ENABLE_PATCH_FORCE"  # server-side apply with force
INPUTS_PREFIX = "inputs-"  # an engine's inputs file's name, before its stack's name
WORKER_TYPE = "twc:temporal:TemporalWorker"
QUEUE_TYPE = "twc:kmsvc:Queue"
# Operations after which a worker's resources may be other ones (other URNs).
_RESHAPING = ("create", "delete", "replace", "create-replacement", "delete-replaced", "import")


def new_worker_targets(scheme: str, project: str, key: str, *, queue: str | None) -> list[str]:
    """The targets that create worker ``key``: its component's URN, or its queue's and its."""
    prefix = f"{scheme}::{project}::"
    if queue is None:
        return [f"{prefix}{WORKER_TYPE}::{key}"]
    return [f"{prefix}{QUEUE_TYPE}::{queue}", f"{prefix}{QUEUE_TYPE}${WORKER_TYPE}::{key}"]


def under_queue(urn: str) -> bool:
    """Whether a worker component's URN has it under a queue's component."""
    parts = urn.split("::")
    return len(parts) == 4 and parts[2] == f"{QUEUE_TYPE}${WORKER_TYPE}"


def _created(urn: str) -> tuple[str, str] | None:
    """``("worker", key)`` or ``("queue", key)`` for a URN :func:`new_worker_targets` names."""
    parts = urn.split("::")
    if len(parts) != 4:
        return None
    if parts[2] in (WORKER_TYPE, f"{QUEUE_TYPE}${WORKER_TYPE}"):
        return ("worker", parts[3])
    return ("queue", parts[3]) if parts[2] == QUEUE_TYPE else None


@dataclass(frozen=True, slots=True)
class UpReport:
    """What an ``up`` changed (operation to count), repairs made first, and its update id."""

    changes: Mapping[str, int] = field(default_factory=dict)
    recoveries: Sequence[str] = ()
    update: str | None = None


@dataclass
class _Known:
    """The stack as of this engine's update ``update``, valid while it is the last one."""

    update: str
    urns: dict[str, list[str]] | None = None
    statuses: dict[str, Any] | None = None
    checked: bool = False


class StackEngine(Protocol):
    """The engine operations the loop uses; :class:`AutomationEngine` is the real one."""

    def recover(self) -> Sequence[str]:
        """Repair what a killed run left behind; returns the actions taken."""

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        """Apply the program with ``inputs``; only ``targets`` (URNs) when given."""

    def refresh(self) -> Sequence[str]:
        """Refresh the state from the cluster; returns the resources that drifted."""

    def preempt(self, reason: str) -> bool:
        """Stop the refresh in progress; returns whether one was told to."""

    def worker_urns(self) -> Mapping[str, Sequence[str]]:
        """Per worker key, the URNs of its component and everything under it."""

    def last_update(self) -> str | None:
        """The identity of the stack's last update (``None``: none, or unreadable)."""


@dataclass(frozen=True, slots=True)
class LockHolder:
    """One lock on a stack: who took it, on which host, with which CLI pid."""

    user: str
    host: str
    pid: int


_LOCK_LINE = re.compile(r"created by (?P<user>[^@\s]+)@(?P<host>\S+) \(pid (?P<pid>\d+)\)")


def lock_holders(message: str) -> list[LockHolder]:
    """The holders a "the stack is currently locked by" error names (none for a 409)."""
    return [LockHolder(m["user"], m["host"], int(m["pid"])) for m in _LOCK_LINE.finditer(message)]


def stale_lock(
    holders: Sequence[LockHolder],
    *,
    hostname: str,
    alive: Callable[[int], bool],
    previous: Sequence[EngineRecord] = (),
) -> bool:
    """Whether there is a lock and every one is provably left by a process that is gone."""
    return bool(holders) and all(
        (h.host == hostname and not alive(h.pid))
        or any(r.host == h.host and h.pid in r.pids for r in previous)
        for h in holders
    )


def update_id(summary: Any) -> str | None:
    """An update's identity (version, start and end time); ``None`` when unknown."""
    if summary is None or getattr(summary, "start_time", None) is None:
        return None
    end = getattr(summary, "end_time", None)
    ended = end.isoformat() if end is not None else "-"
    return f"{getattr(summary, 'version', None)}@{summary.start_time.isoformat()}@{ended}"


def _last_update(stack: Any) -> str | None:
    try:
        history = stack.history(page_size=1)
    except Exception as exc:  # noqa: BLE001 - without it nothing is reused; the export answers
        logger.debug("stack history not read: %s", exc)
        return None
    return update_id(history[0]) if history else None


def worker_urns_from_state(resources: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per worker key, its component's URN then every descendant's, from exported state."""
    items = list(resources)
    children: dict[str, list[str]] = {}
    for res in items:
        if res.get("parent"):
            children.setdefault(str(res["parent"]), []).append(str(res["urn"]))
    out: dict[str, list[str]] = {}
    for res in items:
        if res.get("type") == WORKER_TYPE:
            found = [str(res["urn"])]
            for urn in found:
                found.extend(children.get(urn, []))
            out[found[0].rsplit("::", 1)[-1]] = found
    return out


class AutomationEngine:
    """The Automation API on the project, for one stack; ``hold`` is entered around each
    operation, ``deadline`` is one operation's seconds."""

    def __init__(
        self,
        ref: engine.StackRef,
        *,
        state_dir: Path,
        alive: Callable[[int], bool] = engine_alive,
        previous_engines: Callable[[], Sequence[EngineRecord]] = tuple,
        hold: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
        channel: GuardChannel | None = None,
        deadline: float = 1800.0,
        namespaces: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.ref = ref
        state_dir.mkdir(parents=True, exist_ok=True)
        self.inputs_file = state_dir / f"{INPUTS_PREFIX}{ref.name}.json"
        self.channel = channel or GuardChannel(state_dir / "guard")
        self._hostname = socket.gethostname()  # as the backend records it in locks
        self._alive, self._previous, self._hold = alive, previous_engines, hold
        self._deadline = deadline
        self._prefix = f"[{ref.name}]"
        self.keep_backups = DEFAULT_KEEP_BACKUPS
        self._namespaces = namespaces
        self._known: _Known | None = None

    @contextlib.contextmanager
    def _operation(self, *, preemptible: bool = False) -> Iterator[None]:
        """One operation under the hold and deadline; a guard-stopped run raises why."""
        with self._hold(), self.channel.run(self._deadline, preemptible=preemptible) as started:
            try:
                yield
            except Exception as exc:
                stopped = [e for e in self.channel.journal(since=started) if e.interrupted]
                preempted = self.channel.preempted
                if preempted is not None and all(e.cause == "preempt" for e in stopped):
                    raise EngineYielded(preempted) from exc
                if not stopped:
                    raise
                last = stopped[-1]
                error = EngineDeadlineExceeded if last.cause == "deadline" else EngineInterrupted
                raise error(str(last.interrupted)) from exc

    def preempt(self, reason: str) -> bool:
        """Stop the refresh in progress so a change runs first; ups are never stopped."""
        return self.channel.preempt(reason)

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        """Run ``up`` on ``inputs``; a stale lock is broken and the ``up`` retried once."""
        scope = self._scope(targets)
        if scope is not None:
            inputs = inputs.model_copy(update={"scope": scope})
            built, total = len(scope.workers), len(scope.workers) + len(scope.statuses)
            logger.info("%s the program builds %d of %d workers", self._prefix, built, total)
        inputs.to_file(self.inputs_file)
        known, self._known = self._known, None  # whatever happens, it changes the stack
        left: dict[str, dict[str, str]] = {}  # a whole-stack up's events: all it leaves

        def on_event(event: Any) -> None:
            out = getattr(event, "res_outputs_event", None)
            if out is not None and (new := out.metadata.new) is not None:
                left[new.urn] = {"urn": new.urn, "type": new.type, "parent": new.parent}

        def run() -> Any:
            return engine.up(
                self._ref_with_inputs(),
                on_output=self._output,
                on_event=None if targets else on_event,
                target=list(targets or []) or None,
                # A new component's children are its dependents (and nothing else is).
                target_dependents=any(_created(u) is not None for u in targets or ()),
            )

        with self._operation():
            try:
                result, recoveries = self._unlocked(run)
            except CommandError as exc:
                # The program refused its input: retrying it unchanged cannot help.
                if (refusal := engine_failure(exc).program) is not None:
                    raise PermanentError(refusal) from exc
                raise
        changes = {
            str(getattr(k, "value", k)): n
            for k, n in (result.summary.resource_changes or {}).items()
        }
        update = update_id(result.summary)
        workers = (getattr(result, "outputs", None) or {}).get("workers")
        if update is not None and workers is not None and not workers.secret:
            # The URNs stay known when a targeted up created and deleted nothing.
            same = bool(targets) and not any(changes.get(op) for op in _RESHAPING)
            urns = known.urns if same and known is not None else None
            urns = worker_urns_from_state(left.values()) if left else urns
            self._known = _Known(update, urns=urns, statuses=dict(workers.value or {}))
        url, project = backend_url(self.ref.env), workspace.project_name(self.ref.work_dir)
        prune_backups(url, project=project, stack=self.ref.name, keep=self.keep_backups)
        return UpReport(changes=changes, recoveries=tuple(recoveries), update=update)

    def _scope(self, targets: Sequence[str] | None) -> BuildScope | None:
        """The workers a targeted up builds, when the stack is as this engine left it."""
        known = self._known
        if not targets or known is None or not known.checked:
            return None
        if known.urns is None or known.statuses is None:
            return None
        wanted = set(targets)
        workers = {k for k, urns in known.urns.items() if wanted & set(urns)}
        if not {u for k in workers for u in known.urns[k]} <= wanted:
            return None  # targets that are not whole workers: build everything
        created = [_created(u) for u in wanted.difference(*(known.urns[k] for k in workers))]
        if any(c is None or (c[0] == "worker" and c[1] in known.urns) for c in created):
            return None
        workers |= {name for kind, name in filter(None, created) if kind == "worker"}
        statuses = {k: v for k, v in known.statuses.items() if k not in workers}
        return BuildScope(workers=tuple(sorted(workers)), statuses=statuses)

    def refresh(self) -> list[str]:
        """Refresh the state; returns the drifted resources (``EngineYielded`` if preempted)."""
        drifted: list[str] = []

        def on_event(event: Any) -> None:
            out = getattr(event, "res_outputs_event", None)
            if out is None:
                return
            meta = out.metadata
            op = str(getattr(meta.op, "value", meta.op))
            if op not in ("same", "read", "refresh") and not meta.type.startswith("pulumi:"):
                drifted.append(meta.urn.rsplit("::", 1)[-1])

        def refresh() -> Any:
            drifted.clear()
            stack = engine.select_stack(self._ref_with_inputs())
            return stack.refresh(on_event=on_event, on_output=self._output, color="never")

        with self._operation(preemptible=True):
            known, self._known = self._known, None  # a refresh is an update of its own
            result, recoveries = self._unlocked(refresh)
        if recoveries:
            known = None
        update = update_id(getattr(result, "summary", None))
        if known is not None and not drifted and update is not None:
            # Nothing drifted: the same resources and outputs, one update later.
            self._known = replace(known, update=update, checked=False)
        return drifted

    def last_update(self) -> str | None:
        """The identity of the stack's last update, from one page of its history."""
        with self._operation():
            return _last_update(engine.select_stack(self._ref_with_inputs()))

    def worker_urns(self) -> dict[str, list[str]]:
        """Per worker key, its component's and descendants' URNs (known, else exported)."""
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
            self._known = _Known(last, urns=urns) if last is not None else None
        return {k: list(v) for k, v in urns.items()}

    def recover(self) -> list[str]:
        """Drop pending operations a killed run left, breaking a stale lock; returns actions."""
        with self._operation():
            dropped, recoveries = self._unlocked(self._drop_pending_operations)
        return recoveries or dropped

    def _unlocked(self, run: Callable[[], T]) -> tuple[T, list[str]]:
        """``run()``, retried once after breaking a stale lock; with the repairs made."""
        try:
            return run(), []
        except ConcurrentUpdateError as exc:
            holders = lock_holders(str(exc))
            who = ", ".join(f"{h.user}@{h.host} pid {h.pid}" for h in holders) or "a process"
            previous, alive = self._previous(), self._alive
            if not stale_lock(holders, hostname=self._hostname, alive=alive, previous=previous):
                logger.info(
                    "%s the stack is locked by %s, not provably gone (alive on this host, or "
                    "not an earlier Lease holder's engine): waiting; `pulumi cancel` removes "
                    "the lock if you know that process is gone",
                    self._prefix,
                    who,
                )
                raise
            logger.warning("%s breaking a stale lock (%s)", self._prefix, who)
        engine.select_stack(self._ref_with_inputs()).cancel()
        recoveries = ["cancel", *self._drop_pending_operations()]
        return run(), recoveries

    def _drop_pending_operations(self) -> list[str]:
        stack = engine.select_stack(self._ref_with_inputs())
        found = stack.export_stack()
        state = dict(found.deployment or {})
        pending = state.pop("pending_operations", None) or []
        if not pending:
            return []
        stack.import_stack(Deployment(version=found.version, deployment=state))
        for op in pending:
            urn = str((op.get("resource") or {}).get("urn", "?"))
            logger.warning(
                "%s dropped the pending %s of %s left by an interrupted run",
                self._prefix,
                op.get("type", "operation"),
                urn.rsplit("::", 1)[-1],
            )
        return [f"drop-pending-operations:{len(pending)}"]

    def _ref_with_inputs(self) -> engine.StackRef:
        # Forced server-side apply: the daemon is its objects' single writer, and an object
        # a killed run created or edited by hand would otherwise fail every later ``up``.
        extra = {**self.channel.env(), INPUTS_ENV: str(self.inputs_file), PATCH_FORCE_ENV: "true"}
        config = dict(self.ref.config or {})
        if self._namespaces is not None:
            config[engine.SHARD_CONFIG] = json.dumps(sorted(self._namespaces()))
        return replace(self.ref.with_env(extra), config=config or self.ref.config)

    def _output(self, line: str) -> None:
        if line.strip():
            logger.debug("%s %s", self._prefix, line.rstrip())  # the loop logs a summary
