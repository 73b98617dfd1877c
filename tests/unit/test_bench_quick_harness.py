"""The benchmark harness's pure parts: generated fleets, percentiles, rendering.

No timing is asserted anywhere: these tests only check that the harness computes and
renders what it measures correctly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import fleets, report
from bench.convergence import pko_baseline
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


def test_the_pko_baseline_waits_half_a_resync_on_average() -> None:
    base = pko_baseline(20.0, resync_s=60.0)

    assert base["mean"] == pytest.approx(50.0)
    assert base["p50"] == pytest.approx(50.0)
    assert base["p95"] == pytest.approx(77.0)


def test_versions_env_is_parsed_like_the_shell_sources_it() -> None:
    text = '# comment\n\nPULUMI_VERSION=3.260.0\nKUBERNETES_VERSION="1.36.3"\nnot a line\n'

    assert parse_versions_env(text) == {"PULUMI_VERSION": "3.260.0", "KUBERNETES_VERSION": "1.36.3"}


def _summary(*values: float) -> dict[str, Any]:
    return summarize(list(values))


def _results() -> dict[str, Any]:
    results = report.new_results("quick", "2026-01-01T00:00:00+00:00")
    results["duration_s"] = 123.0
    results["machine"] = {"cores": 2, "memory_gib": 8.0, "cpu_model": "Test CPU", "os": "Linux"}
    results["versions"] = {"pulumi": "3.260.0", "kube_apiserver": "1.36.3"}
    for n, preview, noop in ((10, 8.0, 0.02), (100, 16.0, 0.08)):
        results["scale"].append(
            {
                "n": n,
                "build": {"wall_s": _summary(0.1 * n), "maxrss_mb": 100.0 + n, "resources": 4 * n},
                "initial_up_s": 10.0,
                "select_stack_s": _summary(1.0),
                "preview_nochange_s": _summary(preview),
                "up_one_change_full_s": _summary(2 * preview),
                "up_one_change_targeted_s": _summary(preview),
                "targeted_speedup": 2.0,
                "daemon_noop": {
                    "daemon": _summary(noop),
                    "standin": _summary(noop / 2),
                    "source": "twc.loop.daemon",
                    "noop_s": _summary(noop),
                },
                "noop_vs_preview": preview / noop,
            }
        )
    results["growth"] = report.compute_growth(results["scale"])
    results["convergence"] = {
        "source": "python -m twc run",
        "existing_workers": 100,
        "latency_s": _summary(2.0, 3.0, 4.0),
        "pko_resync_s": 60.0,
        "pko_full_up_s": 20.0,
        "pko_expected_s": pko_baseline(20.0),
        "speedup_p50": 50.0 / 3.0,
        "speedup_p95": 77.0 / 3.9,
    }
    run = {"queues": 1000, "wall_s": 10.0, "queues_per_s": 100.0, "rpcs_per_s": 300.0}
    results["sampling"] = {
        "settings": {"concurrency": 8, "rate_per_s": 20.0, "burst": 1},
        "rpcs_per_queue": 3,
        "shared": {**run, "errors": 0},
        "per_call": {**run, "wall_s": 15.0, "errors": 0},
        "budget": {**run, "wall_s": 50.0, "errors": 0},
        "per_call_over_shared": 1.5,
        "budget_floor_s": 50.0,
    }
    results["fixes"].append(
        {
            "title": "One list per pass",
            "where": "twc/controller/cluster.py",
            "deployments": 110,
            "before_s": _summary(3.0),
            "after_s": _summary(0.3),
            "speedup": 10.0,
        }
    )
    return results


def test_growth_is_computed_per_figure_over_n() -> None:
    g = report.compute_growth(_results()["scale"])

    assert g["build_s"] == pytest.approx(1.0)
    assert g["preview_nochange_s"] == pytest.approx(0.30103, abs=1e-4)
    assert set(g) == set(report.GROWTH_FIGURES)


def test_results_render_the_growth_table_headline_and_schema() -> None:
    md = report.render_markdown(_results(), note="shared machine")

    assert "| 10 | 40 | 1.0 s | 110 MiB | 8.0 s | 16.0 s | 8.0 s | 2.0x | 20 ms | 400x |" in md
    assert "| 100 | 400 | 10.0 s | 200 MiB | 16.0 s | 32.0 s | 16.0 s | 2.0x | 80 ms | 200x |" in md
    assert "| growth (log-log slope) | | 1.00 |" in md
    assert "**200x** (goal ≥ 100x)" in md
    assert "p50 3.0 s, p95 3.9 s over 3 trials" in md
    assert "> shared machine" in md
    assert "3.0 s before → 300 ms after (10x)" in md
    assert "`per_call_over_shared`" in md  # the JSON layout is documented


def test_convergence_with_and_without_early_apply_renders_both_rows_and_the_ratio() -> None:
    results = _results()
    results["convergence"]["engine_only_latency_s"] = _summary(8.0, 9.0, 10.0)
    results["convergence"]["early_vs_engine_only_p50"] = 3.0

    md = report.render_markdown(results, note="")

    assert "| twc, engine only (`early_apply: false`) | 9.0 s |" in md
    assert "Queue → Deployment p50 9.0 s → 3.0 s (3.0x)" in md
    assert "misses the 5 s goal" not in md


def test_missing_figures_render_as_dashes_not_errors() -> None:
    results = report.new_results("full", "2026-01-01T00:00:00+00:00")
    results["scale"].append({"n": 1000, "build": None, "daemon_noop": None})
    results["errors"].append({"stage": "initial up N=1000", "error": "boom"})

    md = report.render_markdown(results)

    assert "| 1000 | — | — | — | — | — | — | — | — | — |" in md
    assert "Not measured in this run" in md
    assert "- `initial up N=1000`: boom" in md


def test_results_are_written_as_stable_json(tmp_path: Any) -> None:
    results = _results()

    report.write_results(results, tmp_path)

    loaded = json.loads((tmp_path / "results.json").read_text())
    assert loaded["schema"] == report.SCHEMA_VERSION
    assert loaded == json.loads(json.dumps(results))
    assert (tmp_path / "results.md").read_text().startswith("# twc benchmarks")


def test_up_phases_are_read_from_the_engine_events() -> None:
    from bench.scale import phases

    records = [
        (1.0, "prelude_event", "", ""),
        (2.0, "resource_pre_event", "twc-bench-10", "same"),
        (2.5, "resource_pre_event", "a/w-0001-deployment", "same"),
        (3.0, "resource_pre_event", "a/w-0002-deployment", "update"),
        (5.0, "res_outputs_event", "a/w-0002-deployment", "update"),
        (6.0, "res_outputs_event", "a/w-0002-check", "update"),
        (7.0, "summary_event", "", ""),
    ]

    assert phases(records, "a/w-0002", 9.0) == {
        "prelude": 1.0,
        "first_step": 2.0,
        "deployment_start": 3.0,
        "deployment_done": 5.0,
        "last_step": 6.0,
        "summary": 7.0,
        "total": 9.0,
    }
    assert phases([], "a/w-0002", 1.0)["first_step"] is None
