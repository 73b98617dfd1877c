"""``twc run`` trims the C allocator and caps its arenas (twc/loop/malloc.py).

On the benchmark's N=5000 stack a full garbage collection freed no memory while
``malloc_trim`` returned up to 116 MiB of pages glibc kept after the objects in them were
freed. This checks the real glibc on this machine: memory freed in holes goes back to
the system when trimmed, and ``MALLOC_ARENA_MAX`` set by whoever runs twc wins.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from twc.loop.malloc import MallocTrimmer, cap_arenas, libc

pytestmark = pytest.mark.skipif(libc() is None, reason="glibc only (musl, macOS have no trim)")


def test_memory_freed_in_holes_goes_back_to_the_system_when_trimmed() -> None:
    # In a fresh interpreter: 200 MB of 1000-byte objects (glibc's, not Python's own
    # allocator), every 16th kept so the freed ones leave holes glibc keeps.
    script = textwrap.dedent(
        """
        import sys
        from twc.loop.malloc import MallocTrimmer

        def rss():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024
            raise LookupError("no VmRSS")

        chunks = [bytes(1000) + bytes([i % 251]) for i in range(200_000)]
        kept = chunks[::16]
        del chunks
        before = rss()
        trimmer = MallocTrimmer()
        trimmed = trimmer.trim()
        print(before, rss(), trimmed, trimmer.trims, len(kept))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.split()
    before, after, trimmed, trims = int(out[0]), int(out[1]), out[2], int(out[3])
    assert trimmed == "True"
    assert trims == 1
    assert before - after >= 100, f"RSS {before} -> {after} MiB after the trim"


def test_the_trimmer_trims_on_its_own_thread_until_stopped() -> None:
    trimmer = MallocTrimmer(interval=0.01)
    trimmer.start()
    try:
        for _ in range(500):
            if trimmer.trims >= 3:
                break
            threading_wait(0.01)
    finally:
        trimmer.stop()
    stopped_at = trimmer.trims
    assert stopped_at >= 3
    threading_wait(0.1)
    assert trimmer.trims == stopped_at, "it trimmed after stop()"


def test_malloc_arena_max_set_by_whoever_runs_twc_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    assert cap_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    assert cap_arenas() is True


def threading_wait(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)
