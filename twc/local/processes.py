"""Background processes that outlive their starter, recorded by pid and start time (a pid
alone may be reused); after :func:`end_with_this_process` they die with the starter."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twc.engine.supervisor import start_ticks, write_atomically

_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl
_owner: int | None = None  # the pid whose children start() ties to it


def end_with_parent(signum: int) -> None:
    """Have the kernel send ``signum`` to this process when its parent ends."""
    if _prctl(_PR_SET_PDEATHSIG, signum) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def end_with_this_process() -> None:
    """Have every process :func:`start` starts from now on killed when this one ends."""
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

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "argv": list(self.argv)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProcessRecord:
        return cls(**{**data, "argv": tuple(data["argv"])})


def is_alive(record: ProcessRecord) -> bool:
    """True while the recorded process (not merely its pid) runs."""
    return start_ticks(record.pid) == record.start_ticks


def start(name: str, argv: Sequence[str], log_file: Path, **options: Any) -> ProcessRecord:
    """:func:`popen`, recorded as ``name``."""
    return record(name, popen(argv, log_file, **options).pid, argv, log_file)


def popen(
    argv: Sequence[str],
    log_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, logging to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=functools.partial(_tied, _owner) if _owner == os.getpid() else None,
        )


def record(name: str, pid: int, argv: Sequence[str], log_file: Path) -> ProcessRecord:
    return ProcessRecord(name, pid, start_ticks(pid) or 0, tuple(argv), str(log_file))


def stop(record: ProcessRecord, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded process group, SIGKILL after ``timeout``; False if it was gone."""
    if not is_alive(record):
        return False
    for signum, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signum)
        deadline = time.monotonic() + wait
        while is_alive(record) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not is_alive(record):
            break
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(record.pid, os.WNOHANG)  # a child of this process stays a zombie till then
    return True


def recorded(file: Path) -> list[ProcessRecord]:
    """The processes a ``{"workers": [record, ...]}`` file lists."""
    try:
        return [ProcessRecord.from_json(r) for r in json.loads(file.read_text())["workers"]]
    except FileNotFoundError:
        return []


def stop_listed(file: Path) -> int:
    """Stop every process the file lists, remove the file; how many stopped."""
    found = recorded(file)
    file.unlink(missing_ok=True)
    return sum(stop(r) for r in found)


def write_json(path: Path, data: Any) -> None:
    """Replace ``path`` by ``data`` as JSON in one step."""
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True))


def log_tail(record: ProcessRecord, lines: int = 20) -> str:
    try:
        return "\n".join(Path(record.log_file).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
