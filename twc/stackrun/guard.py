"""The engine guard: no engine, language-host or plugin process outlives its run.

The Pulumi CLI starts each plugin (the language host, every resource provider) in a
process group of its own, so killing the CLI, or the daemon's whole process group,
leaves them running, and a killed daemon's ``up`` would go on writing the stack while a
new leader starts its own. So twc never runs the CLI directly: the Automation API is
pointed at a ``pulumi`` wrapper (:func:`install_wrapper`) that runs this module's
:func:`main` around the real CLI. The guard

* makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so plugins orphaned
  by a dying CLI are reparented to it and it can still find them: every process of the
  run is a descendant of the guard;
* asks for a parent-death signal (``PR_SET_PDEATHSIG``) and watches its parent pid, so
  it learns when the daemon dies, even by ``kill -9``;
* leaves the caller's process group, so a kill of the daemon's group spares it to clean
  up, and runs the CLI in a process group of its own;
* reads a control file its caller keeps up to date (:class:`GuardChannel`): the end of
  the caller's Lease term and the run's deadline, both on the host's ``CLOCK_BOOTTIME``
  (:func:`~twc.timestamps.boottime`: one clock for every process of the host, counting
  suspended time). Because the guard enforces them itself, a daemon that is stopped
  (``SIGSTOP``) or hung, or a laptop that slept past the term, cannot keep an engine
  running past its term;
* under a Lease, lets the CLI start only after its pid is recorded in the Lease (the
  CLI's pid is what the backend's lock names), so a later Lease holder can tell that
  lock from anyone else's;
* records the CLI's identity on this host (:func:`engine_alive`): boot id, pid and
  process start time, so a lock naming this host name is judged by the process that
  took it, never by a host name another machine may share or a pid reused since;
* to stop a run — its caller died, its term or deadline passed, or it was asked —
  sends SIGINT to the CLI's process group (the CLI cancels: in-flight steps finish, the
  lock is released), waits the grace period, then SIGKILLs every descendant, repeating
  until none is left; after a normal exit it kills whatever the CLI left behind.

It writes one journal entry per command (:class:`JournalEntry`), so the caller can tell
an interrupted run from a failed one. This module uses the standard library only: the
wrapper imports it before anything else, once per engine command.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from twc.timestamps import boottime

__all__ = [
    "CHANNEL_ENV",
    "GUARD_MARK",
    "PARENT_ENV",
    "Control",
    "GuardAction",
    "GuardChannel",
    "JournalEntry",
    "Stop",
    "descendants",
    "engine_alive",
    "install_wrapper",
    "main",
    "next_action",
    "stop_reason",
]

CHANNEL_ENV = "TWC_ENGINE_GUARD"
"""The channel directory of the guard's caller (control file, announcements, journal)."""
PARENT_ENV = "TWC_ENGINE_GUARD_PARENT"
"""The pid of the process the channel belongs to: a guard whose parent is another
process (or already gone) must not run under that channel."""
GUARD_MARK = "twc-engine-guard"
"""In the wrapper's path, so the guard is recognisable in a process list."""
TICK = 0.05
"""Seconds between the guard's checks (deadlines, its parent, exited processes)."""
RECORD_TIMEOUT = 30.0
"""Seconds a guard waits, under a Lease, for its CLI's pid to be recorded."""
LEFTOVER_GRACE = 0.5
"""Seconds processes left behind by a CLI that exited normally get to exit by themselves."""
ENGINES_ENV = "TWC_ENGINES_DIR"
"""Where guards record the identity of the CLIs they start (default
``~/.cache/twc/engines``): one directory for every process of the user on the host, so a
restarted daemon finds its predecessor's."""
MAX_ENGINE_RECORDS = 256
"""Identity records kept (the newest): those of runs that may have left a lock."""

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36
_DEATH_SIGNAL = signal.SIGUSR1
_PARENT_DIED = "the process that started the engine is gone"


def _parent_died(detail: str = "") -> Stop:
    return Stop("parent", f"{_PARENT_DIED}{detail}")


