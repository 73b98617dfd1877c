"""The state settings, chosen by measurement: one-worker ``up``s of a 250-worker stack
(a full shard) with each checkpoint setting, with and without gzip and parallel diff,
on the file backend and on PostgreSQL; trials of all variants interleaved in random
order, so the machine's load falls on each alike."""

from __future__ import annotations

import dataclasses
import io
import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import fleets
from bench.procs import StateWrites, wal_lsn
from bench.stacks import BenchStack
from bench.stats import summarize

log = logging.getLogger(__name__)

VARIANTS: dict[str, dict[str, Any]] = {
    "every-step": {"checkpoints": "every-step", "compression": "none", "parallel_diff": False},
    "final": {"checkpoints": "final", "compression": "none", "parallel_diff": False},
    "every-step+gzip": {
        "checkpoints": "every-step",
        "compression": "gzip",
        "parallel_diff": False,
    },
    "every-step+parallel-diff": {
        "checkpoints": "every-step",
        "compression": "none",
        "parallel_diff": True,
    },
}
"""The settings compared (names as in the results)."""


def _state_env(*, checkpoints: str, compression: str, parallel_diff: bool) -> dict[str, str]:
    """The CLI's switches for one variant."""
    return {
        "PULUMI_SKIP_CHECKPOINTS": str(checkpoints == "final").lower(),
        "PULUMI_DIY_BACKEND_GZIP": str(compression == "gzip").lower(),
        "PULUMI_PARALLEL_DIFF": str(parallel_diff).lower(),
    }


@dataclasses.dataclass
class Backend:
    """One state backend with its N-worker stack."""

    name: str
    stack: BenchStack
    env: dict[str, str]
    backend_dir: Path | None = None
    psql: str | None = None


def _one_up(backend: Backend, variant: dict[str, Any], index: int) -> tuple[float, int | None]:
    """A one-worker change through ``twc up``'s path; its seconds and bytes written."""
    from twc.cli import common
    from twc.engine import engine

    stack = backend.stack
    stack.write(changed=index)
    ref = common.stack_ref(stack.name, str(stack.fleet_file))
    ref = dataclasses.replace(ref, env={**backend.env, **_state_env(**variant)})
    writes = StateWrites(backend.backend_dir, stack.name).start() if backend.backend_dir else None
    before = (
        wal_lsn(backend.psql, backend.env["PULUMI_BACKEND_URL"], backend.env)
        if backend.psql
        else None
    )
    inputs = common.observe(ref, str(stack.fleet_file), None, io.StringIO())
    with common.desired_inputs(ref, inputs) as run:
        if run is None:
            raise RuntimeError("the cluster's objects could not be read")
        start = time.perf_counter()
        result = engine.up(run)
        seconds = time.perf_counter() - start
    if result.summary.result != "succeeded":
        raise RuntimeError(f"up of {stack.name}: {result.summary.result}")
    written: int | None = None
    if writes is not None:
        written = writes.stop()["bytes"]
    elif before is not None and backend.psql:
        after = wal_lsn(backend.psql, backend.env["PULUMI_BACKEND_URL"], backend.env)
        written = after - before if after is not None else None
    return seconds, written


def measure_state_settings(
    backends: list[Backend],
    *,
    trials: int,
    rng: random.Random,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Every (backend, variant) ``trials`` times, interleaved in random order.

    Returns:
        Per backend and variant: ``up_s`` and ``bytes`` summaries.
    """
    plan = [(b, name) for b in backends for name in VARIANTS for _ in range(trials)]
    rng.shuffle(plan)
    times: dict[tuple[str, str], list[float]] = {}
    sizes: dict[tuple[str, str], list[float]] = {}
    counters = {b.name: 0 for b in backends}
    for step, (backend, name) in enumerate(plan):
        index = counters[backend.name] % backend.stack.n
        counters[backend.name] += 1
        if fleets.autoscaled(index, backend.stack.namespaces, backend.stack.n):
            index = backend.stack.n - 1 - index
        seconds, written = _one_up(backend, VARIANTS[name], index)
        times.setdefault((backend.name, name), []).append(seconds)
        if written is not None:
            sizes.setdefault((backend.name, name), []).append(float(written))
        progress(
            f"state settings {step + 1}/{len(plan)}: {backend.name} {name}: {seconds:.1f} s"
            + (f", {written / 1e6:.1f} MB written" if written is not None else "")
        )
    out: dict[str, Any] = {"workers": backends[0].stack.n if backends else None, "results": {}}
    for backend in backends:
        for name in VARIANTS:
            key = (backend.name, name)
            out["results"].setdefault(backend.name, {})[name] = {
                "up_s": summarize(times.get(key, [])),
                "bytes": summarize(sizes.get(key, [])) if sizes.get(key) else None,
            }
    return out


def choose(results: dict[str, Any], backend: str = "file") -> dict[str, Any]:
    """The settings the measurements choose, and why (pure).

    The fastest variant by p50 wins; ``final`` (which loses the record of a crashed
    ``up``) only when it is at least 10 % faster than the fastest ``every-step`` one.
    """
    rows = results.get("results", {}).get(backend, {})
    p50 = {name: (row["up_s"] or {}).get("p50") for name, row in rows.items()}
    known = {k: v for k, v in p50.items() if v is not None}
    if not known:
        return {"choice": "every-step", "reason": "nothing measured: the engine's default"}
    safe = {k: v for k, v in known.items() if VARIANTS[k]["checkpoints"] == "every-step"}
    best_safe = min(safe, key=lambda k: safe[k]) if safe else None
    best = min(known, key=lambda k: known[k])
    if best_safe is None:
        return {"choice": best, "reason": "only final-checkpoint variants measured"}
    if VARIANTS[best]["checkpoints"] == "final" and known[best] <= 0.9 * known[best_safe]:
        return {
            "choice": best,
            "reason": f"{best} p50 {known[best]:.1f} s is ≥ 10 % below {best_safe} "
            f"{known[best_safe]:.1f} s",
        }
    return {
        "choice": best_safe,
        "reason": f"{best_safe} p50 {known[best_safe]:.1f} s (fastest that keeps each step "
        f"recorded; fastest overall {best} {known[best]:.1f} s)",
    }
