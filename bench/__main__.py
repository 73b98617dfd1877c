"""``python -m bench [--quick]``: measure twc on the embedded environment.

Writes ``bench/results.json`` and ``bench/results.md`` (see ``bench/report.py`` for the
layout). Each stage that fails is recorded under ``errors`` and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from bench import report
from bench.fleets import generate_fleet
from bench.machine import load_average, machine_info, tool_versions
from bench.scale import Trials, namespaces_for
from bench.stats import ratio

log = logging.getLogger("bench")

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent

SETUP_PARALLEL = 64
"""Engine parallelism of the initial ``up`` of each stack (set-up, not a figure)."""

SHARED_NOTE = (
    "The machine was shared with other work (builds, test suites, other embedded "
    "environments) during this run: absolute times are noisy, ratios of figures measured "
    "side by side in the run are the figures to read."
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="N = 10, 100; fewer trials")
    parser.add_argument("--sizes", default=None, help="comma-separated N (overrides the mode)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="directory for the results")
    parser.add_argument("--keep", action="store_true", help="leave the environment running")
    parser.add_argument("--note", default=SHARED_NOTE, help="a note printed under the header")
    parser.add_argument(
        "--render", action="store_true", help="only re-render results.md from results.json"
    )
    return parser.parse_args(argv)


def plan_for(quick: bool) -> dict[str, Any]:
    """Sizes and trial counts of a mode."""
    if quick:
        return {
            "sizes": [10, 100],
            "trials": {"build": 1, "preview": 1, "up": 1, "noop": 20},
            "big_trials": {"build": 1, "preview": 1, "up": 1, "noop": 5},
            "convergence_trials": 3,
            "convergence_engine_only_trials": 3,
            "sampling_queues": 1000,
            "budget_queues": 100,
            "listing_trials": 3,
        }
    return {
        "sizes": [10, 100, 1000],
        "trials": {"build": 3, "preview": 3, "up": 2, "noop": 50},
        "big_trials": {"build": 1, "preview": 1, "up": 1, "noop": 10},
        "convergence_trials": 20,
        "convergence_engine_only_trials": 10,
        "sampling_queues": 1000,
        "budget_queues": 1000,
        "listing_trials": 5,
    }


class Run:
    """One benchmark run: the environment, the results, the stages."""

    def __init__(self, quick: bool, sizes: list[int] | None) -> None:
        self.plan = plan_for(quick)
        if sizes:
            self.plan["sizes"] = sizes
        started = datetime.now(UTC).replace(microsecond=0).isoformat()
        self.results = report.new_results("quick" if quick else "full", started)
        self.results["machine"] = machine_info()
        self.results["versions"] = tool_versions()
        self.results["trials"] = {k: v for k, v in self.plan.items() if k not in ("sizes",)}
        self.workdir = Path(tempfile.mkdtemp(prefix="twc-bench-"))
        self.stacks: list[str] = []
        self.t0 = time.monotonic()

    def stage(self, name: str, fn: Callable[[], Any]) -> Any:
        log.info("== %s (%.0f s into the run)", name, time.monotonic() - self.t0)
        start = time.monotonic()
        try:
            result = fn()
        except Exception as exc:
            log.exception("stage %s failed", name)
            self.results["errors"].append({"stage": name, "error": f"{type(exc).__name__}: {exc}"})
            return None
        log.info("== %s done in %.1f s", name, time.monotonic() - start)
        return result

    def execute(self, keep: bool) -> None:
        from twc.local import LocalEnvironment
        from twc.local.kube import Kube

        env = LocalEnvironment(self.workdir / "env")
        env.up(progress=lambda m: log.info("[local] %s", m))
        kube = Kube(env.kubeconfig)
        try:
            self._measure(env, kube)
        finally:
            kube.close()
            if keep:
                log.info("environment left running in %s", env.dir)
            else:
                env.down(progress=lambda m: None)
                # Keep the daemon's log for a look (bench/out/ is not tracked).
                out = OUT_DIR / "out"
                for log_file in self.workdir.glob("daemon-*.log"):
                    out.mkdir(exist_ok=True)
                    shutil.copy(log_file, out / log_file.name)
                shutil.rmtree(self.workdir, ignore_errors=True)
            for name in self.stacks:
                # The engine writes per-stack config files into the project.
                (ROOT / f"Pulumi.{name}.yaml").unlink(missing_ok=True)

    def _measure(self, env: Any, kube: Any) -> None:
        from bench import convergence, daemon_noop, fixes, sampling_bench, scale

        engine_env = {
            **env.env(),
            "PATH": os.pathsep.join(
                [str(ROOT / ".twc" / "bin"), str(ROOT / ".venv" / "bin"), os.environ["PATH"]]
            ),
        }
        address = env.temporal_address()
        sizes = sorted(self.plan["sizes"])
        stacks: dict[int, scale.FleetStack] = {}
        queues = self.plan["sampling_queues"]
        # The sampling stage runs right after the N=100 set-up; the dev server's first
        # describe of each task queue (seconds) is warm-up, overlapped with that set-up.
        sampling_at = 100 if 100 in sizes else sizes[0]

        def sampling() -> None:
            self.results["sampling"] = self.stage(
                "backlog sampling",
                lambda: sampling_bench.measure_sampling(
                    address, queues=queues, budget_queues=self.plan["budget_queues"], warm=False
                ),
            )

        def at_size(n: int) -> None:
            t = self.plan["big_trials"] if n >= 1000 else self.plan["trials"]
            trials = Trials(build=t["build"], preview=t["preview"], up=t["up"])
            entry: dict[str, Any] = {"n": n}
            self.results["scale"].append(entry)
            fleet_file = self.workdir / f"probe-{n}.yaml"
            fleet_file.write_text(
                yaml.safe_dump(generate_fleet(n, host_port=address, namespaces=namespaces_for(n)))
            )
            entry["build"] = self.stage(
                f"build N={n}", lambda: scale.measure_build(fleet_file, trials.build)
            )
            warm = None
            if n == sampling_at:
                warm = threading.Thread(
                    target=sampling_bench.warm_queues, args=(address, queues), daemon=True
                )
                warm.start()
            self.stacks.append(f"bench-{n}")
            stack = self.stage(
                f"initial up N={n}",
                lambda: scale.setup_stack(
                    n,
                    workdir=self.workdir,
                    host_port=address,
                    env=engine_env,
                    kube=kube,
                    parallel=SETUP_PARALLEL,
                ),
            )
            if warm is not None:
                self.stage("sampling warm-up (rest)", lambda: warm.join())
                sampling()
            if stack is None:
                return
            stacks[n] = stack
            engine = self.stage(f"engine N={n}", lambda: scale.measure_engine(stack, trials))
            if engine:
                entry.update(engine)
            noop = self.stage(
                f"daemon no-op N={n}",
                lambda: daemon_noop.measure_noop(
                    stack.fleet_file, stack.ref, kube, trials=t["noop"]
                ),
            )
            entry["daemon_noop"] = noop
            entry["noop_vs_preview"] = ratio(
                report._p50(entry, "preview_nochange_s"), report._p50(noop, "noop_s")
            )

        def fix_listing() -> None:
            trials = self.plan["listing_trials"]
            self.results["fixes"] = [
                fix
                for fix in (
                    self.stage(
                        "fix: worker replicas",
                        lambda: fixes.measure_replica_listing(kube, trials * 3),
                    ),
                )
                if fix
            ]

        for n in [s for s in sizes if s < 1000]:
            at_size(n)
        if 100 in stacks:
            full_up = report._p50(
                next(e for e in self.results["scale"] if e["n"] == 100), "up_one_change_full_s"
            )
            stack = stacks[100]
            self.results["convergence"] = self.stage(
                "convergence N=100",
                lambda: convergence.measure_convergence(
                    stack_name=stack.name,
                    ref=stack.ref,
                    fleet_file=stack.fleet_file,
                    namespaces=stack.namespaces,
                    env=engine_env,
                    kube=kube,
                    workdir=self.workdir,
                    trials=self.plan["convergence_trials"],
                    full_up_s=full_up,
                    workers=100,
                    engine_only_trials=self.plan["convergence_engine_only_trials"],
                    progress=log.info,
                ),
            )
        # Before the N=1000 stack: re-enacting the old per-Deployment listing against a
        # thousand Deployments would take minutes per pass (which is the point of the fix).
        fix_listing()
        for n in [s for s in sizes if s >= 1000]:
            at_size(n)
        if self.results["sampling"] is None:
            sampling()
        self.results["growth"] = report.compute_growth(self.results["scale"])

    def finish(self, out: Path, note: str) -> None:
        self.results["duration_s"] = time.monotonic() - self.t0
        self.results["machine"]["load_average_end"] = load_average()
        report.write_results(self.results, out, note)
        log.info("wrote %s and %s", out / "results.md", out / "results.json")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.render:
        results = json.loads((args.out / "results.json").read_text())
        (args.out / "results.md").write_text(report.render_markdown(results, args.note))
        return 0
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None

    def on_term(signum: int, _frame: object) -> None:
        # Unwind through the finally blocks: stop the environment, write what was measured.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    run = Run(args.quick, sizes)
    try:
        run.stage("environment and measurements", lambda: run.execute(args.keep))
    finally:
        run.finish(args.out, args.note)
    print((args.out / "results.md").read_text())
    return 1 if run.results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
