"""``twc local up|down|env|status|smoke``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from twc.local.environment import LocalEnvError, LocalEnvironment, project_root
from twc.local.smoke import run_smoke


def _progress(message: str) -> None:
    print(f"[local] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``twc local`` action; returns the exit code."""
    state = args.state if args.action == "up" else None
    env = LocalEnvironment(args.dir, run_workers=args.run_workers, state=state)
    try:
        if args.action == "up":
            env.up(progress=_progress)  # a crashed component is reported as it restarts
        if args.action == "down":
            _progress(f"stopped {len(env.down(progress=_progress))} process(es)")
        elif args.action in ("up", "env"):
            for key, value in env.env().items():
                print(f"export {key}={shlex.quote(value)}")
        elif args.action == "smoke":
            fleet = project_root() / "stacks" / f"{args.stack}.yaml"
            code = run_smoke(env.temporal_address(), str(fleet), sys.stdout)
            # temporalio's core threads may call into the interpreter while it finalizes
            # (a fatal PyGILState_Release seen in CI); the smoke has nothing left to clean up.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        elif args.action == "status":
            rows = env.status()
            for row in rows:
                state = "running" if row.running else "STOPPED"
                print(f"{row.name:<24} {state:<8} pid {row.pid or '-':<8} {row.endpoint}")
            if not rows:
                _progress(f"no local environment in {env.dir}")
            return 0 if rows and all(r.running for r in rows) else 1
        return 0
    except LocalEnvError as exc:
        _progress(f"error: {exc}")
        return 1
