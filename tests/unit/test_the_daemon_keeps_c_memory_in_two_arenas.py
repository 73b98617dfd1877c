"""``twc run`` caps glibc's ``malloc`` at two arenas for all its threads unless
``MALLOC_ARENA_MAX`` says otherwise, and hands free pages back after each full collection.
Each case runs in a fresh interpreter: arenas made before the cap stay."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

ARENAS = """
import ctypes, sys, threading
from twc.cli.run import cap_arenas
if sys.argv[1] == "cap":
    cap_arenas()
kept, held = [], threading.Barrier(9)
def work():
    kept.append([bytes(2000) for _ in range(100)])  # each thread's first malloc picks an arena
    held.wait()
    held.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads:
    thread.start()
held.wait()
ctypes.CDLL(None).malloc_stats()
held.wait()
"""


def arenas(mode: str, **env: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", ARENAS, mode],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


def test_eight_threads_share_two_arenas_once_capped() -> None:
    assert arenas("plain") > 2  # glibc's default: one per thread, up to eight per core
    assert arenas("cap") == 2


def test_malloc_arena_max_set_by_whoever_runs_twc_wins() -> None:
    assert arenas("cap", MALLOC_ARENA_MAX="8") == 8


def test_a_full_collection_hands_freed_holes_back_to_the_system() -> None:
    script = textwrap.dedent(
        """
        import gc
        from twc.cli.run import freeze_survivors

        def rss():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024
            raise LookupError("no VmRSS")

        chunks = [bytes(1000) + bytes([i % 251]) for i in range(200_000)]
        kept = chunks[::16]  # every 16th stays, so the freed ones leave holes glibc keeps
        del chunks
        before = rss()
        gc.callbacks.append(freeze_survivors())
        gc.collect()
        print(before, rss(), len(kept))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], check=True, capture_output=True, text=True
    ).stdout.split()
    before, after = int(out[0]), int(out[1])
    assert before - after >= 100, f"RSS {before} -> {after} MiB after the full collection"
