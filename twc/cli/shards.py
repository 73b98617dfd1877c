"""``twc up``, ``preview`` and ``status`` on a sharded stack, and ``twc shards``.

These verbs read the shard assignment once (extended for new namespaces: ``up`` records
it), then run each shard, or the one ``--shard`` names, as the unsharded verb runs a stack.
``twc shards migrate`` moves an unsharded stack's state into its shards.
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from twc.cli import common
from twc.cli.stack_lease import DEFAULT_WAIT, daemon_holder
from twc.cli.status import format_status_table
from twc.cli.up import iterate
from twc.connections import default_registry
from twc.desired import QUEUE_KIND_KEY, WORKER_KIND_KEY, DesiredInputs, ObjectList
from twc.engine import engine
from twc.engine.shards import forget_stack, move_state, shard_ref, stack_resources
from twc.errors import SpecError, SpecIssue
from twc.kube.observe import observe_inputs
from twc.rollout import RolloutSettings
from twc.shards import ShardMap, assign, namespace_load, shard_stack
from twc.spec import load_fleet_file

if TYPE_CHECKING:
    from twc.preview import PreviewReport


def is_sharded(stack: str, fleet_file: str | None) -> bool:
    """Whether the stack's fleet file asks for shards (an unreadable one does not)."""
    path = common.fleet_path(common.fleet_file_for(stack, fleet_file))
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and bool(data.get("sharding"))


@dataclass
class ShardedStack:
    """A sharded stack as one command sees it."""

    base: engine.StackRef  # the stack as named (no state of its own once sharded)
    file: str
    shard_map: ShardMap
    recorded: bool  # False: new namespaces were assigned for this command only

    def ref(self, index: int) -> engine.StackRef:
        return shard_ref(self.base, index, self.shard_map.namespaces_of(index))

    def select(self, shard: str | None) -> list[int]:
        """The shards ``--shard`` names (index or stack), or all; ``ValueError`` if none."""
        everything = list(range(self.shard_map.shards))
        if shard is None:
            return everything
        for index in everything:
            if shard in (str(index), f"{index:02d}", shard_stack(self.base.name, index)):
                return [index]
        raise ValueError(
            f"no shard {shard!r} in {self.base.name} (it has {self.shard_map.shards}: "
            f"0..{self.shard_map.shards - 1})"
        )


def sharded_stack(
    stack: str,
    fleet_file: str | None,
    *,
    record: bool,
    cluster_objects: bool | None = None,
    err: TextIO | None = None,
) -> ShardedStack:
    """The fleet and the assignment, extended for new namespaces (recorded with
    ``record``); raises for an invalid fleet or an unreadable cluster."""
    from twc.kube.shards import ShardMapStore

    file = common.fleet_file_for(stack, fleet_file)
    path = common.fleet_path(file)
    fleet = load_fleet_file(path)
    if fleet.sharding is None:
        raise SpecError([SpecIssue(file, "sharding", "the fleet is not sharded")])
    base = common.stack_ref(stack, fleet_file)
    document = yaml.safe_load(Path(path).read_text())
    include = fleet.cluster_objects if cluster_objects is None else cluster_objects
    with common.stack_kube(base) as kube:
        inputs = DesiredInputs(fleet=document)
        if include:
            inputs = observe_inputs(kube, default_registry().watched_kinds(), fleet=document)
        cluster = inputs.cluster or {}
        kinds = (QUEUE_KIND_KEY, WORKER_KIND_KEY)
        objects = [(cluster.get(k) or ObjectList()).objects or () for k in kinds]
        load = namespace_load(fleet, *objects)
        store = ShardMapStore(kube.core, namespace=fleet.sharding.assignment_namespace, stack=stack)
        limit = fleet.sharding.max_workers_per_shard
        if record:
            shard_map, recorded = store.extend(load, max_workers_per_shard=limit), True
        else:
            current, _ = store.read()
            shard_map = assign(current or ShardMap(), load, max_workers_per_shard=limit)
            recorded = current is not None and shard_map == current
    if include and (line := common.summary(inputs)):
        print(line, file=err or sys.stderr)
    return ShardedStack(base, file, shard_map, recorded)


def _open(
    stack: str,
    fleet_file: str | None,
    shard: str | None,
    *,
    record: bool,
    cluster_objects: bool | None,
    err: TextIO,
) -> tuple[ShardedStack, list[tuple[engine.StackRef, tuple[str, ...]]]] | None:
    """The sharded stack and the shards named, each with its namespaces; ``None`` after
    saying why not."""
    if not common.validate_or_report(common.fleet_file_for(stack, fleet_file), err):
        return None
    try:
        sharded = sharded_stack(
            stack, fleet_file, record=record, cluster_objects=cluster_objects, err=err
        )
        chosen = sharded.select(shard)
        return sharded, [(sharded.ref(i), sharded.shard_map.namespaces_of(i)) for i in chosen]
    except SpecError as exc:
        for line in exc.lines():
            print(line, file=err)
    except ValueError as exc:
        print(exc, file=err)
    except Exception as exc:  # noqa: BLE001 - any read failure stops the command with its reason
        print(
            f"cannot read the cluster's objects or the shard assignment: {exc}; "
            "nothing was applied",
            file=err,
        )
    return None


