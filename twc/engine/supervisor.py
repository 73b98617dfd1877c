"""The engine guard: no engine, language-host or plugin process outlives its run.

A ``pulumi`` wrapper runs :func:`main`, a subreaper that follows its caller's control file,
SIGINTs then SIGKILLs every descendant of a stopped run, and journals each command.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
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

CHANNEL_ENV = "TWC_ENGINE_GUARD"  # the caller's channel directory
PARENT_ENV = "TWC_ENGINE_GUARD_PARENT"  # the pid the channel belongs to
GUARD_MARK = "twc-engine-guard"  # in the wrapper's path, to spot it in a process list
ENGINES_ENV = "TWC_ENGINES_DIR"  # where guards record their CLIs' identities
TICK = 0.05
RECORD_TIMEOUT = 30.0  # seconds a CLI waits, under a Lease, for its pid to be recorded
LEFTOVER_GRACE = 0.5  # seconds a normally-ended CLI's leftovers get to exit by themselves
MAX_ENGINE_RECORDS = 256

_PR_SET_PDEATHSIG, _PR_SET_NAME, _PR_SET_CHILD_SUBREAPER = 1, 15, 36
_DEATH_SIGNAL = signal.SIGUSR1
_PARENT_DIED = "the process that started the engine is gone"


@dataclass(frozen=True, slots=True)
class Control:
    """What the caller tells its guards (the control file); times are boot time."""

    lease_until: float | None = None  # end of the Lease term; None: no Lease fences runs
    recorded: tuple[int, ...] = ()  # CLI pids the Lease records
    run_until: float | None = None  # the current operation's deadline
    run_seconds: float | None = None
    interrupt: str | None = None  # stop every engine now, saying why
    preemptible: bool = False  # whether the current operation may give way
    preempt: str | None = None  # stop the preemptible operation now, saying why
    grace: float = 3.0  # seconds between SIGINT and SIGKILL
    niceness: int = 0  # added to each CLI's (its plugins inherit it); a refresh's, 10 more


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One engine command, as its guard saw it (times are Unix time)."""

    pid: int  # the CLI's pid (what the backend's lock names)
    guard: int
    command: tuple[str, ...]  # the subcommand without options, e.g. ("stack", "export")
    started: float
    ended: float
    code: int  # the guard's exit code
    interrupted: str | None = None  # why the guard stopped the run
    cause: str | None = None  # the Stop's cause
    killed: int = 0  # processes the guard had to SIGKILL

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalEntry:
        """Read one journal file."""
        return cls(**{**data, "command": tuple(data.get("command") or ())})


