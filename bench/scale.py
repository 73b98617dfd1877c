"""Item 1: the program and the engine at N workers (build, preview, one-worker ``up``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from bench import fleets
from bench.stats import ratio, summarize
from bench.timing import repeat, timed

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Trials:
    """How many times each figure is measured."""

    build: int
    preview: int
    up: int


def namespaces_for(n: int) -> tuple[str, ...]:
    """Namespaces of the N-worker fleet (its own, so fleets of several sizes coexist)."""
    return tuple(f"bench{n}-{c}" for c in "abcd")


def measure_build(fleet_file: Path, trials: int) -> dict[str, Any]:
    """Run the program's ``build()`` under mocks in fresh processes.

    Returns:
        The wall times of the build (``summarize``), peak RSS and resource count.
    """
    runs = []
    for _ in range(trials):
        proc = subprocess.run(
            [sys.executable, "-m", "bench.build_probe", str(fleet_file)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {
        "wall_s": summarize([r["build_s"] for r in runs]),
        "import_s": summarize([r["import_s"] for r in runs]),
        "load_s": summarize([r["load_s"] for r in runs]),
        "maxrss_mb": max(r["maxrss_mb"] for r in runs),
        "maxrss_before_build_mb": max(r["maxrss_before_mb"] for r in runs),
        "resources": runs[0]["resources"],
    }


@dataclass
class FleetStack:
    """One N-worker stack of the real program on the local environment."""

    n: int
    name: str
    fleet_file: Path
    host_port: str
    env: dict[str, str]
    initial_up_s: float | None = None
    namespaces: tuple[str, ...] = field(default=())
    revisions: dict[int, int] = field(default_factory=dict)

    def write(self, changed: int | None = None) -> None:
        """Write the fleet file; ``changed`` gets a new image (the others keep theirs)."""
        if changed is not None:
            self.revisions[changed] = max(self.revisions.values(), default=0) + 1
        doc = fleets.generate_fleet(
            self.n,
            host_port=self.host_port,
            namespaces=self.namespaces,
            revisions=self.revisions,
        )
        self.fleet_file.write_text(yaml.safe_dump(doc, sort_keys=False))

    @property
    def ref(self) -> Any:
        from twc.stackrun import engine

        return engine.StackRef(
            self.name,
            config={"fleetFile": str(self.fleet_file), "temporalAddress": self.host_port},
            env=self.env,
        )

    def worker_urns(self, key: str) -> list[str]:
        """URNs of one worker's component and its children, from the stack's state."""
        from twc.stackrun import engine

        deployment = engine.select_stack(self.ref).export_stack().deployment or {}
        resources = deployment.get("resources") or []
        urns = []
        for res in resources:
            name = res["urn"].split("::")[-1]
            if name == key or name.startswith(f"{key}-"):
                urns.append(res["urn"])
        return urns


def setup_stack(
    n: int, *, workdir: Path, host_port: str, env: dict[str, str], kube: Any, parallel: int
) -> FleetStack:
    """Create the N-worker stack and its first ``up`` (not a measured figure)."""
    from twc.stackrun import engine

    namespaces = namespaces_for(n)
    for ns in namespaces:
        kube.ensure_namespace(ns)
    stack = FleetStack(
        n=n,
        name=f"bench-{n}",
        fleet_file=workdir / f"fleet-{n}.yaml",
        host_port=host_port,
        env=env,
        namespaces=namespaces,
    )
    stack.write()
    # The first up is set-up, not a figure: let the engine run wide, and write the state
    # once at the end rather than after every step (with the file backend each write is
    # the whole state, so a first up of N workers costs O(N^2) in writes alone).
    setup_ref = dataclasses.replace(
        stack.ref, env={**(stack.ref.env or {}), "PULUMI_SKIP_CHECKPOINTS": "true"}
    )
    selected = engine.select_stack(setup_ref)
    stack.initial_up_s, result = timed(lambda: selected.up(parallel=parallel, color="never"))
    if result.summary.result != "succeeded":
        raise RuntimeError(f"initial up of {stack.name}: {result.summary.result}")
    return stack


EventRecord = tuple[float, str, str, str]
"""(seconds since the call began, event kind, resource name, operation)."""

_KINDS = ("prelude_event", "resource_pre_event", "res_outputs_event", "summary_event")


class EventRecorder:
    """Collects the engine events of one call, timed from ``start()``."""

    def __init__(self) -> None:
        self.records: list[EventRecord] = []
        self._t0 = time.monotonic()

    def start(self) -> EventRecorder:
        self.records = []
        self._t0 = time.monotonic()
        return self

    def __call__(self, event: Any) -> None:
        now = time.monotonic() - self._t0
        for kind in _KINDS:
            body = getattr(event, kind, None)
            if body is None:
                continue
            meta = getattr(body, "metadata", None)
            name = meta.urn.split("::")[-1] if meta is not None else ""
            op = getattr(getattr(meta, "op", None), "value", "") if meta is not None else ""
            self.records.append((now, kind, name, str(op)))
            return


def phases(records: list[EventRecord], changed: str, total_s: float) -> dict[str, float | None]:
    """Where an ``up`` of one changed worker spends its time, from its engine events.

    Args:
        records: The call's events (see :class:`EventRecorder`).
        changed: The changed worker's key; its Deployment is ``<key>-deployment``.
        total_s: Wall time of the whole call.

    Returns:
        Seconds from the call's start to: the engine's first event (``prelude``), the
        first resource step, the changed Deployment's step start and end, the last step,
        the summary; and the call's end (``total``).
    """

    def first(kind: str, name: str | None = None) -> float | None:
        for t, k, n, op in records:
            if k == kind and (name is None or (n == name and op not in ("same", "read"))):
                return t
        return None

    steps = [t for t, k, _, _ in records if k in ("resource_pre_event", "res_outputs_event")]
    deployment = f"{changed}-deployment"
    return {
        "prelude": first("prelude_event"),
        "first_step": min(steps) if steps else None,
        "deployment_start": first("resource_pre_event", deployment),
        "deployment_done": first("res_outputs_event", deployment),
        "last_step": max(steps) if steps else None,
        "summary": first("summary_event"),
        "total": total_s,
    }


def measure_engine(stack: FleetStack, trials: Trials) -> dict[str, Any]:
    """Preview with no change, and ``up`` of a one-worker change with and without target."""
    from twc.stackrun import engine

    out: dict[str, Any] = {"initial_up_s": stack.initial_up_s}
    select_s = repeat(lambda: engine.select_stack(stack.ref), max(1, trials.preview))
    out["select_stack_s"] = summarize(select_s)

    def preview() -> None:
        result = engine.preview(stack.ref)
        changed = {k: v for k, v in result.change_summary.items() if k != "same" and v}
        if changed:
            raise RuntimeError(f"preview of an unchanged stack shows changes: {changed}")

    out["preview_nochange_s"] = summarize(repeat(preview, trials.preview))

    full: list[float] = []
    targeted: list[float] = []
    changes: dict[str, Any] = {}
    timeline: dict[str, Any] = {}
    events = EventRecorder()
    for trial in range(trials.up):
        # A different worker each time; each gets a new image, so a new pod template.
        index = (2 * trial) % stack.n
        stack.write(changed=index)
        seconds, result = timed(lambda: engine.up(stack.ref, on_event=events.start()))
        full.append(seconds)
        changes["full"] = dict(result.summary.resource_changes or {})
        key = fleets.worker_key(index, stack.namespaces)
        timeline["full"] = phases(events.records, key, seconds)

        index = (2 * trial + 1) % stack.n
        key = fleets.worker_key(index, stack.namespaces)
        urns = stack.worker_urns(key)
        stack.write(changed=index)
        seconds, result = timed(partial(engine.up, stack.ref, target=urns, on_event=events.start()))
        targeted.append(seconds)
        changes["targeted"] = dict(result.summary.resource_changes or {})
        changes["targets"] = len(urns)
        timeline["targeted"] = phases(events.records, key, seconds)
    out["up_timeline"] = timeline
    deployment = engine.select_stack(stack.ref).export_stack().deployment or {}
    out["state_mb"] = len(json.dumps(deployment)) / 1e6
    out["up_one_change_full_s"] = summarize(full)
    out["up_one_change_targeted_s"] = summarize(targeted)
    out["up_changes"] = changes
    out["targeted_speedup"] = ratio(
        out["up_one_change_full_s"]["p50"], out["up_one_change_targeted_s"]["p50"]
    )
    return out
