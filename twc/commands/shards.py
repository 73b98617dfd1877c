"""``twc up``, ``preview`` and ``status`` on a sharded stack, and ``twc shards``.

A fleet with ``sharding`` is applied as shard stacks (:mod:`twc.shards`). These verbs
read the cluster's objects once, extend the assignment when a namespace has no shard
yet (``up`` records it; ``preview`` only says where it would go), then run each shard
(all of them, or the one ``--shard`` names) and answer with one report and one exit
code: ``up`` fails if any shard failed, ``preview`` is one merged report, ``status``
one table.

Each shard is its own stack, and ``up`` applies each as ``twc up`` applies a stack:
under the shard's Lease when a daemon manages it (waiting for the daemon's step,
:mod:`twc.commands.stack_lease`), on the cluster's objects read then with the shard's
record (:func:`twc.kube.record.record_for_stack`), after the API server's dry run and
the deletion check of :mod:`twc.commands.common`.

``twc shards show`` prints the assignment; ``twc shards migrate`` moves an unsharded
stack's state into its shards (no object in the cluster changes, see
:mod:`twc.stackrun.shards`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from twc.commands import common
from twc.commands.stack_lease import DEFAULT_WAIT, daemon_holder, stack_lease
from twc.commands.up import judged, spend_approval
from twc.desired import INPUTS_ENV, QUEUE_KIND_KEY, WORKER_KIND_KEY, DesiredInputs
from twc.errors import SpecError, SpecIssue
from twc.shards import ShardMap, assign, namespace_load, shard_stack, slice_inputs
from twc.spec import Fleet
from twc.stackrun import engine
from twc.stackrun.retention import DEFAULT_KEEP_BACKUPS, backend_url, prune_backups
from twc.stackrun.shards import shard_ref

__all__ = [
    "ShardedStack",
    "is_sharded",
    "run_migrate",
    "run_preview_sharded",
    "run_show",
    "run_status_sharded",
    "run_up_sharded",
    "sharded_stack",
]


def is_sharded(stack: str, fleet_file: str | None) -> bool:
    """Whether the stack's fleet file asks for shards (an unreadable file: no, the
    unsharded verbs report it)."""
    import yaml

    path = common.fleet_path(common.fleet_file_for(stack, fleet_file))
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and bool(data.get("sharding"))


@dataclass
class ShardedStack:
    """A sharded stack as one command sees it."""

    base: engine.StackRef
    """The stack as named (its config; no state of its own once sharded)."""
    file: str
    """The fleet file's name."""
    fleet: Fleet
    """The fleet, validated whole."""
    shard_map: ShardMap
    """The assignment (recorded, or as it would be for ``preview``)."""
    recorded: bool
    """Whether ``shard_map`` is the recorded one (``False``: new namespaces were
    assigned for this command only)."""
    inputs: DesiredInputs
    """The desired state's inputs for every shard as read for the assignment."""
    cluster_objects: bool
    """Whether the desired state includes the cluster's objects."""

    def ref(self, index: int) -> engine.StackRef:
        """Shard ``index``'s stack."""
        return shard_ref(self.base, index, self.shard_map.namespaces_of(index))

    def select(self, shard: str | None) -> list[int]:
        """The shards ``--shard`` names (an index or a stack name), or all.

        Raises:
            ValueError: No such shard.
        """
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

    def shard_inputs(self, index: int) -> DesiredInputs:
        """The inputs shard ``index``'s program is handed, read now: the cluster's
        objects (when the fleet includes them) with the last accepted specs of the
        shard's record, sliced to its namespaces.

        Raises:
            Exception: The cluster or the shard's record cannot be read.
        """
        from twc.connections import default_registry
        from twc.kube.observe import observe_inputs
        from twc.kube.record import record_for_stack

        inputs = self.inputs
        if self.cluster_objects:
            ref = self.ref(index)
            with common.stack_kube(ref) as kube:
                record = record_for_stack(kube.core, ref.name, common.stack_config(ref))
                inputs = observe_inputs(kube, default_registry().watched_kinds(), record=record)
        return slice_inputs(inputs, self.fleet, self.shard_map.namespaces_of(index))


