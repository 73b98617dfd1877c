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

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["StateWrites", "TreeMemory", "children", "peak_rss_mb", "rss_mb", "wal_lsn"]


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


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


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
    """Samples the memory of a process's descendants (the engine runs) in a thread."""

    pid: int
    interval: float = 0.1
    peak_by_name: dict[str, float] = field(default_factory=dict)
    peak_total: float = 0.0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TreeMemory:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0.0
            for child in children(self.pid):
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
