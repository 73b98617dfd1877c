"""What a run costs besides time: peak memory of the daemon and of the engine processes
it starts, and the bytes written to the state backend.

* Memory comes from ``/proc``: the daemon's own ``VmHWM`` (its peak resident set, kept
  by the kernel), and for the engine (the ``pulumi`` CLI, the language host, the
  providers: the daemon's descendants) the largest ``VmRSS`` each process showed while
  sampled every 100 ms, and the largest sum over all of them at one moment.
* Bytes written to a ``file://`` backend are sampled from the stack's files every 10 ms:
  each new (mtime, size) of a file counts as one write of that size (two writes within
  10 ms count once, so this is a lower bound). For PostgreSQL the server's own count is
  read instead: the WAL bytes the ``up`` produced (``pg_current_wal_lsn``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "CpuShare",
    "Part",
    "StateWrites",
    "TreeMemory",
    "children",
    "cpu_seconds",
    "peak_rss_mb",
    "rss_mb",
    "wal_lsn",
]


def _status_kb(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_mb(pid: int) -> float | None:
    """The process's resident set now, in MiB."""
    kb = _status_kb(pid, "VmRSS")
    return kb / 1024 if kb is not None else None


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident set (``VmHWM``), in MiB."""
    kb = _status_kb(pid, "VmHWM")
    return kb / 1024 if kb is not None else None


_TICKS = os.sysconf("SC_CLK_TCK")


Part = Literal["all", "own", "ended children"]
"""Whose CPU time :func:`cpu_seconds` reads: the process's own threads, the descendants
it has waited for (an engine run that ended is the daemon's), or both."""


def cpu_seconds(pid: int, part: Part = "all") -> float | None:
    """CPU time (user + system) the process (``part``) has used so far; ``None`` when
    the process is gone or unreadable."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the name: state ppid ... utime(11) stime(12) cutime(13) cstime(14).
    own, ended = int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14])
    ticks = {"all": own + ended, "own": own, "ended children": ended}[part]
    return ticks / _TICKS


def _machine_ticks() -> tuple[int, int]:
    """``(busy, total)`` ticks of all cores since boot (``/proc/stat``'s ``cpu`` line)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle and iowait
    total = sum(values[:8])  # guest time is already in user
    return total - idle, total


@dataclass
class CpuShare:
    """Who used the machine's cores during a stretch of a benchmark: each named
    process's CPU seconds (read at both ends; a process not readable at both is
    ``None``, never 0) and the share of all cores busy."""

    pids: dict[str, int | tuple[int, Part]]
    """Name → pid (all its CPU time), or ``(pid, part)``."""
    _start: dict[str, float | None] = field(default_factory=dict)
    _machine: tuple[int, int] = (0, 0)
    _wall: float = 0.0

    def start(self) -> CpuShare:
        self._start = {name: _read(which) for name, which in self.pids.items()}
        self._machine = _machine_ticks()
        self._wall = time.perf_counter()
        return self

    def stop(self, extra: dict[str, float] | None = None) -> dict[str, object]:
        """The readings since :meth:`start`; ``extra`` adds CPU seconds measured apart
        (processes that started and ended within the stretch)."""
        cpu: dict[str, float | None] = {}
        for name, which in self.pids.items():
            before, after = self._start.get(name), _read(which)
            cpu[name] = None if before is None or after is None else after - before
        cpu.update(extra or {})
        busy0, total0 = self._machine
        busy1, total1 = _machine_ticks()
        wall = time.perf_counter() - self._wall
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "machine_busy": (busy1 - busy0) / (total1 - total0) if total1 > total0 else None,
            "machine_cpu_s": (busy1 - busy0) / _TICKS,
        }


def _read(which: int | tuple[int, Part]) -> float | None:
    return cpu_seconds(*which) if isinstance(which, tuple) else cpu_seconds(which)


def _proc(pid: int, entry: str) -> bytes | None:
    """``/proc/<pid>/<entry>``, or ``None`` once the process is gone."""
    try:
        return Path(f"/proc/{pid}/{entry}").read_bytes()
    except OSError:
        return None


def _name(pid: int) -> str:
    return (_proc(pid, "comm") or b"?").decode(errors="replace").strip()


def children(pid: int) -> list[int]:
    """Every descendant of ``pid`` alive now."""
    try:
        stats = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            stats[int(entry.name)] = ppid
    except OSError:
        return []
    out: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in stats.items() if pp == parent]
        out.extend(kids)
        frontier.extend(kids)
    return out


@dataclass
class TreeMemory:
    """Samples the memory of a process's descendants (the engine runs) in a thread.

    A child forked and not yet exec'd still has ``pid``'s command line and shows ``pid``'s own
    pages as its resident set: it is skipped and counted (``unexeced``), not taken as an engine
    process."""

    pid: int
    interval: float = 0.1
    peak_by_name: dict[str, float] = field(default_factory=dict)
    peak_total: float = 0.0
    samples: int = 0
    unexeced: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TreeMemory:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        own = _proc(self.pid, "cmdline")
        while not self._stop.is_set():
            total = 0.0
            for child in children(self.pid):
                if own is not None and _proc(child, "cmdline") == own:
                    self.unexeced += 1
                    continue
                mb = rss_mb(child)
                if mb is None:
                    continue
                name = _name(child)
                total += mb
                self.peak_by_name[name] = max(self.peak_by_name.get(name, 0.0), mb)
            self.peak_total = max(self.peak_total, total)
            self.samples += 1
            self._stop.wait(self.interval)

    def stop(self) -> dict[str, object]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        largest = max(self.peak_by_name.items(), key=lambda kv: kv[1], default=("", 0.0))
        return {
            "peak_total_mb": self.peak_total,
            "peak_process": largest[0],
            "peak_process_mb": largest[1],
            "peak_by_name_mb": dict(sorted(self.peak_by_name.items())),
            "samples": self.samples,
            "unexeced": self.unexeced,
        }


@dataclass
class StateWrites:
    """Samples the files of a ``file://`` backend that belong to one stack."""

    root: Path
    stack: str
    interval: float = 0.01
    written: int = 0
    writes: int = 0
    _seen: dict[Path, tuple[float, int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _files(self) -> list[Path]:
        base = self.root / ".pulumi"
        found: list[Path] = []
        for sub in ("stacks", "backups", "history"):
            directory = base / sub / "twc"
            if sub == "stacks":
                found += [p for p in directory.glob(f"{self.stack}.json*") if p.is_file()]
            else:
                found += [p for p in (directory / self.stack).glob("*") if p.is_file()]
        return found

    def _scan(self, count: bool) -> None:
        for path in self._files():
            try:
                st = path.stat()
            except OSError:
                continue
            key = (st.st_mtime, st.st_size)
            if self._seen.get(path) != key:
                if count:
                    self.written += st.st_size
                    self.writes += 1
                self._seen[path] = key

    def start(self) -> StateWrites:
        self._scan(count=False)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._scan(count=True)
            self._stop.wait(self.interval)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._scan(count=True)
        return {"bytes": self.written, "writes": self.writes}


def wal_lsn(psql: str, url: str, env: dict[str, str]) -> int | None:
    """The PostgreSQL server's current WAL position, in bytes."""
    try:
        out = subprocess.run(
            [psql, url, "-Atc", "select pg_current_wal_lsn() - '0/0'::pg_lsn"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        return int(float(out))
    except ValueError:
        return None


def wait(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> float:
    """Seconds until ``predicate()`` held; raises ``TimeoutError`` after ``timeout``."""
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f} s")
        time.sleep(interval)
    return time.perf_counter() - start
