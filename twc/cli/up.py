"""``twc up``: one iteration of the pipeline with the engine inline, under the stack's Lease;
``twc approve``: confirm the deletions it held.

Deleting more than the fleet's ``deletionGuard.maxShare`` of the running workers needs an
approval on the record (``twc approve``), a yes at the prompt, or ``--yes``; otherwise
nothing is applied and the held set goes on the record for ``twc approve``. That shows the
held deletions on the stack's record and writes their digest back as the approval; the next
apply deletes exactly those workers and spends it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from pulumi.automation import CommandError

from providers.ownership import CONFIRM_ENV
from twc import program
from twc.cli import common
from twc.cli.rollouts import drive_rollouts
from twc.cli.stack_lease import DEFAULT_WAIT, stack_lease
from twc.cli.status import format_status_table
from twc.desired import DesiredFleet, Hold, refusal
from twc.engine import engine
from twc.engine.errors import engine_failure
from twc.engine.workspace import DEFAULT_KEEP_BACKUPS, backend_url, prune_backups
from twc.kube.client import NoClusterError
from twc.rollout import RolloutSettings


def run_up(
    stack: str,
    fleet_file: str | None = None,
    out: TextIO = sys.stdout,
    *,
    cluster_objects: bool | None = None,
    rollouts: RolloutSettings | None = None,
    rollout_wait: float = 60.0,
    wait_for_daemon: float = DEFAULT_WAIT,
    yes: bool = False,
    ask: Callable[[str], str] | None = None,
) -> int:
    """``twc up``, then up to ``rollout_wait`` seconds driving the versioned workers'
    rollouts (a failure there is only reported); 0 when applied, 1 otherwise."""
    file = common.fleet_file_for(stack, fleet_file)
    if not common.validate_or_report(file):
        return 1
    ref = common.stack_ref(stack, fleet_file)
    if stack == "local":
        common.ensure_local_namespaces(file, ref)
    settings = rollouts or RolloutSettings()
    done = iterate(
        ref, file, out, cluster_objects, settings, wait=wait_for_daemon, yes=yes, ask=ask
    )
    if done is None:
        return 1
    workers, desired = done
    if any(w.rollout is not None for w in desired.workers.values()):
        try:
            with common.stack_kube(ref) as kube:
                drive_rollouts(
                    kube,
                    desired,
                    temporal_address=(ref.config or {}).get("temporalAddress"),
                    settings=settings,
                    wait=rollout_wait,
                    out=out,
                )
        except Exception as exc:  # noqa: BLE001 - the up stands; the rollout goes on next time
            print(f"rollouts not driven: {exc}", file=sys.stderr)
    print(format_status_table(workers), file=out)
    return 0


def iterate(
    ref: engine.StackRef,
    file: str,
    out: TextIO,
    cluster_objects: bool | None,
    settings: RolloutSettings,
    *,
    wait: float,
    yes: bool,
    ask: Callable[[str], str] | None = None,
    namespaces: Sequence[str] | None = None,
) -> tuple[dict[str, Any], DesiredFleet] | None:
    """Observe, then :func:`apply` ``ref`` (a stack, or the shard of ``namespaces``) under
    its Lease: the workers' statuses and desired fleet, or ``None`` after saying why not."""
    try:
        with stack_lease(ref, sys.stderr, wait=wait) as leased:
            if leased is None:
                return None
            inputs = common.observe(leased, file, cluster_objects, None, settings, namespaces)
            with common.desired_inputs(leased, inputs) as run:
                if run is None or (workers := apply(run, file, out, yes=yes, ask=ask)) is None:
                    return None
                return workers, common.planned(run, file)[1]
    except CommandError as exc:
        print(engine_failure(exc).text, file=sys.stderr)
        return None


def apply(
    run: engine.StackRef,
    file: str,
    out: TextIO,
    *,
    yes: bool,
    ask: Callable[[str], str] | None = None,
) -> dict[str, Any] | None:
    """Plan and execute the prepared ``run``: the workers' statuses, or ``None`` after
    saying why the dry run or deletion verdict refused; ``CommandError`` if the engine failed."""
    err = sys.stderr
    if not common.dry_run_or_report(run, file, err):
        return None
    try:
        verdict = common.deletion_verdict(run, file)
    except Exception as exc:  # noqa: BLE001 - a guard that cannot judge holds
        print(f"cannot tell what this up would delete ({exc}); nothing was applied", file=err)
        return None
    hold = verdict.hold
    if hold is not None and not yes and not _confirmed(hold, ask):
        _publish(run, hold)
        print(refusal(hold, run.name), file=err)
        return None
    # --yes also lets through what the program's ownership check holds (other kinds).
    confirmed = run.with_env({CONFIRM_ENV: "1"}) if yes else run
    result = engine.up(confirmed, on_output=lambda line: print(line, file=out, flush=True))
    if verdict.released or hold is not None:
        _publish(run, None)  # the approval is spent: the same set is held again next time
    prune_backups(backend_url(run.env), project="twc", stack=run.name, keep=DEFAULT_KEEP_BACKUPS)
    return dict(result.outputs["workers"].value or {}) if "workers" in result.outputs else {}


def _publish(ref: engine.StackRef, hold: Hold | None) -> None:
    try:
        with common.stack_kube(ref) as kube:
            program.settle_hold(common.stack_record(ref, kube), hold)
    except Exception as exc:  # noqa: BLE001 - the refusal or the up stands; only twc approve lacks it
        print(f"could not update the held deletions on the stack's record: {exc}", file=sys.stderr)


def _confirmed(hold: Hold, ask: Callable[[str], str] | None) -> bool:
    print(
        f"this up deletes {len(hold.workers)} of the {hold.total} running workers "
        f"(more than the {hold.allowed} one up may delete without confirmation): "
        f"{', '.join(sorted(hold.workers))}",
        file=sys.stderr,
    )
    if ask is None and not sys.stdin.isatty():
        return False
    try:
        answer = (ask or input)("delete them? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def run_approve(stack: str, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Approve the held deletions of ``stack``: 0 when approved, else 1."""
    out, err = out or sys.stdout, err or sys.stderr
    ref = common.stack_ref(stack)
    try:
        with common.stack_kube(ref) as kube:
            record = common.stack_record(ref, kube)
            found = record.load()
            if found is None or found.held is None:
                print(f"no deletions are held for stack {stack} ({record})", file=err)
                return 1
            held = found.held
            print(f"{held.reason}:", file=out)
            for worker in held.workers:
                print(f"  {worker}", file=out)
            record.approve(held.digest)
    except NoClusterError as exc:
        print(f"twc approve: {exc}", file=err)
        return 1
    except Exception as exc:  # noqa: BLE001 - any failure ends the command with its reason
        print(f"twc approve: cannot read or write the stack's record: {exc}", file=err)
        return 1
    print(
        f"approved ({held.digest}): the next apply of stack {stack} (the daemon's next "
        f"iteration, twc up or pulumi up) deletes these {len(held.workers)}",
        file=out,
    )
    return 0
