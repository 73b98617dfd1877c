"""The engine side of shards: each shard's stack, and moving an unsharded stack's state
into its shards without touching the cluster.

A shard stack is the base stack's :class:`~twc.stackrun.engine.StackRef` under the
shard's name, with the program config ``twc:shardNamespaces`` (a JSON list) naming the
namespaces it builds. :class:`ShardEngine` keeps that config current for the daemon (a
shard can be given a new namespace while it runs).

Moving an unsharded stack to shards (:func:`move_state`) uses the CLI's
``pulumi state move``: each worker component and queue component, with everything
under it, moves to the shard of its namespace, URNs rewritten to the shard stack; the
Kubernetes provider is copied along. No object in the cluster changes and every object
keeps its server-side-apply field manager, so the shards' next ``up`` finds their
Deployments unchanged: no rollout. What stays behind are the connection components
(each shard builds its own, for its namespaces; the secret copies they apply are
adopted, being equal); :func:`forget_stack` then drops the base stack's record without
deleting anything.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twc.desired import DesiredInputs
from twc.shards import ShardMap, shard_stack
from twc.stackrun import engine
from twc.stackrun.automation import AutomationEngine, UpReport

__all__ = [
    "SHARD_CONFIG",
    "ShardEngine",
    "forget_stack",
    "move_state",
    "moves_for",
    "shard_namespaces",
    "shard_ref",
    "stack_resources",
]

logger = logging.getLogger(__name__)

SHARD_CONFIG = "shardNamespaces"
"""The ``twc:`` config key naming a shard's namespaces (a JSON list)."""
WORKER_TYPE = "twc:temporal:TemporalWorker"
QUEUE_TYPE = "twc:kmsvc:Queue"


def shard_namespaces(config: Mapping[str, str] | None) -> list[str] | None:
    """A shard stack's namespaces from its config; ``None`` for a stack that is no shard."""
    raw = (config or {}).get(SHARD_CONFIG)
    return [str(ns) for ns in json.loads(raw)] if raw else None


def shard_ref(base: engine.StackRef, index: int, namespaces: Sequence[str]) -> engine.StackRef:
    """Shard ``index`` of ``base``: its stack name, and its namespaces in the config."""
    config = {**(base.config or {}), SHARD_CONFIG: json.dumps(sorted(namespaces))}
    return dataclasses.replace(base, name=shard_stack(base.name, index), config=config)


class ShardEngine:
    """A shard's :class:`AutomationEngine` whose config follows the shard's namespaces."""

    def __init__(self, engine: AutomationEngine, namespaces: Callable[[], Sequence[str]]) -> None:
        """Run ``engine`` with the namespaces ``namespaces`` returns at each run."""
        self.engine = engine
        self._namespaces = namespaces

    def _current(self) -> None:
        config = dict(self.engine.ref.config or {})
        config[SHARD_CONFIG] = json.dumps(sorted(self._namespaces()))
        self.engine.ref = dataclasses.replace(self.engine.ref, config=config)

    def recover(self) -> Sequence[str]:
        """See :meth:`AutomationEngine.recover`."""
        self._current()
        return self.engine.recover()

    def up(self, inputs: DesiredInputs, targets: Sequence[str] | None) -> UpReport:
        """See :meth:`AutomationEngine.up`."""
        self._current()
        return self.engine.up(inputs, targets)

    def refresh(self) -> Sequence[str]:
        """See :meth:`AutomationEngine.refresh`."""
        self._current()
        return self.engine.refresh()

    def preempt(self, reason: str) -> bool:
        """See :meth:`AutomationEngine.preempt`."""
        return self.engine.preempt(reason)

    def last_update(self) -> str | None:
        """See :meth:`AutomationEngine.last_update`."""
        return self.engine.last_update()

    def worker_urns(self) -> Mapping[str, Sequence[str]]:
        """See :meth:`AutomationEngine.worker_urns`."""
        return self.engine.worker_urns()


def stack_resources(ref: engine.StackRef) -> list[dict[str, Any]] | None:
    """The resources in ``ref``'s state, or ``None`` when the stack does not exist
    (it is not created by asking)."""
    from pulumi import automation as auto

    workspace = auto.LocalWorkspace(
        work_dir=str(ref.work_dir),
        env_vars=engine.engine_env(ref.env),
        pulumi_command=engine.pulumi_command(),
    )
    if ref.name not in {s.name for s in workspace.list_stacks()}:
        return None
    state = engine.select_stack(ref).export_stack().deployment or {}
    return list(state.get("resources") or [])


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def moves_for(resources: Sequence[Mapping[str, Any]], shard_map: ShardMap) -> dict[int, list[str]]:
    """Per shard, the URNs to move there: every top-level worker and queue component
    (named ``<namespace>/<name>``) of the shard's namespaces; their children go along.

    Raises:
        ValueError: A component's namespace has no shard (assign it first).
    """
    moves: dict[int, list[str]] = {}
    for res in resources:
        if res.get("type") not in (WORKER_TYPE, QUEUE_TYPE):
            continue
        parent = str(res.get("parent") or "")
        if parent and "pulumi:pulumi:Stack" not in parent:
            continue  # under a queue component: moves with it
        name = _name(str(res["urn"]))
        namespace = name.split("/", 1)[0]
        index = shard_map.shard_of(namespace)
        if index is None:
            raise ValueError(f"{name}: namespace {namespace!r} has no shard")
        moves.setdefault(index, []).append(str(res["urn"]))
    return moves


def _cli(ref: engine.StackRef, args: Sequence[str]) -> str:
    binary = str(engine.ROOT / ".twc" / "bin" / "pulumi")
    if not (engine.ROOT / ".twc" / "bin" / "pulumi").exists():
        binary = "pulumi"
    import os

    proc = subprocess.run(  # noqa: S603 - the project's pinned CLI, arguments built here
        [binary, *args],
        cwd=str(ref.work_dir),
        env={**os.environ, **engine.engine_env(ref.env)},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pulumi {' '.join(args[:2])} failed: {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def move_state(
    base: engine.StackRef, shard_map: ShardMap, *, progress: Callable[[str], None] = logger.info
) -> dict[str, int]:
    """Move the base stack's worker and queue components into their shards' stacks.

    Returns:
        Per shard stack, how many top-level components moved there.

    Raises:
        RuntimeError: A ``pulumi state move`` failed (the stacks keep what moved so far;
            running it again moves the rest).
    """
    resources = stack_resources(base) or []
    moved: dict[str, int] = {}
    for index, urns in sorted(moves_for(resources, shard_map).items()):
        ref = shard_ref(base, index, shard_map.namespaces_of(index))
        engine.select_stack(ref)  # create the shard stack with its config
        progress(f"moving {len(urns)} component(s) to {ref.name}")
        _cli(ref, ["state", "move", "--source", base.name, "--dest", ref.name, "--yes", *urns])
        moved[ref.name] = len(urns)
    return moved


def forget_stack(base: engine.StackRef) -> None:
    """Remove the base stack's record, leaving every object it still names in place."""
    _cli(base, ["stack", "rm", "--force", "--yes", "--stack", base.name])
