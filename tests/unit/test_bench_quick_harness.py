"""The benchmark harness's pure parts: generated fleets, percentiles, rendering.

No timing is asserted anywhere: these tests only check that the harness computes and
renders what it measures correctly.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

import pytest

from bench import fleets, report, statebench
from bench.machine import parse_versions_env
from bench.stats import growth, percentile, ratio, summarize
from twc.spec import load_fleet, load_queue_object


def test_a_generated_fleet_is_valid_and_spreads_workers_over_namespaces() -> None:
    doc = fleets.generate_fleet(10, host_port="127.0.0.1:7233", namespaces=("a", "b", "c"))

    fleet = load_fleet(doc, "bench.yaml")
    workers = fleet.resolved_workers()

    assert len(workers) == 10
    assert {w.namespace for w in workers} == {"a", "b", "c"}
    assert len({w.task_queue_name for w in workers}) == 10
    assert len(fleet.cluster_connections) == 1
    assert {w.image for w in workers} == {fleets.IMAGE}


def _changed(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str]]:
    old = load_fleet(before, "bench.yaml").resolved_workers()
    new = load_fleet(after, "bench.yaml").resolved_workers()
    return [
        (b.name, a.image) for b, a in zip(old, new, strict=True) if b.model_dump() != a.model_dump()
    ]


def test_a_one_worker_change_touches_exactly_that_worker() -> None:
    base = fleets.generate_fleet(5)
    first = fleets.generate_fleet(5, revisions={3: 1})
    # Earlier changes stay: the next change differs from the last fleet in one worker.
    second = fleets.generate_fleet(5, revisions={3: 1, 1: 2})

    assert _changed(base, first) == [(fleets.worker_name(3), f"{fleets.IMAGE}-r1")]
    assert _changed(first, second) == [(fleets.worker_name(1), f"{fleets.IMAGE}-r2")]


def test_worker_keys_name_the_component_of_each_worker() -> None:
    assert fleets.worker_key(5, ("x", "y")) == "y/w-0005"
    assert fleets.worker_key(0) == f"{fleets.NAMESPACES[0]}/w-0000"


def test_an_empty_fleet_and_bad_arguments() -> None:
    assert load_fleet(fleets.generate_fleet(0), "bench.yaml").resolved_workers() == []
    with pytest.raises(ValueError, match="must not be negative"):
        fleets.generate_fleet(-1)
    with pytest.raises(ValueError, match="at least one namespace"):
        fleets.generate_fleet(1, namespaces=())


def test_the_convergence_queue_object_derives_a_worker() -> None:
    queue = load_queue_object(fleets.queue_object("conv-01", "bench-a"))

    assert (queue.namespace, queue.name, queue.worker_enabled) == ("bench-a", "conv-01", True)


def test_a_sharded_fleet_puts_each_namespace_in_a_shard_of_its_own() -> None:
    from twc.shards import ShardMap, assign, namespace_load

    namespaces = fleets.namespaces_for(1000, 250)
    doc = fleets.generate_fleet(
        1000, namespaces=namespaces, max_workers_per_shard=250, autoscale=True
    )
    fleet = load_fleet(doc, "bench.yaml")

    assert namespaces == ("bench1000-00", "bench1000-01", "bench1000-02", "bench1000-03")
    shard_map = assign(ShardMap(), namespace_load(fleet), max_workers_per_shard=250)
    assert shard_map.shards == 4
    assert len(set(shard_map.namespaces.values())) == 4
    scaled = [w for w in fleet.resolved_workers() if w.autoscaling is not None]
    assert len(scaled) == fleets.autoscaled_count(1000, namespaces) == 8
    assert {w.namespace for w in scaled} == set(namespaces)
    assert len(fleets.namespaces_for(5000, 250)) == 20
    assert fleets.namespaces_for(100, 250) == ("bench100-00",)


@pytest.mark.parametrize(
    ("samples", "q", "expected"),
    [
        ([1.0], 50, 1.0),
        ([1.0], 95, 1.0),
        ([3.0, 1.0, 2.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        # numpy.percentile's default ("linear"): rank (n - 1) * q / 100.
        ([1.0, 2.0, 3.0, 4.0], 95, 3.85),
        (list(range(1, 21)), 95, 19.05),
        ([5.0, 7.0], 0, 5.0),
        ([5.0, 7.0], 100, 7.0),
    ],
)
def test_percentiles_interpolate_between_closest_ranks(
    samples: list[float], q: float, expected: float
) -> None:
    assert percentile(samples, q) == pytest.approx(expected)


def test_percentile_refuses_nothing_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="of no samples"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"within \[0, 100\]"):
        percentile([1.0], 101)


def test_summaries_ratios_and_growth() -> None:
    s = summarize([2.0, 1.0, 4.0, 3.0])
    assert (s["n"], s["min"], s["max"], s["p50"], s["mean"]) == (4, 1.0, 4.0, 2.5, 2.5)
    assert summarize([])["p50"] is None

    assert ratio(10.0, 4.0) == 2.5
    assert ratio(None, 4.0) is None
    assert ratio(1.0, 0.0) is None

    assert growth({10: 1.0, 100: 10.0, 1000: 100.0}) == pytest.approx(1.0)
    assert growth({10: 5.0, 1000: 5.0}) == pytest.approx(0.0)
    assert growth({10: 1.0}) is None
    assert growth({10: 1.0, 100: None}) is None


def test_versions_env_is_parsed_like_the_shell_sources_it() -> None:
    text = '# comment\n\nPULUMI_VERSION=3.260.0\nKUBERNETES_VERSION="1.36.3"\nnot a line\n'

    assert parse_versions_env(text) == {"PULUMI_VERSION": "3.260.0", "KUBERNETES_VERSION": "1.36.3"}


def _summary(*values: float) -> dict[str, Any]:
    return summarize(list(values))


def _size(n: int, shards: int, scale: float) -> dict[str, Any]:
    return {
        "n": n,
        "shards": shards,
        "namespaces": shards,
        "initial_up_s": {f"bench-{n}.s00": 30.0},
        "noop": {
            "per_shard_s": _summary(*[0.02 * scale] * 25),
            "all_shards_s": _summary(0.02 * scale * shards),
            "shards": shards,
        },
        "change": {
            "latency_s": _summary(10.0 * scale, 11.0 * scale, 12.0 * scale),
            "engine_runs_per_change": _summary(1.0),
            "state_bytes_per_change": _summary(5e6),
            "engine_peak_total_mb": 900.0,
            "engine_peak_process_mb": 400.0,
            "engine_peak_by_name_mb": {"pulumi": 200.0},
        },
        "backlog": {
            "burst_to_replicas_s": _summary(12.0),
            "sample_to_replicas_s": _summary(0.5 * scale),
            "up_runs": _summary(0.0, 0.0),
            "refresh_runs": _summary(1.0, 0.0),
            "workflows": 60,
        },
        "queue": {
            "latency_s": _summary(*[2.0 * scale] * 20),
            "deployment_s": _summary(0.4),
            "steps_s": {key: _summary(0.1 * scale) for key, _ in report.QUEUE_STEPS},
            "cpu": {
                "wall_s": 100.0,
                "cpu_s": {"kwok": 30.0 * scale, "twc run": None},
                "machine_busy": 0.5 * scale,
                "machine_cpu_s": 100.0 * scale,
            },
            "mean_gap_s": 8.0,
            "refreshes_during": 1.0,
            "busy": True,
            "errors": [],
        },
        "memory": {"daemon_peak_rss_mb": 300.0 * scale},
        "baselines": {
            "preview_s": _summary(20.0),
            "backlog_via_engine_s": 11.0 * scale,
        },
    }


def _results() -> dict[str, Any]:
    results = report.new_results("full", "2026-01-01T00:00:00+00:00", seed=7)
    results["duration_s"] = 5000.0
    results["machine"] = {"cores": 2, "memory_gib": 8.0, "cpu_model": "Test CPU", "os": "Linux"}
    results["versions"] = {"pulumi": "3.260.0", "kube_apiserver": "1.36.3"}
    results["sizes"] = [_size(100, 1, 0.5), _size(1000, 4, 1.0), _size(5000, 20, 2.0)]
    results["sizes"][1]["baselines"]["change_pulumi_up"] = {"latency_s": _summary(120.0)}
    results["sizes"][2]["baselines"]["change_pulumi_up"] = {
        "computed": "N=1000's 120.0 s grown by the slope 0.80",
        "latency_s": {"n": 0, "p50": 435.0},
    }
    results["goals"] = report.evaluate_goals(results["sizes"], 1000, 5000)
    return results


def test_the_goals_are_judged_from_the_runs_own_figures() -> None:
    goals = {g["key"]: g for g in _results()["goals"]}

    assert goals["change"]["measured"] == pytest.approx(11.0)
    assert goals["change"]["met"] is True
    assert goals["noop"]["met"] is True
    assert goals["backlog_runs"]["met"] is True
    # Twice as slow at N=5000 as at N=1000: the 1.5x growth goal is missed.
    assert goals["change_growth"]["measured"] == pytest.approx(2.0)
    assert goals["change_growth"]["met"] is False
    assert goals["rss"]["measured"] == pytest.approx(600.0)
    assert goals["rss"]["met"] is True


def test_a_goal_without_its_figure_is_not_measured_rather_than_met() -> None:
    sizes = [_size(1000, 4, 1.0)]
    del sizes[0]["queue"]

    goals = {g["key"]: g for g in report.evaluate_goals(sizes, 1000, 5000)}

    assert goals["queue"]["met"] is None
    assert goals["rss"]["met"] is None


def test_results_render_goals_baselines_labels_and_p95_only_from_enough_trials() -> None:
    md = report.render_markdown(_results(), note="shared machine")

    assert "> shared machine" in md
    assert "| N=1000: one-worker change, p50 | ≤ 15.0 s | 11.0 s | met |" in md
    assert "**missed**" in md
    # 3 trials: no p95; 20 trials: a p95.
    assert "p50 11.0 s (3 trials)" in md
    assert "p50 2.0 s, p95 2.0 s (20 trials)" in md
    assert "(computed: N=1000's 120.0 s grown by the slope 0.80)" in md
    assert "by plain `pulumi up` of one stack (measured)" in md
    assert "through a targeted up (computed)" in md
    assert "Top-level keys of `bench/results.json`" in md


def test_a_queues_steps_and_the_cores_used_render_per_size() -> None:
    md = report.render_markdown(_results())

    assert "| KWOK: on a node → Running | 50.0 ms | 100.0 ms | 200.0 ms |" in md
    assert "| the whole | 1.0 s | 2.0 s | 4.0 s |" in md
    assert "| kwok | 0.15 | 0.30 | 0.60 |" in md
    # A process not readable at both ends is unknown, not idle.
    assert "| twc run | — | — | — |" in md
    assert "| all cores | 25% busy | 50% busy | 100% busy |" in md


def test_a_daemon_profile_renders_per_size_and_a_frame_out_of_a_sizes_top_says_so() -> None:
    results = _results()
    results["sizes"][1]["queue"]["profile"] = {
        "samples": 500,
        "rate_hz": 50,
        "active_thread_s": 10.0,
        "twc_inclusive": [["twc/reconcile/early.py apply", 0.4]],
        "leaves": [["json/decoder.py raw_decode", 0.1]],
    }
    results["sizes"][2]["queue"]["profile"] = {
        "samples": 900,
        "rate_hz": 50,
        "active_thread_s": 18.0,
        "twc_inclusive": [
            ["twc/reconcile/early.py apply", 0.25],
            ["twc/reconcile/observe.py report", 0.3],
        ],
        "leaves": [["json/decoder.py raw_decode", 0.2]],
    }
    results["sizes"][0]["queue"]["profile"] = {"error": "py-spy wrote no stacks: denied"}

    md = report.render_markdown(results)

    assert "- N=100: py-spy wrote no stacks: denied" in md
    assert "- N=1000: 500 samples at 50 Hz, 10 thread-seconds active over the figure's 100 s." in md
    assert "| `twc/reconcile/early.py apply` | 40% | 25% |" in md
    assert "| `twc/reconcile/observe.py report` | (not in top) | 30% |" in md
    assert "| `json/decoder.py raw_decode` | 10% | 20% |" in md


def test_a_processes_cpu_time_is_read_and_a_gone_one_is_unknown() -> None:
    import os
    import subprocess
    import sys

    from bench.procs import CpuShare, cpu_seconds

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    share = CpuShare({"this": os.getpid(), "gone": child.pid}).start()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass  # spend CPU time for the reading to see
    reading = share.stop({"apart": 1.5})

    cpu = reading["cpu_s"]
    assert isinstance(cpu, dict)
    assert cpu["this"] is not None
    assert cpu["this"] >= 0.1
    assert cpu["gone"] is None
    assert cpu["apart"] == 1.5
    assert cpu_seconds(child.pid) is None
    busy = reading["machine_busy"]
    assert isinstance(busy, float)
    assert 0.0 < busy <= 1.0


def test_engine_memory_leaves_out_a_child_not_yet_execd_and_counts_one_that_is() -> None:
    import os
    import subprocess
    from pathlib import Path

    from bench.procs import TreeMemory
    from tests.helpers import assert_eventually

    forked = os.fork()
    if forked == 0:  # this process's image and pages, never exec'd (as between fork and exec)
        time.sleep(30)
        os._exit(0)
    execd = subprocess.Popen(["sleep", "30"])
    memory = TreeMemory(os.getpid(), interval=0.02).start()
    try:
        assert_eventually(lambda: memory.unexeced >= 1 and "sleep" in memory.peak_by_name)
    finally:
        found = memory.stop()
        os.kill(forked, 9)
        os.waitpid(forked, 0)
        execd.kill()
        execd.wait()

    assert cast(int, found["unexeced"]) >= 1
    assert Path("/proc/self/comm").read_text().strip() not in cast(
        dict[str, float], found["peak_by_name_mb"]
    )
    assert found["peak_process"] == "sleep"


def test_results_round_trip_through_json(tmp_path: Any) -> None:
    results = _results()

    report.write_results(results, tmp_path, note=None)

    assert json.loads((tmp_path / "results.json").read_text()) == results
    assert (tmp_path / "results.md").read_text() == report.render_markdown(results, None)


def test_results_md_is_made_again_from_results_json_alone(tmp_path: Any) -> None:
    results = _results()
    # Not in sorted order: the run's order of processes and versions is kept.
    results["versions"] = {"pulumi": "3.260.0", "etcd": "3.6.16", "kube_apiserver": "1.36.3"}
    results["sizes"][1]["queue"]["cpu"] = {
        "wall_s": 10.0,
        "cpu_s": {"temporal": 1.0, "engine runs twc run ended": 14.0, "etcd": 0.2},
        "machine_busy": 0.97,
    }

    report.write_results(results, tmp_path, note="the run's own note")

    written = (tmp_path / "results.md").read_text()
    again = report.render_markdown(json.loads((tmp_path / "results.json").read_text()))
    assert again == written
    assert "> the run's own note" in written
    assert written.index("| temporal |") < written.index("| engine runs twc run ended |")
    assert written.index("| engine runs twc run ended |") < written.index("| etcd |")


def _state(p50: dict[str, float]) -> dict[str, Any]:
    return {
        "results": {"file": {name: {"up_s": _summary(v), "bytes": None} for name, v in p50.items()}}
    }


def test_the_chosen_state_setting_keeps_each_step_unless_final_is_much_faster() -> None:
    close = statebench.choose(_state({"every-step": 10.0, "final": 9.5, "every-step+gzip": 10.5}))
    assert close["choice"] == "every-step"

    much = statebench.choose(_state({"every-step": 10.0, "final": 8.0}))
    assert much["choice"] == "final"

    gzip = statebench.choose(_state({"every-step": 10.0, "every-step+gzip": 9.0, "final": 8.5}))
    assert gzip["choice"] == "every-step+gzip"

    assert statebench.choose({"results": {}})["choice"] == "every-step"


def test_a_state_only_run_measures_no_fleet_size() -> None:
    import shutil

    from bench.__main__ import Run, parse_args

    run = Run(parse_args(["--state-only"]))
    try:
        assert run.plan["sizes"] == []
        assert not run.skip_state
    finally:
        shutil.rmtree(run.workdir)


def test_a_change_during_a_refresh_renders_each_kind_with_its_meaning() -> None:
    from bench.refreshbench import KINDS

    results = _results()
    results["refresh_yields"] = {
        "workers": 250,
        "refresh_interval_s": 20.0,
        "refresh_s": _summary(48.0),
        "kinds": KINDS,
        "latency_s": {
            "idle": _summary(9.0),
            "refreshing": _summary(12.0),
        },
        "refreshes_given_way": 5,
    }

    md = report.render_markdown(results, None)

    assert "## A change during a refresh" in md
    assert "| refreshing: the change is made 2 s into a refresh, which stops for it" in md
    assert "p50 12.0 s" in md
    assert "Refreshes that stopped for a change: 5." in md


def test_a_daemons_own_cpu_is_read_apart_from_its_ended_children() -> None:
    import os
    import subprocess
    import sys

    from bench.procs import CpuShare

    share = CpuShare(
        {"own": (os.getpid(), "own"), "ended": (os.getpid(), "ended children")}
    ).start()
    # A child that spends CPU time and is waited for: its time becomes this process's
    # "ended children", not its own.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nt=time.process_time()+0.3\nwhile time.process_time()<t: pass",
        ],
        check=True,
    )
    reading = share.stop()

    cpu = reading["cpu_s"]
    assert isinstance(cpu, dict)
    assert cpu["ended"] is not None
    assert cpu["ended"] >= 0.25
    assert cpu["own"] is not None
    assert cpu["own"] < cpu["ended"]


def test_a_worker_processs_start_marks_are_read_and_a_missing_one_fails_the_trial() -> None:
    from bench.figures import _worker_marks
    from twc.local.sample import MARK
    from twc.local.workerpod import marks

    log = (
        f"{MARK} imported 100.250000\nsome other line\n{MARK} connected 100.500000\n"
        f"{MARK} built 100.750000\nworker polling q on localhost:7233\n"
    )
    assert marks(log) == {"imported": 100.25, "connected": 100.5, "built": 100.75}

    class Pod:
        def __init__(self, text: str) -> None:
            self.text = text

        def log_text(self) -> str:
            return self.text

    # started at 100.0 on the wall clock, 5.0 on the figure's
    assert _worker_marks(Pod(log), 5.0, 100.0) == {
        "imported": 5.25,
        "connected": 5.5,
        "built": 5.75,
    }
    with pytest.raises(ValueError, match="built"):
        _worker_marks(Pod(log.replace(f"{MARK} built", "built")), 5.0, 100.0)


def test_py_spy_samples_a_busy_process_and_names_where_its_cpu_went(tmp_path: Any) -> None:
    import subprocess
    import sys

    from bench.profile import DaemonProfile

    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "def spin_here():\n    while True: sum(range(1000))\nspin_here()",
        ]
    )
    try:
        time.sleep(0.3)
        with DaemonProfile(busy.pid, tmp_path / "profile.txt", rate=100) as profile:
            time.sleep(1.5)
    finally:
        busy.kill()
        busy.wait()

    summary = profile.summary
    assert summary is not None
    assert "error" not in summary, summary
    assert summary["samples"] >= 50
    assert summary["active_thread_s"] > 0.5
    leaves = dict(summary["leaves"])
    assert any("spin_here" in frame for frame in leaves), leaves
    assert summary["twc_inclusive"] == []  # nothing of twc's ran in that process


def test_a_profile_of_nothing_is_refused_and_twcs_frames_are_counted_once_per_sample() -> None:
    from bench.profile import summarize_stacks

    with pytest.raises(ValueError, match="no running thread"):
        summarize_stacks("", rate=50)
    raw = (
        "thread (0x1);run (/x/twc/reconcile/daemon.py:10);step (/x/twc/reconcile/daemon.py:20);"
        "run (/x/twc/reconcile/daemon.py:12);loads (/usr/lib/python3/json/decoder.py:5) 3\n"
        "thread (0x2);wait (/x/lib/threading.py:1) 1\n"
    )
    summary = summarize_stacks(raw, rate=50)
    assert summary["samples"] == 4
    assert dict(summary["twc_inclusive"]) == {
        "twc/reconcile/daemon.py run": 0.75,
        "twc/reconcile/daemon.py step": 0.75,
    }
    assert dict(summary["leaves"]) == {"json/decoder.py loads": 0.75, "lib/threading.py wait": 0.25}


def test_the_fleet_file_the_busy_load_rewrites_is_safe_dumps_text_byte_for_byte(
    tmp_path: Any,
) -> None:
    import yaml

    from bench.stacks import BenchStack

    stack = BenchStack(
        n=120,
        name="x",
        fleet_file=tmp_path / "fleet.yaml",
        host_port="localhost:7233",
        namespaces=("ns-a", "ns-b", "ns-c"),
        per_shard=50,
    )
    for changed in (None, 3, 3, 119, 0):
        stack.write(changed=changed)
        text = stack.fleet_file.read_text()
        assert text == yaml.safe_dump(stack.document(), sort_keys=False)
    assert "bench-worker" in text
    assert text.count("- name: w-") == 120


def test_the_wake_figure_has_a_worker_that_sleeps_and_one_kept_awake_and_renders_both() -> None:
    from pathlib import Path

    from bench.wakebench import wake_stack

    fleet = load_fleet(wake_stack(Path("/tmp"), "127.0.0.1:7233").document(), "wake.yaml")
    floors = {w.name: w.autoscaling.min_replicas for w in fleet.resolved_workers() if w.autoscaling}
    assert floors == {"w-0000": 0, "w-0001": 1}

    results = _results()
    results["wake_from_zero"] = {
        "kinds": {"asleep": "at zero", "awake": "at one"},
        "latency_s": {"asleep": _summary(8.0, 9.0, 10.0), "awake": _summary(0.1, 0.1, 0.2)},
        "asleep_steps_s": {"scaled": _summary(6.0), "running": _summary(7.0)},
        "sampling_interval_s": 10.0,
        "cooldown_s": 20,
    }
    md = report.render_markdown(results)
    assert "## First task from zero" in md
    assert "| asleep: at zero | p50 9.0 s (3 trials) |" in md
    assert "| awake: at one | p50 100.0 ms (3 trials) |" in md
    assert "`scaleDownStabilizationSeconds: 20` (default 300)" in md


def test_the_no_op_figure_times_each_loops_woken_iteration_not_a_later_one() -> None:
    import signal
    import subprocess
    from pathlib import Path

    from bench.figures import noop_iteration
    from bench.stacks import BenchStack

    def it(n: int, ended: float, seconds: float = 0.01) -> dict[str, Any]:
        return {"number": n, "ok": True, "seconds": seconds, "cpuSeconds": 0.005, "endedAt": ended}

    def loops(s0: list[dict[str, Any]], s1: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "shards": {
                k: {"lastIteration": v[-1], "recentIterations": v}
                for k, v in (("s0", s0), ("s1", s1))
            }
        }

    first = loops([it(1, 99.0)], [it(1, 99.0)])
    # s1 iterated again 1 s later (a sample came due): its woken iteration is number 2.
    second = loops([it(1, 99.0), it(2, 100.0)], [it(1, 99.0), it(2, 100.2), it(3, 101.2, 0.3)])
    # s0's woken iteration (number 3) has left its history of one: left out, counted.
    third = loops([it(4, 103.0)], [*second["shards"]["s1"]["recentIterations"], it(4, 103.1)])
    reads = iter([first, second, second, second, third, third, third])

    class Daemon:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def status(self) -> dict[str, Any]:
            return next(reads)

    ignore = lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)  # noqa: E731
    sleeper = subprocess.Popen(["sleep", "60"], preexec_fn=ignore)
    try:
        stack = BenchStack(2, "bench-2", Path("fleet.yaml"), "127.0.0.1:7233", ("a", "b"), 1)
        found = noop_iteration(stack, cast(Any, Daemon(sleeper.pid)), trials=2, progress=print)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert found["per_shard_s"]["n"] == 3, "two of the first trial, s1's of the second"
    assert found["per_shard_s"]["max"] == pytest.approx(0.01), "not s1's later 0.3 s one"
    assert found["iterated_again"] == 1
    assert found["spans_left_out"] == 1
    assert found["all_shards_s"]["n"] == 1
    assert found["all_shards_s"]["p50"] == pytest.approx(0.21)