def sharded_stack(
    stack: str,
    fleet_file: str | None,
    *,
    record: bool,
    cluster_objects: bool | None = None,
    err: TextIO | None = None,
) -> ShardedStack:
    """Read the fleet and the cluster once, and the assignment (extended for new
    namespaces: recorded with ``record``, else only computed).

    Raises:
        SpecError: The fleet file is invalid.
        Exception: The cluster (objects or assignment) cannot be read.
    """
    import yaml

    from twc.connections import default_registry
    from twc.kube.observe import observe_inputs
    from twc.kube.shardmap import ShardMapStore
    from twc.spec import load_fleet_file

    err = err if err is not None else sys.stderr
    file = common.fleet_file_for(stack, fleet_file)
    path = common.fleet_path(file)
    fleet = load_fleet_file(path)
    if fleet.sharding is None:
        raise SpecError([SpecIssue(file, "sharding", "the fleet is not sharded")])
    base = common.stack_ref(stack, fleet_file)
    document = yaml.safe_load(Path(path).read_text())
    include = fleet.cluster_objects if cluster_objects is None else cluster_objects
    with common.stack_kube(base) as kube:
        if include:
            inputs = observe_inputs(kube, default_registry().watched_kinds(), fleet=document)
        else:
            inputs = DesiredInputs(fleet=document)
        cluster = inputs.cluster or {}
        queues = cluster.get(QUEUE_KIND_KEY)
        workers = cluster.get(WORKER_KIND_KEY)
        load = namespace_load(
            fleet,
            (queues.objects or ()) if queues else (),
            (workers.objects or ()) if workers else (),
        )
        store = ShardMapStore(kube.core, namespace=fleet.sharding.assignment_namespace, stack=stack)
        limit = fleet.sharding.max_workers_per_shard
        if record:
            shard_map, recorded = store.extend(load, max_workers_per_shard=limit), True
        else:
            current, _ = store.read()
            shard_map = assign(current or ShardMap(), load, max_workers_per_shard=limit)
            recorded = current is not None and shard_map == current
    if include and common.cluster_adds_a_source(inputs):
        print(common.summary(inputs), file=err)
    return ShardedStack(base, file, fleet, shard_map, recorded, inputs, include)


def _with_inputs(ref: engine.StackRef, inputs: DesiredInputs, tmp: Path) -> engine.StackRef:
    path = inputs.to_file(tmp / f"inputs-{ref.name}.json")
    return replace(ref, env={**(ref.env or {}), INPUTS_ENV: str(path)})


def _open(
    stack: str,
    fleet_file: str | None,
    *,
    record: bool,
    cluster_objects: bool | None,
    err: TextIO,
) -> ShardedStack | None:
    if not common.validate_or_report(common.fleet_file_for(stack, fleet_file), err):
        return None
    try:
        return sharded_stack(
            stack, fleet_file, record=record, cluster_objects=cluster_objects, err=err
        )
    except SpecError as exc:
        for line in exc.lines():
            print(line, file=err)
        return None
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
    """``twc up`` on a sharded stack: every shard (or ``shard``) in turn, each as
    :func:`_up_shard` applies it; one status table; exit 0 only when every shard
    applied.

    Args:
        wait_for_daemon: Seconds to wait for a daemon's current step, per shard.
        yes: ``--yes``: let a shard delete more than the share of its workers.
    """
    from twc.commands.status import format_status_table

    err = sys.stderr
    sharded = _open(stack, fleet_file, record=True, cluster_objects=cluster_objects, err=err)
    if sharded is None:
        return 1
    try:
        indexes = sharded.select(shard)
    except ValueError as exc:
        print(exc, file=err)
        return 1
    if stack == "local":
        common.ensure_local_namespaces(sharded.file, sharded.base)
    workers: dict[str, Any] = {}
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="twc-inputs-") as tmp:
        for index in indexes:
            ref = sharded.ref(index)
            namespaces = sharded.shard_map.namespaces_of(index)
            print(f"== {ref.name}: {', '.join(namespaces) or '(no namespaces)'}", file=out)
            applied = _up_shard(sharded, index, Path(tmp), out, wait=wait_for_daemon, yes=yes)
            if applied is None:
                failed.append(ref.name)
                continue
            workers.update(applied)
            prune_backups(
                backend_url(ref.env), project="twc", stack=ref.name, keep=DEFAULT_KEEP_BACKUPS
            )
    print(format_status_table(workers), file=out)
    if failed:
        print(f"failed: {', '.join(failed)} ({len(failed)} of {len(indexes)} shards)", file=err)
        return 1
    return 0


def _up_shard(
    sharded: ShardedStack, index: int, tmp: Path, out: TextIO, *, wait: float, yes: bool
) -> dict[str, Any] | None:
    """Shard ``index``'s ``up``, as ``twc up`` runs one on a stack: under the shard's
    Lease (waiting for a daemon's step), on the inputs read then, refused by the API
    server's dry run or by the deletion verdict :func:`twc.commands.up.judged` gives
    (``yes`` confirms deletions beyond the share). Its workers' statuses, or ``None``
    (after saying why) when it applied nothing."""
    from pulumi.automation import CommandError

    from twc.stackrun.errors import engine_failure

    err = sys.stderr
    name = sharded.ref(index).name
    try:
        with stack_lease(sharded.ref(index), err, wait=wait) as leased:
            if leased is None:
                return None
            try:
                run = _with_inputs(leased, sharded.shard_inputs(index), tmp)
            except Exception as exc:  # noqa: BLE001 - any read failure stops the shard with its reason
                print(
                    f"{name}: cannot read the cluster's objects or the shard's record: {exc}; "
                    "nothing was applied",
                    file=err,
                )
                return None
            if not common.dry_run_or_report(run, sharded.file, err):
                return None
            verdict = judged(run, sharded.file, yes, ask=None)
            if verdict is None:
                return None
            result = engine.up(run, on_output=lambda line: print(line, file=out, flush=True))
            if verdict.released or verdict.hold is not None:
                spend_approval(run)
    except CommandError as exc:
        print(engine_failure(exc).text, file=err)
        return None
    return dict(result.outputs["workers"].value or {}) if "workers" in result.outputs else {}


