"""``twc local up|down|env|status|smoke``."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from twc.local.environment import LocalEnvError, LocalEnvironment


def _progress(message: str) -> None:
    print(f"[local] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Carry out one ``twc local`` action; returns the exit code."""
    env = LocalEnvironment(
        args.dir,
        run_workers=getattr(args, "run_workers", False),
        state=getattr(args, "state", None) if args.action == "up" else None,
    )
    try:
        if args.action == "up":
            crashes = env.up(progress=_progress)
            _print_env(env)
            if crashes:
                _progress(f"{len(crashes)} component(s) had crashed and were restarted")
            return 0
        if args.action == "down":
            stopped = env.down(progress=_progress)
            _progress(f"stopped {len(stopped)} process(es)")
            return 0
        if args.action == "env":
            _print_env(env)
            return 0
        if args.action == "smoke":
            from twc.commands.common import fleet_file_for, fleet_path
            from twc.local.smoke import run_smoke

            file = fleet_path(fleet_file_for(args.stack))
            code = run_smoke(env.temporal_address(), file, sys.stdout)
            # temporalio's core threads may call into the interpreter while it finalizes
            # (a fatal PyGILState_Release seen in CI); the smoke has nothing left to clean up.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        # status
        rows = env.status()
        if not rows:
            _progress(f"no local environment in {env.dir}")
            return 1
        for row in rows:
            state = "running" if row.running else "STOPPED"
            print(f"{row.name:<24} {state:<8} pid {row.pid or '-':<8} {row.endpoint}")
        return 0 if all(r.running for r in rows) else 1
    except LocalEnvError as exc:
        _progress(f"error: {exc}")
        return 1


def _print_env(env: LocalEnvironment) -> None:
    for key, value in env.env().items():
        print(f"export {key}={shlex.quote(value)}")
