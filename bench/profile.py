"""Where ``twc run``'s own threads spend the CPU during a figure: py-spy samples them.

``--profile`` records the daemon process with ``py-spy record`` (its stacks sampled
``rate`` times a second without pausing it: ``--nonblocking``, so the daemon is not
slowed by being watched; a sample may then now and then show a torn stack) for the
length of the no-op and the Queue figures, and keeps the raw stacks next to the results. The summary
counts, over every sample of a thread that was running, the frames of twc's own code
(``twc/``): the share of the samples in which each function was on the stack, and
the leaf frames (where the CPU was at that instant), whoever's code they are.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["DaemonProfile", "summarize_stacks"]

TOP = 15


class DaemonProfile:
    """``py-spy record`` of one process, started and stopped around a figure."""

    def __init__(self, pid: int, out: Path, rate: int = 50) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self._proc: subprocess.Popen[bytes] | None = None
        self.summary: dict[str, Any] | None = None

    @staticmethod
    def executable() -> str:
        """The py-spy beside this Python (requirements-dev.txt installs it).

        Raises:
            FileNotFoundError: py-spy is not installed.
        """
        found = Path(sys.executable).with_name("py-spy")
        if found.exists():
            return str(found)
        other = shutil.which("py-spy")
        if other is None:
            raise FileNotFoundError("py-spy is not installed (pip install -r requirements-dev.txt)")
        return other

    def __enter__(self) -> DaemonProfile:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            self.executable(),
            "record",
            "--pid",
            str(self.pid),
            "--rate",
            str(self.rate),
            "--format",
            "raw",
            "--nonblocking",
            "--threads",
            "--output",
            str(self.out),
        ]
        log = self.out.with_suffix(".log").open("wb")
        self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        # py-spy writes what it has sampled when interrupted, as at a Ctrl-C.
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self.out.exists():
            self.summary = summarize_stacks(self.out.read_text(), rate=self.rate)
        else:
            detail = self.out.with_suffix(".log").read_text(errors="replace")[-500:]
            self.summary = {"error": f"py-spy wrote no stacks: {detail}"}


def summarize_stacks(raw: str, *, rate: int) -> dict[str, Any]:
    """The summary of py-spy's raw (collapsed) stacks: one line per distinct stack,
    ``frame;frame;...;leaf count``, each frame ``function (file:line)``.

    Raises:
        ValueError: No stacks at all (nothing was sampled: never a profile of zeros).
    """
    total = 0
    twc: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(frame) for frame in stack.split(";") if not frame.startswith("thread")]
        if not frames:
            continue
        total += count
        leaves[frames[-1]] += count
        for frame in set(frames):
            if frame.startswith("twc/"):
                twc[frame] += count
    if total == 0:
        raise ValueError("py-spy sampled no running thread")
    return {
        "samples": total,
        "rate_hz": rate,
        "active_thread_s": total / rate,
        "twc_inclusive": [[frame, count / total] for frame, count in twc.most_common(TOP)],
        "leaves": [[frame, count / total] for frame, count in leaves.most_common(TOP)],
    }


def _short(frame: str) -> str:
    """``function (…/twc/reconcile/early.py:120)`` → ``twc/reconcile/early.py function``: the
    file from the project's own package (or the last two parts of a library's path),
    without the line, so the lines of one function add up."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    for top in ("twc", "providers", "temporalio", "kubernetes", "pulumi", "yaml", "pydantic"):
        if top in parts:
            path = "/".join(parts[len(parts) - 1 - parts[::-1].index(top) :])
            break
    else:
        path = "/".join(parts[-2:])
    return f"{path} {name}"
