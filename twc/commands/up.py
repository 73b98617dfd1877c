"""``twc up``: validate, then apply the stack with the engine's progress, then a status
table."""

from __future__ import annotations

import sys
from typing import TextIO

from twc.commands import common
from twc.commands.status import format_status_table
from twc.stackrun import engine
from twc.stackrun.errors import engine_failure

__all__ = ["run_up"]


def run_up(
    stack: str,
    fleet_file: str | None = None,
    out: TextIO = sys.stdout,
    *,
    cluster_objects: bool | None = None,
) -> int:
    """``twc up``: validate, then ``pulumi up`` with the engine's progress shown.

    Args:
        stack: The stack (environment).
        fleet_file: ``--fleet-file``; default ``stacks/<stack>.yaml``.
        out: Where the engine's progress and the status table go.
        cluster_objects: Include the cluster's Queue, TemporalWorker and connection
            objects as the daemon does; ``None`` follows the fleet's ``clusterObjects``.

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

    try:
        with common.desired_inputs(ref, file, cluster_objects) as run:
            if run is None or not common.dry_run_or_report(run, file):
                return 1
            result = engine.up(run, on_output=lambda line: print(line, file=out, flush=True))
    except CommandError as exc:
        print(engine_failure(exc).text, file=sys.stderr)
        return 1
    workers = result.outputs["workers"].value if "workers" in result.outputs else {}
    print(format_status_table(workers), file=out)
    return 0
