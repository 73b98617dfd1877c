"""Background processes that outlive the command that started them, tracked by pid.

``twc local up`` starts etcd, kube-apiserver, the controllers, KWOK and the Temporal dev
server (and, with ``--run-workers``, one worker process per Running pod) and returns;
``twc local down`` (possibly from another shell) stops exactly those processes. A pid
alone is not enough to know a process is still ours (pids are reused), so each record
keeps the process start time from ``/proc`` and the check compares both.

A test session's environments must not outlive the session, however it ends: after
:func:`end_with_this_process`, every process :func:`start` starts is killed by the
kernel when the process that started it ends (Linux's parent-death signal).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_prctl: Callable[[int, int], int] = ctypes.CDLL(None, use_errno=True).prctl
_owner: int | None = None  # the pid whose children start() ties to it


def end_with_parent(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent ends."""
    if _prctl(_PR_SET_PDEATHSIG, signum) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def end_with_this_process() -> None:
    """Have every process :func:`start` starts from now on killed when this one ends,
    even by SIGKILL. The test session does this; ``twc local up`` does not, since its
    environment outlives the command."""
    global _owner
    _owner = os.getpid()


def _tied(parent: int) -> None:  # in the child, between fork and exec
    if _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
        os._exit(1)  # untied, or the parent ended before the tie held


@dataclass(frozen=True)
class ProcessRecord:
    """One started process: enough to find it again and to say why it died."""

    name: str
    pid: int
    start_ticks: int
    argv: tuple[str, ...]
    log_file: str

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "pid": self.pid,
            "startTicks": self.start_ticks,
            "argv": list(self.argv),
            "logFile": self.log_file,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessRecord:
        argv = data.get("argv", [])
        return cls(
            name=str(data["name"]),
            pid=int(str(data["pid"])),
            start_ticks=int(str(data.get("startTicks", 0))),
            argv=tuple(str(a) for a in argv) if isinstance(argv, list) else (),
            log_file=str(data.get("logFile", "")),
        )


def _start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may contain spaces, so split after ')'.
    rest = stat.rsplit(")", 1)[1].split()
    if rest[0] == "Z":  # a zombie has exited
        return None
    return int(rest[19])


def is_alive(record: ProcessRecord) -> bool:
    """True while the recorded process (not merely its pid) is running."""
    return _start_ticks(record.pid) == record.start_ticks


def start(
    name: str,
    argv: Sequence[str],
    log_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> ProcessRecord:
    """Start ``argv`` detached from this process (own session), logging to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=functools.partial(_tied, _owner) if _owner == os.getpid() else None,
        )
    log.debug("started %s pid %d: %s", name, proc.pid, " ".join(argv))
    return record(name, proc.pid, argv, log_file)


def record(name: str, pid: int, argv: Sequence[str], log_file: Path) -> ProcessRecord:
    """The record of a process just started (its start time read from ``/proc``)."""
    return ProcessRecord(name, pid, _start_ticks(pid) or 0, tuple(argv), str(log_file))


def stop(record: ProcessRecord, timeout: float = 15.0) -> bool:
    """Stop the recorded process: SIGTERM, then SIGKILL after ``timeout`` seconds.

    Returns:
        True if it was running and is now stopped, False if it was already gone.
    """
    if not is_alive(record):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pid, signal.SIGTERM)
    if not wait_for(lambda: not is_alive(record), timeout):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        wait_for(lambda: not is_alive(record), 5.0)
    _reap(record.pid)
    return True


def _reap(pid: int) -> None:
    # A child of this very process stays a zombie until waited for.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def log_tail(record: ProcessRecord, lines: int = 20) -> str:
    """The last lines of a process's log, for crash reports."""
    try:
        text = Path(record.log_file).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
