"""``bench/results.json`` and ``bench/results.md`` from one run's results (pure).

The JSON is the record; the Markdown is rendered from it alone (``python -m bench
--render`` re-renders without measuring), so every sentence in it states a figure of
that run. A p95 is shown only for figures with at least :data:`P95_MIN` trials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.stats import ratio

SCHEMA_VERSION = 2
P95_MIN = 20
"""Trials below which a p95 is not reported (it would be the maximum, or noise)."""

QUEUE_STEPS = (
    ("deployment", "twc: Queue → its Deployment"),
    ("pod", "controller-manager: Deployment → pod"),
    ("scheduled", "kube-scheduler: pod → on a node"),
    ("running", "KWOK: on a node → Running"),
    ("started", "kubelet's part: Running → worker process started"),
    ("imported", "worker process: started → temporalio imported"),
    ("connected", "worker process: → its client connected to Temporal"),
    ("built", "worker process: → its Worker built (workflows validated)"),
    ("polling", "Temporal: worker polling → its poller listed"),
)
"""A Queue trial's moments after its creation, in order, and who is waited for between
one and the next (``queue.steps_s``)."""

GOALS = (
    # (key, words, figure path, limit, unit)
    ("change", "one-worker change, p50", ("change", "latency_s", "p50"), 15.0, "s"),
    (
        "backlog",
        "backlog → replicas after the sample, p50",
        ("backlog", "sample_to_replicas_s", "p50"),
        2.0,
        "s",
    ),
    ("backlog_runs", "ups per backlog burst", ("backlog", "up_runs", "max"), 0.0, ""),
    ("noop", "no-op iteration (one shard), p50", ("noop", "per_shard_s", "p50"), 0.050, "s"),
    ("queue", "Queue → polling worker, p50", ("queue", "latency_s", "p50"), 3.0, "s"),
)
"""The goals at the middle size (N=1000, four shards); at the largest size each figure
should be within :data:`GROWTH_LIMIT` of it, and the daemon within :data:`RSS_LIMIT_MB`."""
GROWTH_LIMIT = 1.5
RSS_LIMIT_MB = 1024.0

SCHEMA_DOC = f"""\
Top-level keys of `bench/results.json` (`schema` {SCHEMA_VERSION}; bumped on any
incompatible change). Times are seconds, memory MiB, bytes bytes; a figure that could
not be measured is `null` and the reason is in `errors`. A *summary* is `{{n, min, p50,
p95, max, mean, samples}}` (its p95 is rendered only from ≥ {P95_MIN} samples).

