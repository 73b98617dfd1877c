"""``python -m bench [--quick]``: measure twc on the embedded environment.

One run measures every size (full: N = 100, 1000, 5000 workers at most 250 per shard,
so 1, 4 and 20 shards), each figure in trials of random order, the baselines a user
would otherwise run (plain ``pulumi up`` of the same fleet as one stack, ``pulumi
preview``), and the state settings; it writes
``bench/results.json`` and, rendered from it alone, ``bench/results.md``. A stage that
fails is recorded under ``errors`` and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import fleets, report
from bench.daemon import DaemonProcess
from bench.figures import (
    backlog_to_replicas,
    daemon_memory,
    noop_iteration,
    one_worker_change,
    pulumi_up_change,
    queue_to_polling,
    wait_settled,
)
from bench.machine import load_average, machine_info, tool_versions
from bench.procs import Part
from bench.profile import DaemonProfile
from bench.stacks import BenchStack, setup_stack
from bench.stats import summarize

log = logging.getLogger("bench")

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = Path(__file__).resolve().parent
SETUP_PARALLEL = 64
"""Engine parallelism of each stack's first ``up`` (set-up, not a figure)."""

DAEMON_SETTINGS: dict[str, Any] = {
    # Refresh on, at the daemon's default: every 10 minutes per shard. A shard's refresh
    # of 250 workers takes one to two minutes on this machine; a change in a shard that
    # is refreshing stops it.
    "refresh_interval": 600,
}
"""``twc run``'s settings in the run: its defaults, written out."""


FIGURES = ("noop", "change", "backlog", "queue")
"""The figures measured at each fleet size (``--figures`` picks some)."""


def plan_for(quick: bool) -> dict[str, Any]:
    """Sizes and trial counts of a mode."""
    if quick:
        return {
            "sizes": [20, 60],
            "per_shard": 10,
            "middle": 20,
            "largest": 60,
            "trials": {"noop": 5, "change": 2, "backlog": 2, "queue": 3, "state": 1, "wake": 5},
            "baselines_at": [20],
            "baseline_trials": 2,
            "queue_gap_s": 4.0,
            "workflows": 40,
            "state_workers": 10,
        }
    return {
        "sizes": [100, 1000, 5000],
        "per_shard": 250,
        "middle": 1000,
        "largest": 5000,
        "trials": {"noop": 30, "change": 10, "backlog": 8, "queue": 20, "state": 5, "wake": 8},
        # One stack of 5000 workers: about 45 minutes of plain `pulumi up`s beyond the run's
        # 95 (2026-12-06); that size's baseline is computed from the growth between the others.
        "baselines_at": [100, 1000],
        "baseline_trials": 5,
        "queue_gap_s": 8.0,
        "workflows": 60,
        "state_workers": 250,
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="N = 20, 60; fewer trials")
    parser.add_argument("--sizes", default=None, help="comma-separated N (overrides the mode)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="directory for the results")
    parser.add_argument("--seed", type=int, default=None, help="seed of the trials' order")
    parser.add_argument("--keep", action="store_true", help="leave the environment running")
    parser.add_argument("--note", default=None, help="a note printed under the header")
    parser.add_argument("--skip-state", action="store_true", help="skip the state settings")
    parser.add_argument(
        "--figures",
        default=",".join(FIGURES),
        help="comma-separated figures to measure at each size, and their baselines "
        f"(default: all of {', '.join(FIGURES)})",
    )
    parser.add_argument(
        "--state-only",
        action="store_true",
        help="measure the state settings alone (no fleet sizes; e.g. with --out elsewhere)",
    )
    parser.add_argument(
        "--refresh-only",
        action="store_true",
        help="measure a change during a refresh alone (e.g. with --out elsewhere)",
    )
    parser.add_argument(
        "--wake-only",
        action="store_true",
        help="measure the first task from zero alone (e.g. with --out elsewhere)",
    )
    parser.add_argument(
        "--render", action="store_true", help="only re-render results.md from results.json"
    )
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="an earlier results.json whose figures results.md sets beside this run's "
        "(default: the results.json in --out, read before it is replaced; with --render, "
        "instead of the one it names)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample twc run's threads with py-spy during the no-op and Queue figures",
    )
    return parser.parse_args(argv)