class GuardChannel:
    """The caller's side: a private directory its guards read and write (thread-safe).

    ``leased``: no engine runs before the first term; each CLI waits to be recorded.
    """

    def __init__(
        self, directory: Path, *, grace: float = 3.0, leased: bool = False, niceness: int = 0
    ) -> None:
        self.directory = Path(directory)
        for sub in ("announce", "guards", "journal"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Leased: a term that ended at boot, until the first renewal.
        self._control = Control(0.0 if leased else None, grace=grace, niceness=niceness)
        self._write()

    @property
    def control(self) -> Control:
        """What the guards are told now."""
        with self._lock:
            return self._control

    def env(self) -> dict[str, str]:
        """The variables that put an engine command under this channel."""
        return {CHANNEL_ENV: str(self.directory), PARENT_ENV: str(os.getpid())}

    def lease_renewed(self, valid_until: float, recorded: Sequence[int]) -> None:
        """The term now lasts until ``valid_until``; the Lease records ``recorded``."""
        self._update(lease_until=valid_until, recorded=tuple(recorded))

    def term_left(self) -> float:
        """Seconds left in the Lease term: ``inf`` without a Lease, <= 0 without a term."""
        until = self.control.lease_until
        return math.inf if until is None else until - boottime()

    def lease_ended(self) -> None:
        """The term is over: stop every engine now."""
        if self.control.lease_until is not None:
            self._update(lease_until=boottime())

    def interrupt(self, reason: str) -> None:
        """Stop every engine of this caller now (and refuse new ones)."""
        self._update(interrupt=reason)

    def preempt(self, reason: str) -> bool:
        """Stop the operation in progress if it is preemptible; returns whether it was."""
        with self._lock:
            if self._control.preemptible:
                self._control = replace(self._control, preempt=reason)
                self._write()
            return self._control.preemptible

    @property
    def preempted(self) -> str | None:
        """Why the operation in progress was told to give way, if it was."""
        return self.control.preempt

    @contextlib.contextmanager
    def run(self, seconds: float, *, preemptible: bool = False) -> Iterator[float]:
        """One engine operation with a deadline; yields its Unix start time."""
        started = time.time()
        until = boottime() + seconds
        self._update(run_until=until, run_seconds=seconds, preemptible=preemptible, preempt=None)
        try:
            yield started
        finally:
            self._update(run_until=None, run_seconds=None, preemptible=False, preempt=None)

    def announced(self) -> list[int]:
        """CLI pids whose live guards wait for (or run under) the Lease, oldest first."""
        found = []
        for path in (self.directory / "announce").iterdir():
            with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
                if not pid_alive(int(json.loads(path.read_text())["guard"])):
                    path.unlink()  # a killed guard's: nothing waits for it any more
                    continue
                found.append((path.stat().st_mtime_ns, int(path.name)))
        return [pid for _, pid in sorted(found)]

    def journal(self, *, since: float = 0.0) -> list[JournalEntry]:
        """Commands that ended at or after ``since`` (Unix time), by start time."""
        entries = []
        for path in (self.directory / "journal").glob("*.json"):
            with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
                entries.append(JournalEntry.from_json(json.loads(path.read_text())))
        return sorted((e for e in entries if e.ended >= since), key=lambda e: e.started)

    def live_guards(self) -> list[int]:
        """Pids of this channel's guards still running."""
        pids = [int(p.name) for p in (self.directory / "guards").iterdir() if p.name.isdigit()]
        return [pid for pid in pids if pid_alive(pid)]

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
            self._write()

    def _write(self) -> None:
        write_atomically(self.directory / "control.json", json.dumps(asdict(self._control)))


def write_atomically(path: Path, text: str, *, mode: int | None = None) -> None:
    """Replace ``path`` by ``text`` in one step (a file of this process and thread first)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    if mode is not None:
        tmp.chmod(mode)
    os.replace(tmp, path)


def install_wrapper(real: str, *, root: Path) -> Path:
    """A directory with ``bin/pulumi`` running ``real`` under the guard, for ``PulumiCommand``."""
    script = (
        f"#!{sys.executable} -IS\n"
        f"# {GUARD_MARK}: runs {real} under twc's engine guard.\n"
        "import sys\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        f"from {__name__} import main\n"
        f"sys.exit(main({real!r}, sys.argv[1:]))\n"
    )
    digest = hashlib.sha256(script.encode()).hexdigest()[:16]
    base = Path(tempfile.gettempdir()) / f"{GUARD_MARK}-{os.getuid()}-{digest}"
    if not _private_dir(base):
        base = Path(tempfile.mkdtemp(prefix=f"{GUARD_MARK}-"))
    target = base / "bin" / "pulumi"
    if not target.exists() or target.read_text() != script:
        target.parent.mkdir(mode=0o700, exist_ok=True)
        write_atomically(target, script, mode=0o755)
    return base


def _private_dir(path: Path) -> bool:
    # Shared /tmp: use the directory only if this user made it and no one else can write.
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        info = path.lstat()
    except OSError:
        return False
    mine = info.st_uid == os.getuid() and not info.st_mode & 0o022
    return path.is_dir() and not path.is_symlink() and mine


class GuardAction(StrEnum):
    """What the guard does at one tick."""

    WAIT = "wait"
    INTERRUPT = "interrupt"  # SIGINT to the CLI's group; the grace period starts
    KILL = "kill"  # SIGKILL every descendant until none is left
    FINISH = "finish"  # the CLI exited


@dataclass(frozen=True, slots=True)
class Stop:
    """Why a run must stop: ``cause`` (deadline, lease, interrupt...) and ``text``."""

    cause: str
    text: str


def stop_reason(control: Control, *, now: float, requested: Stop | None) -> Stop | None:
    """Why the run must stop at boot time ``now``, or ``None`` while it may go on."""
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
    """The guard's move at one tick, with the reason for an ``INTERRUPT``."""
    if exited:
        return GuardAction.FINISH, None
    if interrupted_at is not None:
        killing = now - interrupted_at >= control.grace
        return (GuardAction.KILL if killing else GuardAction.WAIT), None
    reason = stop_reason(control, now=now, requested=requested)
    return (GuardAction.WAIT if reason is None else GuardAction.INTERRUPT), reason


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _stat(pid)[:1] != ["Z"]


def _stat(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot; ``None`` if gone or a zombie."""
    found = _stat(pid)
    return None if len(found) < 20 or found[0] == "Z" else int(found[19])


def _engines_dir() -> Path | None:
    base = Path(os.environ.get(ENGINES_ENV) or Path.home() / ".cache" / "twc" / "engines")
    with contextlib.suppress(OSError):
        base.parent.mkdir(parents=True, exist_ok=True)
    # Only a directory no one else can write to: a record there is proof.
    return base if _private_dir(base) else None


def _record_engine(pid: int) -> None:
    boot, start, where = _boot_id(), start_ticks(pid), _engines_dir()
    if not boot or start is None or where is None:
        return  # no record: a lock it leaves is never judged gone by this host
    mine = where / f"{boot}-{pid}.json"
    with contextlib.suppress(OSError):
        write_atomically(mine, json.dumps({"boot": boot, "pid": pid, "start": start}))
    others = []  # other guards' records come and go meanwhile: one gone is skipped
    for path in set(where.glob("*.json")) - {mine}:
        with contextlib.suppress(OSError):
            others.append((path.stat().st_mtime_ns, path))
    with contextlib.suppress(OSError):  # the oldest make room for this one
        for index, (_, old) in enumerate(sorted(others)):  # and an earlier boot's: gone
            if index <= len(others) - MAX_ENGINE_RECORDS or not old.name.startswith(f"{boot}-"):
                old.unlink(missing_ok=True)


def engine_alive(pid: int) -> bool:
    """Whether the engine CLI ``pid`` a lock on this host names may still run; ``False``
    only when a guard recorded it on this boot and that process is gone."""
    boot, where = _boot_id(), _engines_dir()
    if not boot or where is None:
        return True
    try:
        record = json.loads((where / f"{boot}-{pid}.json").read_text())
    except (OSError, ValueError):
        return True
    if not isinstance(record, dict) or record.get("boot") != boot or record.get("pid") != pid:
        return True
    return start_ticks(pid) == record.get("start")


def descendants(pid: int) -> list[int]:
    """Every live (not zombie) process below ``pid``, through ``/proc``."""
    children: dict[int, list[int]] = {}
    zombies: set[int] = set()
    for entry in Path("/proc").glob("[0-9]*"):
        found = _stat(int(entry.name))
        if len(found) > 1:
            children.setdefault(int(found[1]), []).append(int(entry.name))
            if found[0] == "Z":
                zombies.add(int(entry.name))
    below: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        current = todo.pop()
        if current not in zombies:
            below.append(current)
        todo.extend(children.get(current, []))
    return below


def _prctl(option: int, value: int | bytes) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


class _Guard:
    """One command under the guard."""

    def __init__(self, real: str, args: list[str]) -> None:
        self.real, self.args = real, args
        self.pid, self.parent = os.getpid(), os.getppid()
        self.requested: Stop | None = None
        self.channel: Path | None = None
        self.control_mtime: int | None = None
        self.control = Control()
        self.child: int | None = None
        self.code: int | None = None
        self.interrupted: Stop | None = None
        self.interrupted_at: float | None = None
        self.killed = 0
        self.started = time.time()

    def prepare(self) -> Stop | None:
        """Become subreaper, learn about the parent's death; returns a refusal."""
        _prctl(_PR_SET_NAME, b"twc-guard")
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        # Linux sends it when the *thread* that forked the guard exits, even while the
        # caller lives on: only a changed parent pid is the caller's death.
        signal.signal(_DEATH_SIGNAL, lambda _s, _f: self.check_parent())
        _prctl(_PR_SET_PDEATHSIG, int(_DEATH_SIGNAL))
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # a kill of the caller's group spares the guard
        channel, expected = os.environ.get(CHANNEL_ENV), os.environ.get(PARENT_ENV)
        if channel:
            if expected != str(self.parent):
                return Stop(
                    "parent", f"{_PARENT_DIED} (expected pid {expected}, found {self.parent})"
                )
            self.channel = Path(channel)
            self.read_control()
        return Stop("parent", _PARENT_DIED) if os.getppid() != self.parent else None

    def _on_signal(self, signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        self.requested = self.requested or Stop("signal", f"the guard received {name}")

    def read_control(self) -> None:
        if self.channel is None:
            return
        path = self.channel / "control.json"
        # Unreadable for a moment (or gone): keep the last; a gone caller is seen otherwise.
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            mtime = path.stat().st_mtime_ns
            if mtime != self.control_mtime:
                data = json.loads(path.read_text())
                self.control = Control(**{**data, "recorded": tuple(data.get("recorded") or ())})
                self.control_mtime = mtime

    def check_parent(self) -> None:
        if self.requested is None and os.getppid() != self.parent:
            self.requested = Stop("parent", _PARENT_DIED)

    def run(self) -> int:
        refusal = self.prepare()
        refusal = refusal or stop_reason(self.control, now=boottime(), requested=self.requested)
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
            self.interrupted = self.await_record()
            if self.interrupted is not None:
                os.close(go_write)  # the child exits without starting the CLI
                self.say(f"not starting the engine: {self.interrupted.text}")
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
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            if not os.read(go_read, 2):
                os._exit(126)
            refresh = self.control.niceness and _subcommand(self.args)[:1] == ("refresh",)
            os.nice(self.control.niceness + (10 if refresh else 0))
            os.execv(self.real, [self.real, *self.args])  # noqa: S606 - the CLI itself, no shell
        except BaseException:  # noqa: BLE001 - a forked child must never return into the guard
            os._exit(127)

    def await_record(self) -> Stop | None:
        """Under a Lease: wait until the CLI's pid is recorded in it."""
        if self.channel is None or self.control.lease_until is None:
            return None
        deadline = time.monotonic() + RECORD_TIMEOUT
        while self.child not in self.control.recorded:
            reason = stop_reason(self.control, now=boottime(), requested=self.requested)
            if reason is not None:
                return reason
            if time.monotonic() >= deadline:
                text = f"its pid was not recorded in the Lease within {RECORD_TIMEOUT:g} s"
                return Stop("lease", text)
            time.sleep(TICK / 2)
            self.read_control()
            self.check_parent()
        return None

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
            if action in (GuardAction.FINISH, GuardAction.KILL):
                return
            if action is GuardAction.INTERRUPT and reason is not None:
                self.interrupted, self.interrupted_at = reason, boottime()
                after = f"SIGINT, then SIGKILL after {self.control.grace:g} s"
                self.say(f"interrupting the engine: {reason.text} ({after})")
                assert self.child is not None
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.child, signal.SIGINT)
            time.sleep(TICK)

    def reap(self) -> None:
        with contextlib.suppress(ChildProcessError):
            while (found := os.waitpid(-1, os.WNOHANG))[0] != 0:
                if found[0] == self.child:
                    self.code = os.waitstatus_to_exitcode(found[1])

    def wait_child(self) -> None:
        assert self.child is not None
        with contextlib.suppress(ChildProcessError):
            self.code = os.waitstatus_to_exitcode(os.waitpid(self.child, 0)[1])

    def kill_all(self) -> None:
        """SIGKILL every descendant until none is left (orphans come to the guard)."""
        if self.code is not None and self.interrupted is None:
            settle = time.monotonic() + LEFTOVER_GRACE  # leftovers may exit by themselves
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
        if self.child is None:
            return
        where = _engines_dir()
        if self.code == 0 and self.interrupted is None and where is not None:
            (where / f"{_boot_id()}-{self.child}.json").unlink(missing_ok=True)
        if self.channel is None:
            return
        stop, command = self.interrupted, _subcommand(self.args)
        entry = JournalEntry(
            self.child, self.pid, command, self.started, time.time(), self.exit_code()
        )
        if stop is not None:
            entry = replace(entry, interrupted=stop.text, cause=stop.cause)
        with contextlib.suppress(OSError):
            journal = self.channel / "journal" / f"{self.child}.json"
            write_atomically(journal, json.dumps(asdict(replace(entry, killed=self.killed))))
            (self.channel / "announce" / str(self.child)).unlink(missing_ok=True)
            (self.channel / "guards" / str(self.pid)).unlink(missing_ok=True)

    def exit_code(self) -> int:
        if self.code is None:
            return 1
        if self.code < 0:
            return 128 - self.code
        return 1 if self.interrupted is not None and self.code == 0 else self.code

    def _mark(self, sub: str, pid: int, text: str) -> None:
        if self.channel is not None:
            with contextlib.suppress(OSError):
                (self.channel / sub / str(pid)).write_text(text)

    def say(self, text: str) -> None:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"{GUARD_MARK}: {text}\n")
            sys.stderr.flush()


def _subcommand(args: Sequence[str]) -> tuple[str, ...]:
    # The first two words after the leading options, up to the next option.
    words = itertools.dropwhile(lambda arg: arg.startswith("-"), args)
    return tuple(itertools.islice(itertools.takewhile(lambda a: not a.startswith("-"), words), 2))


def main(real: str, args: list[str]) -> int:
    """Run the CLI ``real`` with ``args`` under the guard; returns its exit code."""
    return _Guard(real, list(args)).run()
