"""``twc approve``: confirm the deletions held for a stack.

Shows the held deletions on the stack's record and writes their digest back as the
approval; the next apply deletes exactly those workers and spends it.
"""

from __future__ import annotations

import sys
from typing import TextIO

from twc.cli import common


def run_approve(stack: str, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Approve the held deletions of ``stack``: 0 when approved, else 1."""
    out, err = out or sys.stdout, err or sys.stderr
    from twc.kube.client import NoClusterError

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
        f"iteration, twc up or pulumi up) deletes these {len(held.workers)} workers",
        file=out,
    )
    return 0