class Run:
    """One benchmark run: the environment, the results, the stages."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.plan = plan_for(args.quick)
        if args.sizes:
            self.plan["sizes"] = [int(s) for s in args.sizes.split(",")]
        if args.state_only or args.refresh_only or args.wake_only:
            self.plan["sizes"] = []
        self.refresh_only, self.wake_only = args.refresh_only, args.wake_only
        self.figures = tuple(f for f in args.figures.split(",") if f)
        unknown = set(self.figures) - set(FIGURES)
        if unknown:
            raise SystemExit(f"unknown figures: {', '.join(sorted(unknown))}")
        self.seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
        self.rng = random.Random(self.seed)
        started = datetime.now(UTC).replace(microsecond=0).isoformat()
        self.results = report.new_results("quick" if args.quick else "full", started, self.seed)
        self.results["machine"] = machine_info()
        self.results["versions"] = tool_versions()
        self.results["settings"] = DAEMON_SETTINGS
        self.results["trials"] = self.plan["trials"]
        self.results["figures"] = list(self.figures)
        self.results["noop_timed"] = report.NOOP_TIMED
        self.workdir = Path(tempfile.mkdtemp(prefix="twc-bench-"))
        self.skip_state = args.skip_state or args.refresh_only or args.wake_only
        self.profile_dir: Path | None = args.out if args.profile else None
        if args.profile:
            DaemonProfile.executable()  # missing, the run stops now, not an hour in
        self.t0 = time.monotonic()
        earlier = args.compare or args.out / "results.json"
        if earlier.is_file():
            self.results["previous"] = report.comparable(json.loads(earlier.read_text()))

    def progress(self, message: str) -> None:
        log.info("%s (%.0f s into the run)", message, time.monotonic() - self.t0)

    def stage(self, name: str, fn: Callable[[], Any]) -> Any:
        self.progress(f"== {name}")
        start = time.monotonic()
        try:
            result = fn()
        except Exception as exc:
            log.exception("stage %s failed", name)
            self.results["errors"].append({"stage": name, "error": f"{type(exc).__name__}: {exc}"})
            return None
        except (SystemExit, KeyboardInterrupt) as exc:
            # Stopped by hand (SIGTERM, ^C): the results say where, and go on unwinding.
            stopped = time.monotonic() - start
            self.results["errors"].append(
                {"stage": name, "error": f"stopped after {stopped:.0f} s ({type(exc).__name__})"}
            )
            raise
        self.progress(f"== {name} done in {time.monotonic() - start:.1f} s")
        return result

    # ----------------------------------------------------------------- run
    def execute(self, keep: bool) -> None:
        from twc.local.cluster import Kube
        from twc.local.environment import LocalEnvironment

        env = LocalEnvironment(self.workdir / "env", state="file")
        env.up(progress=lambda m: log.info("[local] %s", m))
        os.environ.update(env.env())
        kube = Kube(env.kubeconfig)
        try:
            self._measure(env, kube)
        finally:
            kube.close()
            if keep:
                log.info("environment left running in %s", env.dir)
            else:
                env.down(progress=lambda m: None)
                out = OUT_DIR / "out"
                for log_file in self.workdir.glob("daemon-*.log"):
                    out.mkdir(exist_ok=True)
                    shutil.copy(log_file, out / log_file.name)
                shutil.rmtree(self.workdir, ignore_errors=True)
            for file in ROOT.glob("Pulumi.bench-*.yaml"):
                file.unlink(missing_ok=True)  # the engine writes per-stack config here

    def _measure(self, env: Any, kube: Any) -> None:
        address = env.temporal_address()
        per_shard = self.plan["per_shard"]
        for n in sorted(self.plan["sizes"]):
            entry: dict[str, Any] = {"n": n}
            self.results["sizes"].append(entry)
            stack = BenchStack(
                n=n,
                name=f"bench-{n}",
                fleet_file=self.workdir / f"fleet-{n}.yaml",
                host_port=address,
                namespaces=fleets.namespaces_for(n, per_shard),
                per_shard=per_shard,
            )
            entry["namespaces"] = len(stack.namespaces)

            def setup(stack: BenchStack = stack) -> BenchStack:
                return setup_stack(
                    stack, kube=kube, parallel=SETUP_PARALLEL, progress=self.progress
                )

            done = self.stage(f"set-up N={n}", setup)
            if done is None:
                continue
            entry["initial_up_s"] = stack.initial_up_s
            entry["shards"] = len(stack.initial_up_s)
            self._size(entry, stack, env, kube, address)
        if not self.skip_state:
            self.results["state"] = self.stage("state settings", lambda: self._state(env, kube))
        if self.refresh_only:
            self.results["refresh_yields"] = self.stage(
                "a change during a refresh", lambda: self._refresh_yields(env, kube)
            )
        if self.wake_only:
            self.results["wake_from_zero"] = self.stage(
                "first task from zero", lambda: self._wake_from_zero(env, kube)
            )
        self.results["goals"] = report.evaluate_goals(
            self.results["sizes"], self.plan["middle"], self.plan["largest"]
        )

    @staticmethod
    def _processes(env: Any, daemon: DaemonProcess) -> dict[str, int | tuple[int, Part]]:
        """The processes whose CPU time a figure reads: the embedded environment's,
        the daemon's own threads, and the engine runs it has waited for."""
        state = env.load_state()
        found: dict[str, int | tuple[int, Part]] = {
            name: rec.pid for name, rec in (state.processes if state else {}).items()
        }
        found["twc run (its own threads)"] = (daemon.pid, "own")
        found["engine runs twc run ended"] = (daemon.pid, "ended children")
        # The harness shares the cores too: its trials' looks every 50 ms and the busy
        # load's fleet edits.
        found["the benchmark harness"] = (os.getpid(), "own")
        return found

    def _daemon(self, stack: BenchStack, settings: dict[str, Any], tag: str = "") -> DaemonProcess:
        daemon = DaemonProcess(
            stack.name, stack.fleet_file, {}, self.workdir, settings=settings, tag=tag
        )
        try:
            # Its first iteration of each shard is a full up (it has applied nothing yet).
            daemon.wait_ready(timeout=3600)
            daemon.wait_idle(timeout=3600)
        except BaseException:
            daemon.stop()  # a run stopped (or failed) while it started leaves no daemon
            raise
        return daemon

    def _size(
        self, entry: dict[str, Any], stack: BenchStack, env: Any, kube: Any, address: str
    ) -> None:
        n = stack.n
        trials = self.plan["trials"]
        daemon = self.stage(f"daemon N={n}", lambda: self._daemon(stack, DAEMON_SETTINGS))
        if daemon is None:
            return

        def profiled(figure: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
            if self.profile_dir is None:
                return measure()
            out = self.profile_dir / f"profile-{figure}-n{n}.txt"
            with DaemonProfile(daemon.pid, out) as profile:
                found = measure()
            found["profile"] = profile.summary
            return found

        try:
            if "noop" in self.figures:
                settle = self.stage(f"settle N={n}", lambda: wait_settled(kube, stack))
                entry["noop"] = self.stage(
                    f"no-op iteration N={n}",
                    lambda: profiled(
                        "noop",
                        lambda: noop_iteration(
                            stack, daemon, trials=trials["noop"], progress=self.progress
                        ),
                    ),
                )
                if entry["noop"] is not None:
                    entry["noop"]["settle_s"] = settle

            def change() -> Any:
                return one_worker_change(
                    stack,
                    daemon,
                    kube,
                    trials=trials["change"],
                    rng=self.rng,
                    backend_dir=env.backend_dir,
                    progress=self.progress,
                )

            def backlog() -> Any:
                return backlog_to_replicas(
                    stack,
                    daemon,
                    kube,
                    address,
                    trials=trials["backlog"],
                    rng=self.rng,
                    workflows=self.plan["workflows"],
                    progress=self.progress,
                )

            def busy() -> None:
                # Keep the daemon busy: a one-worker change in a random shard.
                candidates = [i for i in range(n) if not fleets.autoscaled(i, stack.namespaces, n)]
                stack.write(changed=self.rng.choice(candidates))

            def queue() -> Any:
                def measure() -> dict[str, Any]:
                    return queue_to_polling(
                        stack,
                        daemon,
                        kube,
                        address,
                        trials=trials["queue"],
                        rng=self.rng,
                        mean_gap_s=self.plan["queue_gap_s"],
                        busy=busy,
                        progress=self.progress,
                        processes=self._processes(env, daemon),
                    )

                return profiled("queue", measure)

            figures = {"change": change, "backlog": backlog, "queue": queue}
            order = [name for name in figures if name in self.figures]
            self.rng.shuffle(order)
            entry["figure_order"] = order
            for name in order:
                entry[name] = self.stage(f"{name} N={n}", figures[name])
                self.stage(f"settle N={n}", lambda: daemon.wait_idle(timeout=3600))
            entry["memory"] = daemon_memory(daemon)
        finally:
            daemon.stop()
        entry["baselines"] = self._baselines(entry, stack, env, kube, address)

    # ------------------------------------------------------------- baselines
    def _baselines(
        self, entry: dict[str, Any], stack: BenchStack, env: Any, kube: Any, address: str
    ) -> dict[str, Any]:
        n = stack.n
        out: dict[str, Any] = {}
        change_p50 = report.get(entry, "change", "latency_s", "p50")
        if change_p50 is not None:
            out["backlog_via_engine_s"] = change_p50
        if "noop" in self.figures:
            out["preview_s"] = self.stage(f"baseline preview N={n}", lambda: self._preview(stack))
        if n not in self.plan["baselines_at"]:
            if "change" in self.figures:
                out["change_pulumi_up"] = self._computed_pulumi_up(n)
            return out
        if "change" in self.figures:
            out["change_pulumi_up"] = self.stage(
                f"baseline pulumi up N={n}", lambda: self._pulumi_up(n, kube, address)
            )
        return out

    def _preview(self, stack: BenchStack) -> Any:
        from twc.engine import engine

        ref = stack.refs()[0]
        times = []
        for _ in range(self.plan["baseline_trials"]):
            start = time.perf_counter()
            engine.preview(ref)
            times.append(time.perf_counter() - start)
        return summarize(times)

    def _pulumi_up(self, n: int, kube: Any, address: str) -> Any:
        namespaces = fleets.namespaces_for(n, self.plan["per_shard"], prefix="flat")
        flat = self._one_stack(f"bench-{n}-flat", n, namespaces, address, autoscale=True)
        setup_stack(flat, kube=kube, parallel=SETUP_PARALLEL, progress=self.progress)
        return pulumi_up_change(
            flat, kube, trials=self.plan["baseline_trials"], rng=self.rng, progress=self.progress
        )

    def _one_stack(
        self, name: str, n: int, namespaces: tuple[str, ...], address: str, autoscale: bool = False
    ) -> BenchStack:
        """One unsharded stack of ``n`` workers, without Queue or TemporalWorker objects."""
        return BenchStack(
            n=n,
            name=name,
            fleet_file=self.workdir / f"fleet-{name}.yaml",
            host_port=address,
            namespaces=namespaces,
            per_shard=None,
            autoscale=autoscale,
            cluster_objects=False,
        )

    def _computed_pulumi_up(self, n: int) -> dict[str, Any] | None:
        """At a size too large to run as one stack: the largest measured size's figure,
        grown by the growth between the two measured sizes (log-log)."""
        measured = [
            (s["n"], report.get(s, "baselines", "change_pulumi_up", "latency_s", "p50"))
            for s in self.results["sizes"]
            if s["n"] < n and not report.get(s, "baselines", "change_pulumi_up", "computed")
        ]
        points = sorted((m, v) for m, v in measured if v)
        if len(points) < 2:
            return None
        (n0, v0), (n1, v1) = points[-2], points[-1]
        slope = math.log(v1 / v0) / math.log(n1 / n0)
        value = v1 * (n / n1) ** slope
        return {
            "computed": f"N={n1}'s {v1:.1f} s grown by the slope {slope:.2f} "
            f"measured between N={n0} and N={n1}",
            "latency_s": {"n": 0, "p50": value},
        }

    # ---------------------------------------------------------- state stage
    def _state(self, env: Any, kube: Any) -> Any:
        from bench.statebench import Backend, choose, measure_state_settings
        from twc.local.environment import LocalEnvironment, postgres_tool

        workers = self.plan["state_workers"]
        address = env.temporal_address()
        backends = []
        file_stack = self._one_stack("bench-state-file", workers, ("state-file",), address)
        setup_stack(file_stack, kube=kube, parallel=SETUP_PARALLEL, progress=self.progress)
        backends.append(Backend("file", file_stack, dict(env.env()), env.backend_dir))
        pg = LocalEnvironment(env.dir, state="postgres", record_backend=False)
        try:
            pg.up(progress=lambda m: log.info("[local] %s", m))
        except Exception as exc:  # noqa: BLE001 - the file backend is measured anyway
            self.results["errors"].append({"stage": "postgres", "error": str(exc)})
        else:
            pg_env = dict(pg.env())
            pg_stack = self._one_stack("bench-state-pg", workers, ("state-pg",), address)
            saved = dict(os.environ)
            os.environ.update(pg_env)
            try:
                setup_stack(pg_stack, kube=kube, parallel=SETUP_PARALLEL, progress=self.progress)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            backends.append(
                Backend("postgres", pg_stack, {**os.environ, **pg_env}, psql=postgres_tool("psql"))
            )
        backends[0].env = {**os.environ, **backends[0].env}
        results = measure_state_settings(
            backends, trials=self.plan["trials"]["state"], rng=self.rng, progress=self.progress
        )
        results["choice"] = choose(results)
        return results

    def _refresh_yields(self, env: Any, kube: Any) -> Any:
        from bench.refreshbench import REFRESH_INTERVAL, measure_refresh_yields

        workers = self.plan["state_workers"]
        stack = self._one_stack("bench-refresh", workers, ("refresh",), env.temporal_address())
        setup_stack(stack, kube=kube, parallel=SETUP_PARALLEL, progress=self.progress)

        daemon = self._daemon(
            stack, {**DAEMON_SETTINGS, "refresh_interval": REFRESH_INTERVAL}, tag="-refresh"
        )
        return measure_refresh_yields(
            stack,
            daemon,
            kube,
            trials=self.plan["trials"]["state"],
            rng=self.rng,
            progress=self.progress,
        )

    def _wake_from_zero(self, env: Any, kube: Any) -> Any:
        from bench.wakebench import measure_wake_from_zero, wake_stack

        address = env.temporal_address()
        stack = wake_stack(self.workdir, address)
        setup_stack(stack, kube=kube, parallel=SETUP_PARALLEL, progress=self.progress)
        daemon = self._daemon(stack, DAEMON_SETTINGS, tag="-wake")
        trials = self.plan["trials"]["wake"]
        return measure_wake_from_zero(
            kube, daemon, address, trials=trials, rng=self.rng, progress=self.progress
        )

    def finish(self, out: Path, note: str | None) -> None:
        if "goals" not in self.results:
            # A run stopped before its end: the goals of what it measured.
            self.results["goals"] = report.evaluate_goals(
                self.results["sizes"], self.plan["middle"], self.plan["largest"]
            )
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
        if args.compare:  # set beside another run, in results.json too
            results["previous"] = report.comparable(json.loads(args.compare.read_text()))
        report.write_results(results, args.out, args.note or results.get("note"))
        return 0

    def on_term(signum: int, _frame: object) -> None:
        # Unwind through the finally blocks: stop the environment, write what was measured.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    run = Run(args)
    try:
        run.stage("environment and measurements", lambda: run.execute(args.keep))
    finally:
        run.finish(args.out, args.note)
    print((args.out / "results.md").read_text())
    return 1 if run.results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