def run_preview_sharded(
    stack: str,
    *,
    fmt: str = "text",
    detailed: bool = False,
    fleet_file: str | None = None,
    shard: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    cluster_objects: bool | None = None,
) -> int:
    """``twc preview`` on a sharded stack: one merged report of every shard (or
    ``shard``); a namespace without a shard yet is previewed where it would go."""
    from twc.commands.preview import FORMATS, preview_report, render
    from twc.preview import EXIT_ERROR, exit_code, merge_reports

    out = out or sys.stdout
    err = err or sys.stderr
    if fmt not in FORMATS:
        print(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}", file=err)
        return EXIT_ERROR
    sharded = _open(stack, fleet_file, record=False, cluster_objects=cluster_objects, err=err)
    if sharded is None:
        return EXIT_ERROR
    try:
        indexes = sharded.select(shard)
    except ValueError as exc:
        print(exc, file=err)
        return EXIT_ERROR
    if not sharded.recorded:
        print(
            "new namespaces would be assigned: "
            + json.dumps(sharded.shard_map.to_json()["namespaces"]),
            file=err,
        )
    with tempfile.TemporaryDirectory(prefix="twc-inputs-") as tmp:
        reports = [
            preview_report(_with_inputs(sharded.ref(i), sharded.shard_inputs(i), Path(tmp)))
            for i in indexes
        ]
    report = merge_reports(stack, reports)
    print(render(report, fmt), end="", file=out, flush=True)
    return exit_code(report, detailed)


def run_status_sharded(
    stack: str,
    output: str = "table",
    out: TextIO = sys.stdout,
    *,
    fleet_file: str | None = None,
    shard: str | None = None,
) -> int:
    """``twc status`` on a sharded stack: every shard's workers in one table."""
    from pulumi.automation import CommandError

    from twc.commands.status import format_status_table, live_status
    from twc.stackrun.errors import engine_failure

    sharded = _open(stack, fleet_file, record=False, cluster_objects=False, err=sys.stderr)
    if sharded is None:
        return 1
    try:
        indexes = sharded.select(shard)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    workers: dict[str, dict[str, Any]] = {}
    shards: dict[str, list[str]] = {}
    for index in indexes:
        ref = sharded.ref(index)
        try:
            found = live_status(ref.name, ref=ref)
        except CommandError as exc:
            print(engine_failure(exc).text, file=sys.stderr)
            return 1
        workers.update(found)
        shards[ref.name] = sorted(found)
    if output == "json":
        body = {"stack": stack, "shards": shards, "workers": workers}
        print(json.dumps(body, indent=2, sort_keys=True), file=out)
    else:
        print(format_status_table(workers, with_age=True), file=out)
    return 0


def run_show(stack: str, fleet_file: str | None = None, out: TextIO = sys.stdout) -> int:
    """``twc shards show``: the recorded assignment, and what new namespaces would get."""
    sharded = _open(stack, fleet_file, record=False, cluster_objects=None, err=sys.stderr)
    if sharded is None:
        return 1
    for index in range(sharded.shard_map.shards):
        namespaces = sharded.shard_map.namespaces_of(index)
        print(f"{shard_stack(stack, index)}  {', '.join(namespaces)}", file=out)
    if not sharded.recorded:
        print("(includes namespaces not recorded yet: the next up records them)", file=out)
    return 0


def run_migrate(
    stack: str,
    fleet_file: str | None = None,
    out: TextIO = sys.stdout,
    *,
    progress: Callable[[str], None] | None = None,
) -> int:
    """``twc shards migrate``: move an unsharded stack into its shards.

    Refuses while a daemon holds the stack's Lease (it would go on applying the stack
    this moves away). Otherwise records the assignment, moves every worker and queue
    component's state to its shard (``pulumi state move``: the cluster is not touched),
    runs each shard's ``up`` as ``twc up`` does (which builds the shard's connections,
    adopting the secret copies that already exist, and finds every Deployment
    unchanged), then forgets the old stack without deleting anything it still names.
    """
    from twc.stackrun.shards import forget_stack, move_state, stack_resources

    say = progress or (lambda line: print(line, file=out, flush=True))
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
    sharded = _open(stack, fleet_file, record=True, cluster_objects=None, err=sys.stderr)
    if sharded is None:
        return 1
    moved = move_state(sharded.base, sharded.shard_map, progress=say)
    say(f"moved: {json.dumps(moved, sort_keys=True)}")
    code = run_up_sharded(stack, fleet_file, out)
    if code != 0:
        say(f"{stack}: a shard's up failed; the old stack is kept (run migrate again)")
        return code
    forget_stack(sharded.base)
    say(f"{stack}: now {sharded.shard_map.shards} shard stack(s); the old stack is gone")
    return 0
