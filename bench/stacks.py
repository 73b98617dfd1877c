"""N-worker stacks of the real program on the embedded environment (set-up, not figures).

A sharded stack is applied the way ``twc up`` applies it (the assignment recorded in its
ConfigMap, each shard's inputs sliced), but with the engine running wide and writing
the state once at the end: the first ``up`` of thousands of workers is set-up, not a
figure, and with the file backend a checkpoint per step would make it quadratic.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench import fleets

log = logging.getLogger(__name__)

PROJECT = "twc"


def _dump(value: Any) -> str:
    """``yaml.safe_dump`` (``sort_keys=False``), through libyaml when it is there (the
    same text, four times faster)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return str(yaml.dump(value, Dumper=dumper, sort_keys=False))


@dataclass
class BenchStack:
    """One generated fleet and its stack (or shard stacks)."""

    n: int
    name: str
    fleet_file: Path
    host_port: str
    namespaces: tuple[str, ...]
    per_shard: int | None
    autoscale: bool = True
    cluster_objects: bool = True
    revisions: dict[int, int] = field(default_factory=dict)
    initial_up_s: dict[str, float] = field(default_factory=dict)
    _entries: dict[int, tuple[dict[str, Any], str]] = field(default_factory=dict, repr=False)

    def document(self) -> dict[str, Any]:
        return fleets.generate_fleet(
            self.n,
            host_port=self.host_port,
            namespaces=self.namespaces,
            revisions=self.revisions,
            max_workers_per_shard=self.per_shard,
            autoscale=self.autoscale,
            cluster_objects=self.cluster_objects,
        )

    def write(self, changed: int | None = None) -> None:
        """Write the fleet file; ``changed`` gets a new image (the others keep theirs)."""
        if changed is not None:
            self.revisions[changed] = max(self.revisions.values(), default=0) + 1
        text = self.render()
        tmp = self.fleet_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.fleet_file)  # the daemon never reads half a file

    def render(self) -> str:
        """The fleet file's text: ``yaml.safe_dump`` of :meth:`document`, byte for byte,
        with each worker's entry rendered again only when it changed.

        The busy load rewrites the fleet file every 2 s; dumped whole by PyYAML that
        cost this harness 0.44 s of CPU at N=5000 (0.08 s at N=1000), on the cores the
        figures measure the daemon on. A fleet edit in a cluster comes from git, not
        from a process on the daemon's cores, so the harness's own cost should not grow
        with N.
        """
        out: list[str] = []
        for key, value in self.document().items():
            if key != "workers" or not value:
                out.append(_dump({key: value}))
                continue
            out.append("workers:\n")
            for i, worker in enumerate(value):
                cached = self._entries.get(i)
                if cached is None or cached[0] != worker:
                    cached = (worker, _dump([worker]))
                    self._entries[i] = cached
                out.append(cached[1])
        return "".join(out)

    @property
    def sharded(self) -> bool:
        return self.per_shard is not None

    def shards(self) -> Any:
        """The stack as ``twc up`` sees it (assignment read, not extended)."""
        from twc.cli.shards import sharded_stack

        return sharded_stack(self.name, str(self.fleet_file), record=False, err=io.StringIO())

    def refs(self) -> list[Any]:
        """Every stack to apply: the shards', or the one stack."""
        if self.sharded:
            sharded = self.shards()
            return [sharded.ref(i) for i in range(sharded.shard_map.shards)]
        from twc.cli.common import stack_ref

        return [stack_ref(self.name, str(self.fleet_file))]

    def shard_of(self, index: int) -> int:
        """The shard of the ``index``-th worker (0 unsharded)."""
        if not self.sharded:
            return 0
        found = self.shards().shard_map.shard_of(fleets.worker_namespace(index, self.namespaces))
        return int(found if found is not None else 0)

    def stack_of(self, index: int) -> str:
        """The Pulumi stack holding the ``index``-th worker."""
        from twc.shards import shard_stack

        return shard_stack(self.name, self.shard_of(index)) if self.sharded else self.name


def setup_stack(
    stack: BenchStack, *, kube: Any, parallel: int, progress: Any = log.info
) -> BenchStack:
    """Create the namespaces, record the assignment, and ``up`` every shard once."""
    from twc.cli import common
    from twc.cli.shards import sharded_stack
    from twc.desired import INPUTS_ENV
    from twc.engine import engine

    for ns in stack.namespaces:
        kube.ensure_namespace(ns)
    stack.write()
    env = {"PULUMI_SKIP_CHECKPOINTS": "true"}
    with tempfile.TemporaryDirectory(prefix="twc-bench-inputs-") as tmp:
        if stack.sharded:
            sharded = sharded_stack(
                stack.name, str(stack.fleet_file), record=True, err=io.StringIO()
            )
            runs = []
            for index in range(sharded.shard_map.shards):
                ref = sharded.ref(index)
                namespaces = sharded.shard_map.namespaces_of(index)
                inputs = common.observe(ref, sharded.file, None, namespaces=namespaces)
                assert inputs is not None, f"{ref.name}: the cluster could not be read"
                path = inputs.to_file(Path(tmp) / f"{ref.name}.json")
                runs.append(
                    dataclasses.replace(ref, env={**(ref.env or {}), **env, INPUTS_ENV: str(path)})
                )
        else:
            ref = common.stack_ref(stack.name, str(stack.fleet_file))
            runs = [dataclasses.replace(ref, env={**(ref.env or {}), **env})]
        for run in runs:
            start = time.perf_counter()
            selected = engine.select_stack(run)
            result = selected.up(parallel=parallel, color="never")
            if result.summary.result != "succeeded":
                raise RuntimeError(f"initial up of {run.name}: {result.summary.result}")
            stack.initial_up_s[run.name] = time.perf_counter() - start
            progress(f"initial up of {run.name}: {stack.initial_up_s[run.name]:.1f} s")
    return stack


def state_file(backend_dir: Path, stack: str) -> Path | None:
    """The ``file://`` backend's state file of ``stack`` (plain or gzip)."""
    base = backend_dir / ".pulumi" / "stacks" / PROJECT
    for candidate in (base / f"{stack}.json", base / f"{stack}.json.gz"):
        if candidate.exists():
            return candidate
    return None
