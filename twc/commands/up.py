"""``twc up``: validate, then apply the stack with the engine's progress, then a status
table.

Before the engine runs, ``twc up`` judges its deletions as every entry point does
(:func:`twc.desired.judge_deletions`): deleting more than the fleet's
``deletionGuard.maxShare`` of the stack's running workers at once needs a person — an
approval on the stack's record (``twc approve``, spent by this run), a yes typed at the
prompt, or ``--yes``. Without one, or when what runs cannot be read, nothing is applied
and the held set is put on the record for ``twc approve``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from twc.commands import common
from twc.commands.stack_lease import DEFAULT_WAIT, stack_lease
from twc.commands.status import format_status_table
from twc.desired import INPUTS_ENV, DesiredInputs, GuardVerdict, Hold, refusal
from twc.rollout import RolloutSettings
from twc.stackrun import engine
from twc.stackrun.errors import engine_failure
from twc.stackrun.retention import DEFAULT_KEEP_BACKUPS, backend_url, prune_backups

__all__ = ["judged", "run_up", "spend_approval"]


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
    """``twc up``: validate, then ``pulumi up`` with the engine's progress shown.

    Args:
        stack: The stack (environment).
        fleet_file: ``--fleet-file``; default ``stacks/<stack>.yaml``.
        out: Where the engine's progress and the status table go.
        cluster_objects: Include the cluster's Queue, TemporalWorker and connection
            objects as the daemon does; ``None`` follows the fleet's ``clusterObjects``.
        rollouts: Versioned rollouts' time scale and identity.
        rollout_wait: After the ``up``, drive versioned rollouts this many seconds at
            most (gates, routing) while they can move without another ``up``.
        wait_for_daemon: On a stack a daemon manages, seconds to wait for its current
            step before giving up (:mod:`twc.commands.stack_lease`).
        yes: ``--yes``: delete more than the share without asking.
        ask: Reads the answer to the question (``input`` when standard input is a
            terminal; otherwise there is nobody to ask and the answer is no).

    Returns:
        0 when applied, 1 otherwise.
    """
    file = common.fleet_file_for(stack, fleet_file)
    if not common.validate_or_report(file):
        return 1
    ref = common.stack_ref(stack, fleet_file)
    if stack == "local":
        common.ensure_local_namespaces(file, ref)
    from pulumi.automation import CommandError

    settings = rollouts or RolloutSettings()
    try:
        # One writer per stack: on a daemon's stack, this run takes part in its Lease
        # (waiting for the daemon's step), then reads the inputs the up applies.
        with stack_lease(ref, sys.stderr, wait=wait_for_daemon) as leased:
            if leased is None:
                return 1
            with common.desired_inputs(leased, file, cluster_objects, rollouts=settings) as run:
                if run is None or not common.dry_run_or_report(run, file):
                    return 1
                verdict = judged(run, file, yes, ask)
                if verdict is None:
                    return 1
                inputs = DesiredInputs.from_file((run.env or {})[INPUTS_ENV])
                result = engine.up(run, on_output=lambda line: print(line, file=out, flush=True))
                if verdict.released or verdict.hold is not None:
                    spend_approval(ref)
    except CommandError as exc:
        print(engine_failure(exc).text, file=sys.stderr)
        return 1
    _drive(ref, file, inputs, settings, rollout_wait, out)
    prune_backups(backend_url(ref.env), project="twc", stack=stack, keep=DEFAULT_KEEP_BACKUPS)
    workers = result.outputs["workers"].value if "workers" in result.outputs else {}
    print(format_status_table(workers), file=out)
    return 0


def _drive(
    ref: engine.StackRef,
    file: str,
    inputs: DesiredInputs,
    settings: RolloutSettings,
    wait: float,
    out: TextIO,
) -> None:
    """Drive the versioned workers' rollouts after the ``up`` (see
    :mod:`twc.commands.rollouts`); a failure here is reported, the ``up`` stands."""
    from twc.commands.rollouts import drive_rollouts
    from twc.connections import default_registry
    from twc.desired import desired_fleet
    from twc.kube.versions import read_gate_input
    from twc.spec import load_fleet, load_fleet_file

    try:
        path = common.fleet_path(file)
        fleet = load_fleet(inputs.fleet, file) if inputs.fleet else load_fleet_file(path)
        desired = desired_fleet(fleet, inputs, registry=default_registry(), file=file)
        if not any(w.rollout is not None for w in desired.workers.values()):
            return
        with common.stack_kube(ref) as kube:
            drive_rollouts(
                kube,
                desired.fleet,
                list(desired.workers.values()),
                temporal_address=(ref.config or {}).get("temporalAddress"),
                settings=settings,
                wait=wait,
                out=out,
                read_input=lambda ns, source: read_gate_input(kube, ns, source),
            )
    except Exception as exc:  # noqa: BLE001 - the up stands; the rollout goes on next time
        print(f"rollouts not driven: {exc}", file=sys.stderr)


def judged(
    run: engine.StackRef, file: str, yes: bool, ask: Callable[[str], str] | None
) -> GuardVerdict | None:
    """The deletion verdict of this run, confirmed; ``None`` (after saying why, and
    putting the held set on the stack's record for ``twc approve``) when it may not go."""
    try:
        verdict = common.deletion_verdict(run, file)
    except Exception as exc:  # noqa: BLE001 - a guard that cannot judge holds
        print(
            f"cannot tell what this up would delete ({exc}); nothing was applied",
            file=sys.stderr,
        )
        return None
    hold = verdict.hold
    if hold is None or yes or _confirmed(hold, ask):
        return verdict
    try:
        common.publish_hold(run, hold)
    except Exception as exc:  # noqa: BLE001 - the refusal stands; only twc approve lacks it
        print(f"could not put the held deletions on the stack's record: {exc}", file=sys.stderr)
    print(refusal(hold, run.name), file=sys.stderr)
    return None


def spend_approval(ref: engine.StackRef) -> None:
    """Deletions beyond the share went through: the hold and the approval are spent, so
    the same set coming back is held again."""
    try:
        common.publish_hold(ref, None)
    except Exception as exc:  # noqa: BLE001 - the up stands
        print(f"could not clear the approval on the stack's record: {exc}", file=sys.stderr)


def _confirmed(hold: Hold, ask: Callable[[str], str] | None) -> bool:
    """Ask whether to delete more workers than the share allows."""
    print(
        f"this up deletes {len(hold.workers)} of the {hold.total} running workers "
        f"(more than the {hold.allowed} one up may delete without confirmation): "
        f"{', '.join(sorted(hold.workers))}",
        file=sys.stderr,
    )
    if ask is None:
        if not sys.stdin.isatty():
            return False
        ask = input
    try:
        answer = ask("delete them? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