# ---------------------------------------------------------------- the caller's side
@dataclass(frozen=True, slots=True)
class Control:
    """What the caller tells its guards (the control file)."""

    lease_until: float | None = None
    """End of the caller's Lease term (boot time); ``None`` when no Lease fences the
    run. Past it, no engine of the caller may run."""
    recorded: tuple[int, ...] = ()
    """CLI pids the Lease records; under a Lease a CLI starts only once listed here."""
    run_until: float | None = None
    """The current engine operation's deadline (boot time), if one is running."""
    run_seconds: float | None = None
    """That deadline's length, for the message."""
    interrupt: str | None = None
    """Set to stop every engine of the caller now, saying why."""
    preemptible: bool = False
    """Whether the current operation may give way to a more urgent one (a refresh does:
    it only reads, and runs again after the change it made way for)."""
    preempt: str | None = None
    """Set, while a preemptible operation runs, to stop it now, saying why."""
    grace: float = 3.0
    """Seconds between the SIGINT and the SIGKILL."""

    @classmethod
    def from_json(cls, data: Any) -> Control:
        """Read the control file's content; anything unexpected is ignored."""
        if not isinstance(data, dict):
            return cls()

        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        recorded = data.get("recorded")
        interrupt = data.get("interrupt")
        preempt = data.get("preempt")
        return cls(
            lease_until=number("lease_until"),
            recorded=tuple(int(p) for p in recorded if isinstance(p, int))
            if isinstance(recorded, list)
            else (),
            run_until=number("run_until"),
            run_seconds=number("run_seconds"),
            interrupt=interrupt if isinstance(interrupt, str) else None,
            preemptible=data.get("preemptible") is True,
            preempt=preempt if isinstance(preempt, str) else None,
            grace=number("grace") or 3.0,
        )


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One engine command, as its guard saw it."""

    pid: int
    """The CLI's pid (what the backend's lock names)."""
    guard: int
    """The guard's pid."""
    command: tuple[str, ...]
    """The CLI's subcommand (``up``, ``stack``, ``export``...), without options."""
    started: float
    """Unix time the CLI was started."""
    ended: float
    """Unix time the last process of the run was gone."""
    code: int
    """The guard's exit code."""
    interrupted: str | None = None
    """Why the guard stopped the run; ``None`` when it ended by itself."""
    cause: str | None = None
    """The kind of :class:`Stop` (``deadline``, ``lease``...), with ``interrupted``."""
    killed: int = 0
    """Processes the guard had to SIGKILL."""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalEntry:
        """Read one journal file."""
        return cls(
            pid=int(data["pid"]),
            guard=int(data["guard"]),
            command=tuple(str(c) for c in data.get("command") or ()),
            started=float(data["started"]),
            ended=float(data["ended"]),
            code=int(data["code"]),
            interrupted=data.get("interrupted"),
            cause=data.get("cause"),
            killed=int(data.get("killed") or 0),
        )