- `schema`, `mode` (`quick` or `full`), `figures` (those measured), `started_at`,
  `duration_s`, `seed` (of the
  trials' random order), `machine` (`cores`, `memory_gib`, `cpu_model`, `os`,
  `load_average`, `load_average_end`), `versions`, `settings` (the daemon's, as run),
  `note` (`--note`, when given), `noop_timed` (how the no-op figures were timed),
  `previous` (an earlier run's `started_at`, `twc`, `noop_timed` and, per size, the
  figures set beside this run's).
- `sizes[]`, one per fleet size: `n`, `shards`, `namespaces`, `initial_up_s` (set-up,
  per stack), `figure_order`;
  - `noop`: `per_shard_s`, `per_shard_cpu_s` (the iterating thread's CPU time),
    `all_shards_s` (summaries), `shards`, `dropped` (trials left out), `iterated_again`
    and `spans_left_out` (loops whose woken iteration had left `/status`'s
    `recentIterations` by the read, and their trials' spans: left out), `settle_s` (how
    long the daemon took, after its ups, to write every worker's status and check every
    task queue once: the trials start after that);
  - `change`: `latency_s`, `engine_runs_per_change`, `state_bytes_per_change`
    (summaries), `engine_peak_total_mb`, `engine_peak_process_mb`,
    `engine_peak_by_name_mb`, `engine_unexeced_samples` (children of the daemon sampled before
    their exec, not counted);
  - `backlog`: `burst_to_replicas_s`, `sample_to_replicas_s`, `up_runs`, `refresh_runs`
    (summaries), `trials_without_sample` (a count), `workflows`;
  - `queue`: `latency_s`, `deployment_s` (summaries), `steps_s.<step>` (a summary per
    step of `QUEUE_STEPS`; the worker process's own steps from the marks it prints),
    `answer_s` (the round trip of the question that found the poller), `cpu`
    (`wall_s`, `cpu_s.<process>`: CPU seconds over the figure, `null` when not readable
    at both ends; `machine_busy`: the share of all cores busy; `machine_cpu_s`),
    `mean_gap_s`, `refreshes_during`, `busy`, `errors`; with `--profile`, `profile`
    (`samples`, `rate_hz`, `active_thread_s`, `twc_inclusive` and `leaves`: the top
    frames with their share of the samples; or `error`);
  - `memory`: `daemon_peak_rss_mb`;
  - `baselines`: what a user would otherwise run: `preview_s` (a shard's
    `pulumi preview`, measured), `change_pulumi_up` (plain `pulumi up` of the same
    fleet as one stack after a one-worker edit, until the Deployment is Available:
    measured, or `computed` from the largest measured size by the measured growth),
    `backlog_via_engine_s` (`computed`: the targeted `up` one replica change took before
    replicas left the engine, taken as this size's one-worker change).
- `state`: `workers`, `results.<backend>.<variant>` (`up_s`, `bytes`), `choice`.
- `refresh_yields` (`--refresh-only`): `workers`, `refresh_interval_s`, `refresh_s`,
  `kinds`, `latency_s.<kind>`, `refreshes_given_way`.
- `wake_from_zero` (`--wake-only`): `kinds`, `latency_s.<kind>`, `asleep_steps_s.<step>`
  (seconds from the start: `scaled`, `running`, `result`), `sampling_interval_s`,
  `cooldown_s`.
- `goals[]`: `{{key, words, limit, unit, measured, met}}` at the middle size, and the
  growth goals.
- `errors[]`: `{{stage, error}}` for every stage that failed; the run went on.
"""


def new_results(mode: str, started_at: str, seed: int) -> dict[str, Any]:
    """The empty record of a run."""
    return {
        "schema": SCHEMA_VERSION,
        "mode": mode,
        "started_at": started_at,
        "duration_s": None,
        "seed": seed,
        "machine": {},
        "versions": {},
        "settings": {},
        "sizes": [],
        "state": None,
        "goals": [],
        "errors": [],
    }


def get(entry: Any, *path: str) -> Any:
    """A nested figure, or ``None`` when any step is missing."""
    node = entry
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "—"
    if unit == "s":
        if value < 1:
            return f"{value * 1000:.1f} ms"
        return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"
    if unit == "MiB":
        return f"{value:.0f} MiB"
    if unit == "B":
        return f"{value / 1e6:.1f} MB" if value >= 1e5 else f"{value / 1e3:.1f} kB"
    return f"{value:g}"


def _summary(summary: Mapping[str, Any] | None, unit: str = "s") -> str:
    """p50 (and p95 from enough trials), with the trial count."""
    if not summary or not summary.get("n"):
        return "—"
    text = f"p50 {_fmt(summary.get('p50'), unit)}"
    if summary["n"] >= P95_MIN:
        text += f", p95 {_fmt(summary.get('p95'), unit)}"
    return f"{text} ({summary['n']} trials)"


def _queue_steps(sizes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where a Queue's time goes at each size, and who had the cores meanwhile."""
    measured = [s for s in sizes if get(s, "queue", "steps_s")]
    if not measured:
        return []
    head = " | ".join(f"N={s['n']}" for s in measured)
    out = [
        "",
        "### Queue → polling worker: where the time goes",
        "",
        "Each trial's moments, looked for every 50 ms; the p50 of each step (the steps' "
        "p50s need not add up to the whole's).",
        "",
        f"| step | {head} |",
        "|---|" + "---:|" * len(measured),
    ]
    for key, words in QUEUE_STEPS:
        cells = [_fmt(get(s, "queue", "steps_s", key, "p50")) for s in measured]
        out.append(f"| {words} | {' | '.join(cells)} |")
    whole = [_fmt(get(s, "queue", "latency_s", "p50")) for s in measured]
    out.append(f"| the whole | {' | '.join(whole)} |")
    if any(get(s, "queue", "answer_s") is not None for s in measured):
        answer = [_fmt(get(s, "queue", "answer_s", "p50")) for s in measured]
        out.append(
            "| within the last step: the harness's answering question to Temporal "
            f"(its round trip) | {' | '.join(answer)} |"
        )
    names: list[str] = []
    for s in measured:
        for name in get(s, "queue", "cpu", "cpu_s") or {}:
            if name not in names:
                names.append(name)
    if not names:
        return out
    out += [
        "",
        "Cores each process used over the figure (its CPU seconds ÷ the figure's wall "
        "time; the machine has "
        "the cores the header says):",
        "",
        f"| process | {head} |",
        "|---|" + "---:|" * len(measured),
    ]

    def cores(size: Mapping[str, Any], name: str) -> str:
        used, wall = get(size, "queue", "cpu", "cpu_s", name), get(size, "queue", "cpu", "wall_s")
        return "—" if used is None or not wall else f"{used / wall:.2f}"

    for name in names:
        out.append(f"| {name} | {' | '.join(cores(s, name) for s in measured)} |")
    busy = []
    for s in measured:
        share = get(s, "queue", "cpu", "machine_busy")
        busy.append("—" if share is None else f"{share:.0%} busy")
    out.append(f"| all cores | {' | '.join(busy)} |")
    return out


def _queue_profile(sizes: Sequence[Mapping[str, Any]]) -> list[str]:
    """What ``twc run``'s own threads were doing during the Queue figure (``--profile``)."""
    measured = [s for s in sizes if get(s, "queue", "profile")]
    if not measured:
        return []
    sampled = [s for s in measured if "error" not in get(s, "queue", "profile")]
    head = " | ".join(f"N={s['n']}" for s in sampled)
    out = [
        "",
        "### twc run's own threads during the Queue figure (py-spy)",
        "",
        "Sampled without pausing the daemon; a sample is one running thread's stack. "
        "*Active* is the samples ÷ the rate: thread-seconds running or ready to run (a "
        "thread waiting for the GIL or an answer is not sampled).",
        "",
    ]
    for s in measured:
        profile = get(s, "queue", "profile")
        if "error" in profile:
            out.append(f"- N={s['n']}: {profile['error']}")
            continue
        wall = get(s, "queue", "cpu", "wall_s")
        over = f" over the figure's {wall:.0f} s" if wall else ""
        out.append(
            f"- N={s['n']}: {profile['samples']} samples at {profile['rate_hz']} Hz, "
            f"{profile['active_thread_s']:.0f} thread-seconds active{over}."
        )
    for key, words in (
        ("twc_inclusive", "twc's functions: share of the samples with it on the stack"),
        ("leaves", "where the CPU was (the leaf frame): share of the samples"),
    ):
        frames: list[str] = []
        for s in sampled:
            for frame, _share in get(s, "queue", "profile", key) or []:
                if frame not in frames:
                    frames.append(frame)
        if not frames:
            continue
        out += ["", f"| {words} | {head} |", "|---|" + "---:|" * len(sampled)]
        for frame in frames:
            cells = []
            for s in sampled:
                shares = dict(get(s, "queue", "profile", key) or [])
                cells.append(f"{shares[frame]:.0%}" if frame in shares else "(not in top)")
            out.append(f"| `{frame}` | {' | '.join(cells)} |")
    return out


def evaluate_goals(
    sizes: Sequence[Mapping[str, Any]], middle: int, largest: int
) -> list[dict[str, Any]]:
    """The goals against this run's figures (pure)."""
    by_n = {s["n"]: s for s in sizes}
    mid, big = by_n.get(middle), by_n.get(largest)
    goals: list[dict[str, Any]] = []
    for key, words, path, limit, unit in GOALS:
        value = get(mid, *path)
        goals.append(
            {
                "key": key,
                "words": f"N={middle}: {words}",
                "limit": limit,
                "unit": unit,
                "measured": value,
                "met": None if value is None else value <= limit,
            }
        )
        if key == "backlog_runs":
            continue
        grown = ratio(get(big, *path), value)
        goals.append(
            {
                "key": f"{key}_growth",
                "words": f"N={largest} ÷ N={middle}: {words}",
                "limit": GROWTH_LIMIT,
                "unit": "x",
                "measured": grown,
                "met": None if grown is None else grown <= GROWTH_LIMIT,
            }
        )
    rss = get(big, "memory", "daemon_peak_rss_mb")
    goals.append(
        {
            "key": "rss",
            "words": f"N={largest}: daemon peak RSS",
            "limit": RSS_LIMIT_MB,
            "unit": "MiB",
            "measured": rss,
            "met": None if rss is None else rss <= RSS_LIMIT_MB,
        }
    )
    return goals


def _goal_value(goal: Mapping[str, Any]) -> str:
    unit = goal["unit"]
    value = goal["measured"]
    if unit == "x":
        return "—" if value is None else f"{value:.2f}x"
    if unit == "":
        return "—" if value is None else f"{value:g}"
    return _fmt(value, unit)


def _limit(goal: Mapping[str, Any]) -> str:
    unit = goal["unit"]
    if unit == "x":
        return f"≤ {goal['limit']:g}x"
    if unit == "":
        return f"≤ {goal['limit']:g}"
    return f"≤ {_fmt(goal['limit'], unit)}"


def _headline(results: Mapping[str, Any]) -> list[str]:
    lines = []
    for size in results.get("sizes", []):
        n = size["n"]
        base = get(size, "baselines") or {}
        change = get(size, "change", "latency_s", "p50")
        flat = get(base, "change_pulumi_up", "latency_s", "p50")
        label = "computed" if get(base, "change_pulumi_up", "computed") else "measured"
        shards = size.get("shards")
        parts = [f"**N={n}** ({shards if shards is not None else 'not set up:'} shard(s)):"]
        if change is not None:
            text = f"one-worker change {_fmt(change)}"
            if flat is not None:
                text += (
                    f" vs {_fmt(flat)} by plain `pulumi up` of one stack ({label}): "
                    f"{ratio(flat, change):.1f}x"
                )
            parts.append(text)
        sample = get(size, "backlog", "sample_to_replicas_s", "p50")
        runs = get(size, "backlog", "up_runs", "max")
        via = get(base, "backlog_via_engine_s")
        if sample is not None:
            text = f"backlog → replicas {_fmt(sample)} after the sample with {runs:g} ups"
            if via is not None:
                text += f" vs {_fmt(via)} through a targeted up (computed)"
            parts.append(text)
        noop = get(size, "noop", "per_shard_s", "p50")
        preview = get(base, "preview_s", "p50")
        if noop is not None:
            text = f"no-op iteration {_fmt(noop)} per shard"
            if preview is not None:
                text += f" vs `pulumi preview` of a shard {_fmt(preview)} (measured)"
            parts.append(text)
        queue = get(size, "queue", "latency_s", "p50")
        if queue is not None:
            parts.append(f"Queue → polling worker {_fmt(queue)}")
        figures = "; ".join(parts[1:]) if len(parts) > 1 else "nothing measured"
        lines.append(f"- {parts[0]} {figures}.")
    return lines


def _short(error: str, limit: int = 400) -> str:
    """An error in one line: its first line and the engine's last words."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return "?"
    text = lines[0]
    tail = [line for line in lines[1:] if "error" in line.lower()][-2:]
    if tail:
        text += " … " + " … ".join(tail)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _intro(results: Mapping[str, Any], note: str | None) -> list[str]:
    """The header, the machine, the note, the headline and the goals."""
    note = note or results.get("note")
    machine = results.get("machine") or {}
    versions = results.get("versions") or {}
    out = [
        "# twc benchmarks",
        "",
        f"`make bench` — {results.get('mode')} mode, started {results.get('started_at')}, "
        f"took {_fmt(results.get('duration_s'))}; trials in random order (seed "
        f"{results.get('seed')}).",
        "",
        f"- Machine: {machine.get('cores')} cores, {machine.get('memory_gib')} GiB, "
        f"{machine.get('cpu_model')}; load average {machine.get('load_average')} at start, "
        f"{machine.get('load_average_end')} at end.",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
        "",
    ]
    if note:
        out += [f"> {note}", ""]
    figures = results.get("figures")
    if figures is not None and set(figures) != {"noop", "change", "backlog", "queue"}:
        out += [
            f"Measured in this run: {', '.join(figures)} (`--figures`), and their "
            "baselines; the other figures are not measured.",
            "",
        ]
    out += [
        "Every figure is wall time on the embedded environment (etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, KWOK's simulated nodes, a Temporal dev "
        "server) with the real Pulumi engine and providers, and `twc run` as its own "
        "process. Baselines are what a user would otherwise run (plain `pulumi up` of "
        "the same fleet as one stack); a baseline not run is marked "
        "*computed* and says from what. No test asserts on time.",
        "",
        "## Headline",
        "",
        *_headline(results),
        "",
        "## Goals",
        "",
        "| goal | limit | measured | |",
        "|---|---:|---:|---|",
    ]
    for goal in results.get("goals", []):
        verdict = {True: "met", False: "**missed**", None: "not measured"}[goal["met"]]
        out.append(f"| {goal['words']} | {_limit(goal)} | {_goal_value(goal)} | {verdict} |")
    return out


TESTBED = [
    "- Nodes are KWOK's: a scheduled pod turns Running and Ready at once (no image pull, "
    "no container start); a real temporalio worker process per Running pod is started by "
    "the harness from the pod's own env (the kubelet's part).",
    "- One etcd member with `--unsafe-no-fsync`; kube-apiserver with API priority and "
    "fairness off; kube-controller-manager with only the controllers twc's objects need "
    "(deployment, replicaset, statefulset, garbagecollector, namespace, serviceaccount) "
    "at 100 requests/s (burst 200).",
    "- Temporal is the dev server (SQLite, one partition per task queue), with drainage "
    "checks every 2 s (5 s grace) and pollers listed for 15 s.",
    "- Every process runs on the same 2-core machine and talks over loopback: no network "
    "latency, and the cluster's, Temporal's and twc's CPU compete.",
]
"""The test bed's settings that differ from a real cluster's (listed beside the figures)."""


def _dropped(sizes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per size, the trials dropped or failed (the figures are of the others)."""
    rows = []
    for size in sizes:
        noop = get(size, "noop", "dropped")
        queue = get(size, "queue", "errors")
        again, spans = get(size, "noop", "iterated_again"), get(size, "noop", "spans_left_out")
        parts = [
            f"no-op iteration {noop if noop is not None else 'not measured'}"
            + (
                f" ({again} shards' and {spans} spans left out: woken iteration out of the history)"
                if again is not None
                else ""
            ),
            f"Queue → polling worker {len(queue) if queue is not None else 'not measured'}",
        ]
        rows.append(f"- N={size['n']}: " + ", ".join(parts))
    return (
        [
            "",
            "Trials dropped (a figure is of the others; any other failed trial fails "
            "its figure, listed under errors):",
            "",
            *rows,
        ]
        if rows
        else []
    )


COMPARED = (
    ("one-worker change, p50", ("change", "latency_s", "p50"), "s"),
    ("backlog → replicas after the sample, p50", ("backlog", "sample_to_replicas_s", "p50"), "s"),
    ("no-op iteration (one shard), p50", ("noop", "per_shard_s", "p50"), "s"),
    ("no-op iteration (one shard), its CPU time, p50", ("noop", "per_shard_cpu_s", "p50"), "s"),
    ("no-op iteration (all shards), p50", ("noop", "all_shards_s", "p50"), "s"),
    ("Queue → polling worker, p50", ("queue", "latency_s", "p50"), "s"),
    ("daemon peak RSS", ("memory", "daemon_peak_rss_mb"), "MiB"),
    ("largest engine process", ("change", "engine_peak_process_mb"), "MiB"),
)
"""The figures set beside an earlier run's (lower is better for each)."""

NOOP_TIMED = "inside the running daemon, shards in parallel, once it settled"
NOOP_TIMED_BEFORE = "on a second wiring of the daemon, shards back to back"
"""How a run timed its no-op figures (runs before ``noop_timed`` was recorded: the latter)."""


def comparable(earlier: Mapping[str, Any]) -> dict[str, Any]:
    """What of an earlier run's results the comparison needs: when, which twc, its figures."""
    return {
        "started_at": earlier.get("started_at"),
        "twc": (earlier.get("versions") or {}).get("twc"),
        "noop_timed": earlier.get("noop_timed", NOOP_TIMED_BEFORE),
        "sizes": {
            str(size["n"]): {words: get(size, *path) for words, path, _ in COMPARED}
            for size in earlier.get("sizes", [])
        },
    }


def _against_previous(results: Mapping[str, Any]) -> list[str]:
    """Each figure beside the earlier run's, with the ratio (over 1.2x is marked)."""
    previous = results.get("previous")
    if not previous:
        return []
    timed = results.get("noop_timed", NOOP_TIMED_BEFORE)
    out = [
        "",
        f"## Against the previous run (started {previous.get('started_at')}, "
        f"twc {previous.get('twc')})",
        "",
    ]
    if previous.get("noop_timed") != timed:
        out += [
            f"The no-op figures were timed {previous.get('noop_timed')} then; {timed} now. "
            "One shard's wall time was then its iteration alone (about its CPU time); now it "
            "includes the waits for the cores and the GIL while every other shard's loop iterates "
            "too. Its CPU time is the figure alike in both.",
            "",
        ]
    out += ["| N | figure | previous | this run | ratio |", "|---:|---|---:|---:|---:|"]
    for size in results.get("sizes", []):
        before = (previous.get("sizes") or {}).get(str(size["n"])) or {}
        for words, path, unit in COMPARED:
            old, new = before.get(words), get(size, *path)
            ratio = "—" if not old or new is None else f"{new / old:.2f}x"
            if ratio != "—" and new / old > 1.2:
                ratio = f"**{ratio}**"
            out.append(
                f"| {size['n']} | {words} | {_fmt(old, unit)} | {_fmt(new, unit)} | {ratio} |"
            )
    return out


def _per_size(results: Mapping[str, Any]) -> list[str]:
    """The table of every fleet size and what each figure is."""
    out: list[str] = []
    out += ["", "## Per fleet size", ""]
    out += [
        "| N | shards | one-worker change | backlog → replicas (after the burst) | "
        "after the sample | ups | no-op, one shard | its CPU time | no-op, all shards | "
        "Queue → polling worker | state bytes per change | daemon peak RSS | "
        "largest engine process |",
        "|---:|---:|---|---|---|---:|---|---|---|---|---|---:|---:|",
    ]
    for size in results.get("sizes", []):
        out.append(
            "| "
            + " | ".join(
                [
                    str(size["n"]),
                    str(size.get("shards") if size.get("shards") is not None else "—"),
                    _summary(get(size, "change", "latency_s")),
                    _summary(get(size, "backlog", "burst_to_replicas_s")),
                    _summary(get(size, "backlog", "sample_to_replicas_s")),
                    _fmt(get(size, "backlog", "up_runs", "max"), ""),
                    _summary(get(size, "noop", "per_shard_s")),
                    _summary(get(size, "noop", "per_shard_cpu_s")),
                    _summary(get(size, "noop", "all_shards_s")),
                    _summary(get(size, "queue", "latency_s")),
                    _summary(get(size, "change", "state_bytes_per_change"), "B"),
                    _fmt(get(size, "memory", "daemon_peak_rss_mb"), "MiB"),
                    _fmt(get(size, "change", "engine_peak_process_mb"), "MiB"),
                ]
            )
            + " |"
        )
    out += _queue_steps(results.get("sizes", []))
    out += _queue_profile(results.get("sizes", []))
    out += _dropped(results.get("sizes", []))
    out += ["", "Test-bed settings that differ from a real cluster's:", "", *TESTBED]
    out += ["", "What each figure is:", ""]
    out += [
        "- *one-worker change*: the fleet file gives one worker (at random, so a random "
        "shard) a new image, with `twc run` running; until that Deployment's new pod "
        "template is Available (its rollout finished).",
        "- *backlog → replicas*: a burst of workflows on an autoscaled worker's task queue "
        "(nothing polls it); until the Deployment's replicas change. *After the sample* "
        "runs from the daemon's sample that showed the burst (the time it publishes with "
        "`twc_task_queue_backlog`) to the arrival of the Deployment's watch event with the "
        "new replicas; the burst waits for Temporal's statistics and for the "
        "daemon's next sample (`sampling.interval`). *Ups* is how many `up`s started "
        "meanwhile (the largest of the trials); refreshes, which run on their own "
        "schedule in whichever shard is due, are counted apart in `refresh_runs`.",
        "- *no-op iteration*: the running `twc run`'s own iterations with nothing to do, "
        "timed inside it (each loop's `/status` `recentIterations`): each trial sends `twc run` "
        "SIGHUP, which wakes every shard's loop (an unchanged fleet file wakes none). "
        "Backlog samples (`sampling.interval`) and poller counts (`pollers_interval`) keep "
        "their own schedules, so most iterations reuse them; the p95 and max include those "
        "that did not. *Its CPU time* is the iterating thread's own (`time.thread_time`): the work "
        "the iteration did, without its waits for a core, the GIL or an answer. *All "
        "shards* is a trial's span from the first shard's start to the last one's end "
        "(the shards' loops run in parallel threads). A trial in which a loop did not "
        "iterate within a minute, or failed, is dropped and counted. Each loop's woken "
        "iteration is its first after the SIGHUP, from `/status`'s `recentIterations` (a "
        "loop may iterate again before the read: a sample comes due, an answer wakes it).",
        "- *Queue → polling worker*: labelled Queue objects created at random (exponential "
        "gaps) while one-worker changes keep the daemon busy and refreshes run; until a "
        "real temporalio worker, started from the new Deployment's own env when it "
        "appears (the kubelet's part), polls the task queue.",
        "- *state bytes per change*: bytes written to the changed shard's state, backup "
        "and history files during one change (the file backend; a rewrite within 10 ms "
        "of another counts once, so a lower bound).",
        "- *peak RSS*: the daemon process's own `VmHWM`; the engine's (CLI, language host, "
        "providers) sampled every 100 ms during the changes; a child of the daemon not yet "
        "exec'd (the daemon's own command line, its pages) is not counted.",
        "",
    ]
    return out


def _baselines(results: Mapping[str, Any]) -> list[str]:
    """The baselines of each size."""
    out: list[str] = []
    out += ["## Baselines (what a user would otherwise run)", ""]
    for size in results.get("sizes", []):
        base = get(size, "baselines") or {}
        if not base:
            continue
        rows = []
        if get(base, "preview_s"):
            rows.append(f"`pulumi preview` of one shard (measured): {_summary(base['preview_s'])}")
        flat = get(base, "change_pulumi_up")
        if flat:
            if flat.get("computed"):
                rows.append(
                    f"one-worker change by plain `pulumi up` of one stack (computed: "
                    f"{flat['computed']}): {_fmt(get(flat, 'latency_s', 'p50'))}"
                )
            else:
                rows.append(
                    "one-worker change by plain `pulumi up` of one stack (measured): "
                    + _summary(flat.get("latency_s"))
                )
        if get(base, "backlog_via_engine_s") is not None:
            rows.append(
                "backlog → replicas through a targeted up (computed: this size's one-worker "
                f"change, the engine run a replica change took): "
                f"{_fmt(base['backlog_via_engine_s'])}"
            )
        out.append(f"- N={size['n']}: " + "; ".join(rows) + ".")
    return out


def _state_and_refresh(results: Mapping[str, Any]) -> list[str]:
    """The state settings and a change during a refresh, when measured."""
    out: list[str] = []
    state = results.get("state")
    if state:
        out += ["", "## State settings", ""]
        out += [
            f"One-worker `up`s of a {state.get('workers')}-worker stack (a full shard), "
            "every variant interleaved in random order.",
            "",
            "| backend | setting | up | bytes written |",
            "|---|---|---|---|",
        ]
        for backend, rows in (state.get("results") or {}).items():
            for name, row in rows.items():
                out.append(
                    f"| {backend} | {name} | {_summary(row.get('up_s'))} | "
                    f"{_summary(row.get('bytes'), 'B')} |"
                )
        choice = state.get("choice") or {}
        if choice:
            out += ["", f"Chosen: **{choice.get('choice')}** — {choice.get('reason')}."]
    yields = results.get("refresh_yields")
    if yields:
        out += ["", "## A change during a refresh", ""]
        out += [
            f"One-worker changes of a {yields.get('workers')}-worker stack (a full shard), "
            "until the new Deployment is Available; the daemon refreshes "
            f"{_fmt(yields.get('refresh_interval_s'))} after its last refresh ended "
            f"(each refresh seen from start to end: {_summary(yields.get('refresh_s'))}).",
            "",
            "| change made | latency |",
            "|---|---|",
        ]
        kinds = yields.get("kinds") or {}
        for kind, summary in (yields.get("latency_s") or {}).items():
            out.append(f"| {kind}: {kinds.get(kind, '')} | {_summary(summary)} |")
        given = yields.get("refreshes_given_way")
        if given is not None:
            out += ["", f"Refreshes that stopped for a change: {given}."]
    return out + _wake(results.get("wake_from_zero"))


def _wake(wake: Mapping[str, Any] | None) -> list[str]:
    if not wake:
        return []
    out = ["", "## First task from zero", ""]
    out += [
        "One EchoWorkflow, from starting it to its result, on a worker asleep at zero "
        "(`minReplicas: 0`) and on the same worker kept at one replica; the daemon samples "
        f"backlogs every {_fmt(wake.get('sampling_interval_s'))} (its default). Test-bed "
        f"settings: `scaleDownStabilizationSeconds: {wake.get('cooldown_s')}` (default "
        "300) so each trial finds the worker at zero again; a pod's worker process is "
        "started by the embedded kubelet, which lists pods every second.",
        "",
        "| worker | first task's result |",
        "|---|---|",
    ]
    kinds = wake.get("kinds") or {}
    for kind, summary in (wake.get("latency_s") or {}).items():
        out.append(f"| {kind}: {kinds.get(kind, '')} | {_summary(summary)} |")
    out += ["", "Asleep, seconds from the start until each step:", ""]
    out += ["| step | |", "|---|---|"]
    for step, summary in (wake.get("asleep_steps_s") or {}).items():
        out.append(f"| {step} | {_summary(summary)} |")
    return out


def render_markdown(results: Mapping[str, Any], note: str | None = None) -> str:
    """The results as Markdown; every sentence from ``results`` alone (the run's own
    ``note`` included, unless ``note`` replaces it)."""
    out = _intro(results, note)
    out += _against_previous(results)
    out += _per_size(results)
    out += _baselines(results)
    out += _state_and_refresh(results)
    errors = results.get("errors") or []
    if errors:
        out += ["", "## Stages that failed", ""]
        out += [f"- {e['stage']}: {_short(e['error'])}" for e in errors]
    out += [
        "",
        "## Running",
        "",
        "`make bench` (full: N = 100, 1000, 5000, at most 250 workers per shard) or "
        "`make bench BENCH_ARGS=--quick` (N = 20, 60 at 10 per shard; a check of the "
        "harness, not figures); `--state-only --out DIR` measures the state settings "
        "alone, `--refresh-only --out DIR` a change during a refresh, `--wake-only --out "
        "DIR` the first task from zero, `--figures "
        "queue` (say) some figures and their baselines alone. The harness "
        "starts its own embedded environment in a temporary directory and stops it at "
        "the end.",
        "",
        "## results.json",
        "",
        SCHEMA_DOC,
    ]
    return "\n".join(out) + "\n"


def write_results(results: Mapping[str, Any], out: Path, note: str | None) -> None:
    """Write ``results.json`` and ``results.md`` into ``out``.

    The JSON keeps the note and the run's own order of keys (the processes' rows, the
    versions), so ``--render`` makes the same ``results.md`` from it alone.
    """
    out.mkdir(parents=True, exist_ok=True)
    recorded = {**results, "note": note} if note else results
    (out / "results.json").write_text(json.dumps(recorded, indent=2) + "\n")
    (out / "results.md").write_text(render_markdown(recorded))
