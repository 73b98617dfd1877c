"""What the engine verbs of the command line do: ``up``, ``preview``, ``refresh``,
``destroy``, ``status``. The CLI parses arguments and calls these.

The fleet file is validated before the engine starts, so a bad file is rejected in
milliseconds with every problem listed, and nothing is applied.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from twc.controller import engine
from twc.errors import SpecError

Printer = Callable[[str], Any]


def fleet_file_for(stack: str, override: str | None = None) -> str:
    """The fleet file of a stack: ``--fleet-file``, else ``stacks/<stack>.yaml``."""
    return override or f"stacks/{stack}.yaml"


def validate_or_report(file: str, err: TextIO = sys.stderr) -> bool:
    """Validate the fleet file; print every issue and return False if invalid."""
    from twc.connections import resolve_fleet_connections
    from twc.spec import load_fleet_file

    path = file if Path(file).is_absolute() else str(engine.ROOT / file)
    try:
        fleet = load_fleet_file(path)
        resolve_fleet_connections(fleet, file=file)
    except SpecError as exc:
        for line in exc.lines():
            print(line, file=err)
        print("nothing was applied", file=err)
        return False
    return True


def stack_ref(stack: str, fleet_file: str | None = None) -> engine.StackRef:
    """The stack with the config this run needs."""
    config = dict(engine.local_stack_config(stack))
    if fleet_file:
        config["fleetFile"] = fleet_file
    return engine.StackRef(name=stack, config=config)


def run_up(stack: str, fleet_file: str | None = None, out: TextIO = sys.stdout) -> int:
    """``twc up``: validate, then ``pulumi up`` with the engine's progress shown."""
    file = fleet_file_for(stack, fleet_file)
    if not validate_or_report(file):
        return 1
    from pulumi.automation import CommandError

    try:
        result = engine.up(stack_ref(stack, fleet_file), on_output=lambda line: print(line, file=out, flush=True))
    except CommandError as exc:
        print(_engine_error(exc), file=sys.stderr)
        return 1
    print(format_status_table(result.outputs.get("workers").value if "workers" in result.outputs else {}), file=out)
    return 0


def format_status_table(workers: dict[str, Any]) -> str:
    """Per worker: phase, replicas ready/desired, task queue, pollers, backlog, reasons."""
    rows = [("WORKER", "PHASE", "READY", "TASK QUEUE", "POLLERS", "BACKLOG", "CONDITIONS")]
    for key in sorted(workers or {}):
        st = workers[key]
        conds = ", ".join(
            f"{c.get('type')}={c.get('status')}" + (f" ({c.get('reason')})" if c.get("reason") else "")
            for c in st.get("conditions", [])
        )
        rows.append(
            (
                key,
                str(st.get("phase", "")),
                f"{st.get('readyReplicas', 0)}/{st.get('replicas', 0)}",
                str(st.get("taskQueue", "")),
                str(st.get("pollers", 0)),
                str(st.get("approximateBacklog", 0)),
                conds,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1]
        for row in rows
    )


def _engine_error(exc: Exception) -> str:
    """The useful part of a failed engine run (the program's own error, if any)."""
    text = str(exc)
    for marker in ("invalid fleet; nothing was changed", "nothing was changed"):
        idx = text.find(marker)
        if idx >= 0:
            start = text.rfind("\n", 0, max(0, text.rfind("error:", 0, idx))) + 1
            return text[start:].strip()
    stderr = getattr(exc, "stderr", "") or ""
    return stderr.strip() or text
