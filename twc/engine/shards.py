"""The engine side of shards: each shard's stack, and moving a stack's state into shards
with ``pulumi state move`` (no cluster object changes, so nothing rolls)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pulumi import automation as auto

from twc.engine import engine
from twc.engine.automation import QUEUE_TYPE, WORKER_TYPE
from twc.engine.engine import SHARD_CONFIG
from twc.shards import ShardMap, shard_stack

logger = logging.getLogger(__name__)


def shard_ref(base: engine.StackRef, index: int, namespaces: Sequence[str]) -> engine.StackRef:
    """Shard ``index`` of ``base``: its stack name, and its namespaces in the config."""
    config = {**(base.config or {}), SHARD_CONFIG: json.dumps(sorted(namespaces))}
    return dataclasses.replace(base, name=shard_stack(base.name, index), config=config)


def stack_resources(ref: engine.StackRef) -> list[dict[str, Any]] | None:
    """The resources in ``ref``'s state; ``None`` when the stack does not exist."""
    workspace = auto.LocalWorkspace(
        work_dir=str(ref.work_dir),
        env_vars=engine.engine_env(ref.env),
        pulumi_command=engine.pulumi_command(),
    )
    if ref.name not in {s.name for s in workspace.list_stacks()}:
        return None
    state = engine.select_stack(ref).export_stack().deployment or {}
    return list(state.get("resources") or [])


def moves_for(resources: Sequence[Mapping[str, Any]], shard_map: ShardMap) -> dict[int, list[str]]:
    """Per shard, the top-level components of its namespaces to move there.

    Raises:
        ValueError: A component's namespace has no shard (assign it first).
    """
    moves: dict[int, list[str]] = {}
    for res in resources:
        parent = str(res.get("parent") or "")
        if res.get("type") not in (WORKER_TYPE, QUEUE_TYPE):
            continue
        if parent and "pulumi:pulumi:Stack" not in parent:
            continue  # under a queue component: moves with it
        name = str(res["urn"]).rsplit("::", 1)[-1]
        namespace = name.split("/", 1)[0]
        index = shard_map.shard_of(namespace)
        if index is None:
            raise ValueError(f"{name}: namespace {namespace!r} has no shard")
        moves.setdefault(index, []).append(str(res["urn"]))
    return moves


def _cli(ref: engine.StackRef, args: Sequence[str]) -> str:
    proc = subprocess.run(  # noqa: S603 - the project's CLI, arguments built here
        [engine.real_pulumi() or "pulumi", *args],
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

    Raises:
        RuntimeError: A ``pulumi state move`` failed (running it again moves the rest).
    """
    moved: dict[str, int] = {}
    for index, urns in sorted(moves_for(stack_resources(base) or [], shard_map).items()):
        ref = shard_ref(base, index, shard_map.namespaces_of(index))
        engine.select_stack(ref)  # create the shard stack with its config
        progress(f"moving {len(urns)} component(s) to {ref.name}")
        _cli(ref, ["state", "move", "--source", base.name, "--dest", ref.name, "--yes", *urns])
        moved[ref.name] = len(urns)
    return moved


def forget_stack(base: engine.StackRef) -> None:
    """Remove the base stack's record, leaving every object it still names in place."""
    _cli(base, ["stack", "rm", "--force", "--yes", "--stack", base.name])