def run_up_sharded(
    stack: str,
    fleet_file: str | None = None,
    out: TextIO = sys.stdout,
    *,
    shard: str | None = None,
    cluster_objects: bool | None = None,
    wait_for_daemon: float = DEFAULT_WAIT,
    yes: bool = False,
) -> int:
    """``twc up`` of each shard; one status table; 0 only when every shard applied."""
    err = sys.stderr
    opened = _open(stack, fleet_file, shard, record=True, cluster_objects=cluster_objects, err=err)
    if opened is None:
        return 1
    sharded, runs = opened
    if stack == "local":
        common.ensure_local_namespaces(sharded.file, sharded.base)
    workers: dict[str, Any] = {}
    failed: list[str] = []
    for ref, namespaces in runs:
        print(f"== {ref.name}: {', '.join(namespaces) or '(no namespaces)'}", file=out)
        run = (ref, sharded.file, out, cluster_objects, RolloutSettings())
        done = iterate(*run, wait=wait_for_daemon, yes=yes, namespaces=namespaces)
        if done is None:
            failed.append(ref.name)
            continue
        workers.update(done[0])
    print(format_status_table(workers), file=out)
    if failed:
        print(f"failed: {', '.join(failed)} ({len(failed)} of {len(runs)} shards)", file=err)
    return 1 if failed else 0


def preview_shards(
    stack: str, fleet_file: str | None, shard: str | None, cluster_objects: bool | None, err: TextIO
) -> PreviewReport | None:
    """The shards' previews as one merged report (new namespaces where they would go);
    ``None`` after saying why not."""
    from twc.cli.preview import preview_one
    from twc.preview import merge_reports

    opened = _open(stack, fleet_file, shard, record=False, cluster_objects=cluster_objects, err=err)
    if opened is None:
        return None
    sharded, runs = opened
    if not sharded.recorded:
        assigned = json.dumps(sharded.shard_map.to_json()["namespaces"])
        print(f"new namespaces would be assigned: {assigned}", file=err)
    reports = []
    for ref, namespaces in runs:
        one = preview_one(ref, sharded.file, cluster_objects, err, namespaces)
        if one is None:
            return None
        reports.append(one)
    return merge_reports(stack, reports)


def shard_refs(
    stack: str, fleet_file: str | None, shard: str | None
) -> list[engine.StackRef] | None:
    """The shard stacks ``shard`` names (all by default); ``None`` after saying why not."""
    opened = _open(stack, fleet_file, shard, record=False, cluster_objects=False, err=sys.stderr)
    return [ref for ref, _ in opened[1]] if opened is not None else None


def run_show(stack: str, fleet_file: str | None = None, out: TextIO = sys.stdout) -> int:
    """``twc shards show``: the recorded assignment, and what new namespaces would get."""
    opened = _open(stack, fleet_file, None, record=False, cluster_objects=None, err=sys.stderr)
    if opened is None:
        return 1
    sharded, runs = opened
    for ref, namespaces in runs:
        print(f"{ref.name}  {', '.join(namespaces)}", file=out)
    if not sharded.recorded:
        print("(includes namespaces not recorded yet: the next up records them)", file=out)
    return 0


def run_migrate(stack: str, fleet_file: str | None = None, out: TextIO = sys.stdout) -> int:
    """``twc shards migrate``: move an unsharded stack's state into its shards, ``up``
    each, then forget the old stack; refuses while a daemon may hold the stack's Lease."""
    say = functools.partial(print, file=out, flush=True)
    base = common.stack_ref(stack, fleet_file)
    if stack_resources(base) is None:
        say(f"{stack}: no unsharded stack to move; nothing to do")
        return 0
    try:
        holder = daemon_holder(base)
    except Exception as exc:  # noqa: BLE001 - unknown is not free: refuse with the reason
        print(f"{stack}: cannot tell whether a daemon holds the stack: {exc}", file=sys.stderr)
        return 1
    if holder is not None:
        print(
            f"{stack}: the daemon {holder} holds the stack's Lease: stop it before moving "
            "the stack to shards; nothing was moved",
            file=sys.stderr,
        )
        return 1
    opened = _open(stack, fleet_file, None, record=True, cluster_objects=None, err=sys.stderr)
    if opened is None:
        return 1
    sharded = opened[0]
    moved = move_state(sharded.base, sharded.shard_map, progress=say)
    say(f"moved: {json.dumps(moved, sort_keys=True)}")
    code = run_up_sharded(stack, fleet_file, out)
    if code != 0:
        say(f"{stack}: a shard's up failed; the old stack is kept (run migrate again)")
        return code
    forget_stack(sharded.base)
    say(f"{stack}: now {sharded.shard_map.shards} shard stack(s); the old stack is gone")
    return 0