class GuardChannel:
    """The caller's side: a private directory its guards read and write.

    ``control.json`` (the caller writes, atomically), ``announce/<cli pid>`` (a guard
    waiting for, or running, its CLI), ``guards/<guard pid>`` (a live guard) and
    ``journal/<cli pid>.json`` (a finished command). Thread-safe: the elector renews the
    term while the loop starts and ends runs.
    """

    def __init__(
        self,
        directory: Path,
        *,
        grace: float = 3.0,
        leased: bool = False,
        clock: Any = boottime,
    ) -> None:
        """Create the channel.

        Args:
            directory: A directory only this process uses (created if missing).
            grace: Seconds between SIGINT and SIGKILL when a run is stopped.
            leased: Whether a Lease fences the runs: then no engine runs until the first
                term is granted (:meth:`lease_renewed`), and each CLI waits until its pid
                is recorded.
            clock: The host's boot time clock (shared with the guards).
        """
        self.directory = Path(directory)
        for sub in ("announce", "guards", "journal"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self._lock = threading.Lock()
        self._control = Control(lease_until=float("-inf") if leased else None, grace=grace)
        self._write(self._control)

    @property
    def control(self) -> Control:
        """What the guards are told now."""
        with self._lock:
            return self._control

    def env(self) -> dict[str, str]:
        """The variables that put an engine command under this channel."""
        return {CHANNEL_ENV: str(self.directory), PARENT_ENV: str(os.getpid())}

    def lease_renewed(self, valid_until: float, recorded: Sequence[int]) -> None:
        """The Lease was written: the term lasts until ``valid_until`` and records
        ``recorded``."""
        self._update(lease_until=valid_until, recorded=tuple(recorded))

    def term_left(self) -> float:
        """Seconds left in the current Lease term: ``inf`` when no Lease fences the runs,
        0 or less when there is no term. Every cluster write of the caller asks this
        right before it is sent (:meth:`twc.kube.client.KubeClient.fenced`)."""
        until = self.control.lease_until
        return math.inf if until is None else until - self._clock()

    def lease_ended(self) -> None:
        """The term is over (lost, handed over, released): stop every engine now."""
        if self.control.lease_until is not None:
            self._update(lease_until=self._clock())

    def interrupt(self, reason: str) -> None:
        """Stop every engine of this caller now (and refuse new ones)."""
        self._update(interrupt=reason)

    def preempt(self, reason: str) -> bool:
        """Stop the operation in progress if it may give way (:meth:`run`'s
        ``preemptible``); returns whether one was told to. No later operation is
        touched: the request ends with the operation it stopped."""
        with self._lock:
            if not self._control.preemptible:
                return False
            self._control = replace(self._control, preempt=reason)
            self._write(self._control)
            return True

    @property
    def preempted(self) -> str | None:
        """Why the operation in progress was told to give way; ``None`` if it was not."""
        return self.control.preempt

    @contextlib.contextmanager
    def run(self, seconds: float, *, preemptible: bool = False) -> Iterator[float]:
        """One engine operation with a deadline ``seconds`` from now.

        Args:
            seconds: The operation's deadline.
            preemptible: Whether :meth:`preempt` may stop it.

        Yields:
            Unix time the operation started (to find its journal entries).
        """
        started = time.time()
        self._update(
            run_until=self._clock() + seconds,
            run_seconds=seconds,
            preemptible=preemptible,
            preempt=None,
        )
        try:
            yield started
        finally:
            self._update(run_until=None, run_seconds=None, preemptible=False, preempt=None)

    @property
    def running(self) -> bool:
        """Whether an engine operation is in progress."""
        return self.control.run_until is not None

    def announced(self) -> list[int]:
        """CLI pids whose guards wait for (or run under) the Lease record, oldest first."""
        found = []
        for path in (self.directory / "announce").iterdir():
            with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
                guard = int(json.loads(path.read_text())["guard"])
                if not pid_alive(guard):
                    path.unlink()  # a killed guard's: nothing waits for it any more
                    continue
                found.append((path.stat().st_mtime_ns, int(path.name)))
        return [pid for _, pid in sorted(found)]

    def journal(self, *, since: float = 0.0) -> list[JournalEntry]:
        """Commands that ended at or after ``since`` (Unix time), by start time."""
        entries = []
        for path in (self.directory / "journal").glob("*.json"):
            with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
                entry = JournalEntry.from_json(json.loads(path.read_text()))
                if entry.ended >= since:
                    entries.append(entry)
        return sorted(entries, key=lambda e: e.started)

    def live_guards(self) -> list[int]:
        """Pids of this channel's guards still running."""
        alive = []
        for path in (self.directory / "guards").iterdir():
            with contextlib.suppress(ValueError):
                pid = int(path.name)
                if pid_alive(pid):
                    alive.append(pid)
        return alive

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no guard of this channel runs; returns whether none does."""
        deadline = time.monotonic() + timeout
        while self.live_guards():
            if time.monotonic() >= deadline:
                return False
            time.sleep(TICK)
        return True

    def _update(self, **changes: Any) -> None:
        with self._lock:
            self._control = replace(self._control, **changes)
            self._write(self._control)

    def _write(self, control: Control) -> None:
        data = asdict(control)
        data["recorded"] = list(control.recorded)
        if data["lease_until"] == float("-inf"):
            data["lease_until"] = 0.0
        _write_atomically(self.directory / "control.json", json.dumps(data))


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)


# ------------------------------------------------------------------ the wrapper
def install_wrapper(real: str, *, root: Path) -> Path:
    """A directory with ``bin/pulumi`` running ``real`` under the guard.

    Content-addressed under the temporary directory (one per user, CLI and project), so
    every process of the machine shares it and nothing needs cleaning up. Point
    ``PulumiCommand(root=...)`` at the result.

    Args:
        real: The real CLI's path.
        root: The project root, where ``twc`` is importable from.

    Returns:
        The wrapper's root directory.
    """
    python = sys.executable
    script = (
        f"#!{python} -IS\n"
        f"# {GUARD_MARK}: runs {real} under twc's engine guard (twc/stackrun/guard.py).\n"
        "import sys\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "from twc.stackrun.guard import main\n"
        f"sys.exit(main({real!r}, sys.argv[1:]))\n"
    )
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    base = Path(tempfile.gettempdir()) / f"{GUARD_MARK}-{os.getuid()}-{digest}"
    if not _private_dir(base):
        base = Path(tempfile.mkdtemp(prefix=f"{GUARD_MARK}-"))
    target = base / "bin" / "pulumi"
    if not target.exists() or target.read_text() != script:
        target.parent.mkdir(mode=0o700, exist_ok=True)
        tmp = target.with_name(f".pulumi.{os.getpid()}")
        tmp.write_text(script)
        tmp.chmod(0o755)
        os.replace(tmp, target)
    return base


def _private_dir(path: Path) -> bool:
    # Shared /tmp: use the directory only if this user made it and no one else can write.
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        info = path.lstat()
    except OSError:
        return False
    return (
        path.is_dir()
        and not path.is_symlink()
        and info.st_uid == os.getuid()
        and not (info.st_mode & 0o022)
    )


# -------------------------------------------------------------- the guard's rules
class GuardAction(StrEnum):
    """What the guard does at one tick."""

    WAIT = "wait"
    """Nothing yet."""
    INTERRUPT = "interrupt"
    """SIGINT to the CLI's process group; the grace period starts."""
    KILL = "kill"
    """SIGKILL every descendant, until none is left."""
    FINISH = "finish"
    """The CLI exited: clean up what it left and exit with its code."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Why a run must stop."""

    cause: str
    """``deadline``, ``lease``, ``interrupt``, ``preempt``, ``parent`` or ``signal``."""
    text: str
    """The reason in words."""


def stop_reason(control: Control, *, now: float, requested: Stop | None) -> Stop | None:
    """Why the run must stop now, or ``None`` while it may go on.

    Args:
        control: The caller's current control file.
        now: Boot time (:func:`~twc.timestamps.boottime`).
        requested: A signal the guard received, or its parent's death.
    """
    if requested is not None:
        return requested
    if control.interrupt:
        return Stop("interrupt", control.interrupt)
    if control.preempt and control.preemptible:
        return Stop("preempt", control.preempt)
    if control.lease_until is not None and now >= control.lease_until:
        return Stop("lease", "the Lease term of the process that started the engine ended")
    if control.run_until is not None and now >= control.run_until:
        seconds = f" of {control.run_seconds:g} s" if control.run_seconds else ""
        return Stop("deadline", f"the engine run's deadline{seconds} passed")
    return None


def next_action(
    control: Control,
    *,
    now: float,
    exited: bool,
    requested: Stop | None,
    interrupted_at: float | None,
) -> tuple[GuardAction, Stop | None]:
    """The guard's move at one tick (pure: the timing argument is tested on it).

    Args:
        control: The caller's current control file.
        now: Boot time.
        exited: Whether the CLI has exited.
        requested: A signal the guard received, or its parent's death.
        interrupted_at: When the guard sent the SIGINT; ``None`` if it did not.

    Returns:
        The action and, for ``INTERRUPT``, the reason.
    """
    if exited:
        return GuardAction.FINISH, None
    if interrupted_at is None:
        reason = stop_reason(control, now=now, requested=requested)
        if reason is not None:
            return GuardAction.INTERRUPT, reason
        return GuardAction.WAIT, None
    if now - interrupted_at >= control.grace:
        return GuardAction.KILL, None
    return GuardAction.WAIT, None


# ----------------------------------------------------------------- processes
def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(pid) != "Z"


def _stat(pid: int) -> list[str]:
    # The fields after the command name (which may hold spaces and parentheses).
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def _state(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[0] if fields else None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _started(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field
    22); ``None`` when no such process runs (a zombie is gone)."""
    fields = _stat(pid)
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[19])


def _engines_dir() -> Path | None:
    base = Path(os.environ.get(ENGINES_ENV) or Path.home() / ".cache" / "twc" / "engines")
    with contextlib.suppress(OSError):
        base.parent.mkdir(parents=True, exist_ok=True)
    # Only a directory no one else can write to: a record there is proof.
    return base if _private_dir(base) else None


def _record_engine(pid: int) -> None:
    """Record the CLI ``pid``'s identity on this host (boot id, pid, start time)."""
    boot, start, where = _boot_id(), _started(pid), _engines_dir()
    if not boot or start is None or where is None:
        return  # no record: a lock it leaves is never judged gone by this host
    with contextlib.suppress(OSError):
        records = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in records[: max(0, len(records) - MAX_ENGINE_RECORDS + 1)]:
            old.unlink(missing_ok=True)
        for other in where.glob("*.json"):
            if not other.name.startswith(f"{boot}-"):
                other.unlink(missing_ok=True)  # an earlier boot's: its processes are gone
        text = json.dumps({"boot": boot, "pid": pid, "start": start})
        _write_atomically(where / f"{boot}-{pid}.json", text)


def _forget_engine(pid: int) -> None:
    where = _engines_dir()
    if where is not None:
        (where / f"{_boot_id()}-{pid}.json").unlink(missing_ok=True)


def engine_alive(pid: int) -> bool:
    """Whether the engine CLI ``pid`` that a lock naming this host's name took may still
    be running: ``False`` only when a guard recorded that pid on this boot of this host
    and no process with that pid and start time runs now.

    A lock names a host name and a pid. Other machines may share the host name, and pids
    are reused: without a record of this boot a dead pid proves nothing (the lock may
    be another machine's), and with one a live pid started at another time is another
    process (the lock's holder is gone).
    """
    boot, where = _boot_id(), _engines_dir()
    if not boot or where is None:
        return True
    try:
        record = json.loads((where / f"{boot}-{pid}.json").read_text())
    except (OSError, ValueError):
        return True
    if not isinstance(record, dict) or record.get("boot") != boot or record.get("pid") != pid:
        return True
    return _started(pid) == record.get("start")


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (through ``/proc``; empty where there is none).

    Zombies are left out: they are gone already and only wait to be reaped.
    """
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        child, state, parent = int(entry.name), fields[0], int(fields[1])
        children.setdefault(parent, []).append(child)
        states[child] = state
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        current = todo.pop()
        if states.get(current) != "Z":
            found.append(current)
        todo.extend(children.get(current, []))
    return found


def _prctl(option: int, value: int | bytes) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class _Guard:
    """One command under the guard."""

    def __init__(self, real: str, args: list[str]) -> None:
        self.real = real
        self.args = args
        self.requested: Stop | None = None
        self.pid = os.getpid()
        self.channel: Path | None = None
        self.parent = os.getppid()
        self.control_mtime: int | None = None
        self.control = Control()
        self.child: int | None = None
        self.code: int | None = None
        self.interrupted: Stop | None = None
        self.interrupted_at: float | None = None
        self.killed = 0
        self.started = time.time()

    # -- setup ------------------------------------------------------------
    def prepare(self) -> Stop | None:
        """Become subreaper, learn about the parent's death; returns a refusal."""
        _prctl(_PR_SET_NAME, b"twc-guard")
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        signal.signal(_DEATH_SIGNAL, self._on_parent_death)
        _prctl(_PR_SET_PDEATHSIG, int(_DEATH_SIGNAL))
        with contextlib.suppress(OSError):
            # Out of the caller's process group: a kill of that group spares the guard,
            # which then takes the CLI and its plugins down.
            os.setpgid(0, 0)
        channel = os.environ.get(CHANNEL_ENV)
        expected = os.environ.get(PARENT_ENV)
        if channel:
            if expected != str(self.parent):
                return _parent_died(f" (expected pid {expected}, found {self.parent})")
            self.channel = Path(channel)
            self.read_control()
        if os.getppid() != self.parent:
            return _parent_died()
        return None

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        self.requested = self.requested or Stop("signal", f"the guard received {name}")

    def _on_parent_death(self, _signum: int, _frame: object) -> None:
        # Linux sends the parent-death signal when the *thread* that forked the guard
        # exits, even while the caller lives on (its other threads adopt the guard, and
        # the parent pid stays the same). Only a changed parent pid is the caller's death.
        self.check_parent()

    def read_control(self) -> None:
        if self.channel is None:
            return
        path = self.channel / "control.json"
        try:
            mtime = path.stat().st_mtime_ns
            if mtime == self.control_mtime:
                return
            self.control = Control.from_json(json.loads(path.read_text()))
            self.control_mtime = mtime
        except (OSError, ValueError):
            # Unreadable for a moment (or gone with its directory): keep the last one;
            # a caller that is gone is noticed through the parent check.
            return

    def check_parent(self) -> None:
        if self.requested is None and os.getppid() != self.parent:
            self.requested = _parent_died()

    # -- the run ----------------------------------------------------------
    def run(self) -> int:
        refusal = self.prepare()
        if refusal is None:
            refusal = stop_reason(self.control, now=boottime(), requested=self.requested)
        if refusal is not None:
            self.say(f"not starting the engine: {refusal.text}")
            return 1
        go_read, go_write = os.pipe()
        self.child = os.fork()
        if self.child == 0:  # pragma: no cover - the child execs at once
            self._exec(go_read, go_write)
        os.close(go_read)
        with contextlib.suppress(OSError):
            os.setpgid(self.child, self.child)  # before any signal to its group
        self._mark("guards", self.pid, "")
        _record_engine(self.child)
        self._mark("announce", self.child, json.dumps({"guard": self.pid}))
        try:
            refusal = self.await_record()
            if refusal is not None:
                os.close(go_write)  # the child exits without starting the CLI
                self.interrupted = refusal
                self.say(f"not starting the engine: {refusal.text}")
                self.wait_child()
                return 1
            os.write(go_write, b"go")
            os.close(go_write)
            self.supervise()
        finally:
            self.kill_all()
            self.finish()
        return self.exit_code()

    def _exec(self, go_read: int, go_write: int) -> None:  # pragma: no cover - in the child
        try:
            os.close(go_write)
            os.setpgid(0, 0)
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, _DEATH_SIGNAL):
                signal.signal(signum, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            if not os.read(go_read, 2):
                os._exit(126)
            os.execv(self.real, [self.real, *self.args])  # noqa: S606 - the CLI itself, no shell
        except BaseException:  # noqa: BLE001 - a forked child must never return into the guard
            os._exit(127)

    def await_record(self) -> Stop | None:
        """Under a Lease: wait until the CLI's pid is recorded in it."""
        if self.channel is None or self.control.lease_until is None:
            return None
        deadline = time.monotonic() + RECORD_TIMEOUT
        while True:
            self.read_control()
            self.check_parent()
            if self.child in self.control.recorded:
                return None
            reason = stop_reason(self.control, now=boottime(), requested=self.requested)
            if reason is not None:
                return reason
            if time.monotonic() >= deadline:
                text = f"its pid was not recorded in the Lease within {RECORD_TIMEOUT:g} s"
                return Stop("lease", text)
            time.sleep(TICK / 2)

    def supervise(self) -> None:
        while True:
            self.reap()
            self.read_control()
            self.check_parent()
            action, reason = next_action(
                self.control,
                now=boottime(),
                exited=self.code is not None,
                requested=self.requested,
                interrupted_at=self.interrupted_at,
            )
            if action is GuardAction.FINISH:
                return
            if action is GuardAction.INTERRUPT:
                self.interrupted, self.interrupted_at = reason, boottime()
                assert reason is not None
                self.say(
                    f"interrupting the engine: {reason.text} (SIGINT, then SIGKILL after "
                    f"{self.control.grace:g} s)"
                )
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    assert self.child is not None
                    os.killpg(self.child, signal.SIGINT)
            elif action is GuardAction.KILL:
                return
            time.sleep(TICK)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.child:
                self.code = os.waitstatus_to_exitcode(status)

    def wait_child(self) -> None:
        assert self.child is not None
        with contextlib.suppress(ChildProcessError):
            _, status = os.waitpid(self.child, 0)
            self.code = os.waitstatus_to_exitcode(status)

    def kill_all(self) -> None:
        """SIGKILL every descendant until none is left (orphans come to the guard)."""
        if self.code is not None and self.interrupted is None:
            # The CLI ended by itself; what it left gets a moment to exit on its own.
            settle = time.monotonic() + LEFTOVER_GRACE
            while descendants(self.pid) and time.monotonic() < settle:
                self.reap()
                time.sleep(TICK)
        for _ in range(200):
            self.reap()
            found = descendants(self.pid)
            if self.child is not None and self.code is None and self.child not in found:
                found.append(self.child)  # where /proc is not there to list it
            if not found:
                break
            for pid in found:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    self.killed += 1
            time.sleep(TICK / 5)
        self.reap()
        if self.code is None:
            self.wait_child()

    def finish(self) -> None:
        if self.killed:
            self.say(f"killed {self.killed} process(es) of the engine run")
        if self.child is not None and self.code == 0 and self.interrupted is None:
            _forget_engine(self.child)  # it ended by itself and released its lock
        if self.channel is None or self.child is None:
            return
        entry = JournalEntry(
            pid=self.child,
            guard=self.pid,
            command=_subcommand(self.args),
            started=self.started,
            ended=time.time(),
            code=self.exit_code(),
            interrupted=self.interrupted.text if self.interrupted else None,
            cause=self.interrupted.cause if self.interrupted else None,
            killed=self.killed,
        )
        with contextlib.suppress(OSError):
            data = asdict(entry)
            data["command"] = list(entry.command)
            _write_atomically(self.channel / "journal" / f"{self.child}.json", json.dumps(data))
            (self.channel / "announce" / str(self.child)).unlink(missing_ok=True)
            (self.channel / "guards" / str(self.pid)).unlink(missing_ok=True)

    def exit_code(self) -> int:
        if self.code is None:
            return 1
        if self.code < 0:
            return 128 - self.code
        if self.interrupted is not None and self.code == 0:
            return 1
        return self.code

    def _mark(self, sub: str, pid: int, text: str) -> None:
        if self.channel is None:
            return
        with contextlib.suppress(OSError):
            (self.channel / sub / str(pid)).write_text(text)

    def say(self, text: str) -> None:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"{GUARD_MARK}: {text}\n")
            sys.stderr.flush()


def _subcommand(args: Sequence[str]) -> tuple[str, ...]:
    # ["--non-interactive", "stack", "export", "--stack", "s"] -> ("stack", "export")
    words: list[str] = []
    for arg in args:
        if arg.startswith("-"):
            if words:
                break
            continue
        words.append(arg)
    return tuple(words[:2])


def main(real: str, args: list[str]) -> int:
    """Run the CLI ``real`` with ``args`` under the guard; returns its exit code."""
    return _Guard(real, list(args)).run()
