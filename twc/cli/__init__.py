"""The ``twc`` command line.

Each verb lives in the layer that owns it; this module only parses arguments and
dispatches, importing heavy layers lazily so ``twc validate`` stays fast.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import yaml

Args = argparse.Namespace


def _cmd_validate(args: Args) -> int:
    from twc.connections import resolve_fleet_connections
    from twc.errors import SpecError
    from twc.spec import load_fleet_file

    try:
        fleet = load_fleet_file(args.file)
        # Connection kinds come from provider plugins: every reference must resolve too.
        resolve_fleet_connections(fleet, file=args.file)
    except SpecError as err:
        print(*err.lines(), sep="\n", file=sys.stderr)
        return 1
    workers = fleet.resolved_workers()
    derived = sum(1 for w in workers if w.derived)
    conns = len(fleet.connections) + len(fleet.cluster_connections) + len(fleet.custom_connections)
    counts = [(conns, "connection"), (len(fleet.queues), "queue"), (len(workers), "worker")]
    text = ", ".join(f"{n} {noun}" if n == 1 else f"{n} {noun}s" for n, noun in counts)
    print(f"{args.file}: valid: {text} ({derived} derived)")
    return 0


def _cmd_schema(args: Args) -> int:
    from twc.spec import fleet_json_schema

    print(json.dumps(fleet_json_schema(), indent=2, sort_keys=True))
    return 0


def _cmd_crds(args: Args) -> int:
    from twc.spec.crds import all_crds

    if not args.install:
        print(yaml.safe_dump_all(all_crds(), sort_keys=False), end="")
        return 0
    from twc.kube.client import NoClusterError, api_client
    from twc.kube.crds import install_crds

    try:
        with api_client() as client:
            for outcome in install_crds(client, all_crds()):
                print(outcome)
    except NoClusterError as exc:
        print(f"no cluster: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - any API error or timeout: say which, exit 1
        print(f"installing the CRDs failed: {exc}", file=sys.stderr)
        return 1
    return 0


def _sharded(args: Args) -> bool:
    from twc.cli.shards import is_sharded

    if is_sharded(args.stack, args.fleet_file):
        return True
    if args.shard is not None:
        print(f"--shard: the fleet of {args.stack} is not sharded", file=sys.stderr)
        raise SystemExit(1)
    return False


def _cmd_up(args: Args) -> int:
    common = {
        "cluster_objects": args.cluster_objects,
        "wait_for_daemon": args.wait_for_daemon,
        "yes": args.yes,
    }
    if _sharded(args):
        from twc.cli.shards import run_up_sharded

        return run_up_sharded(args.stack, args.fleet_file, shard=args.shard, **common)
    from twc.cli.up import run_up
    from twc.rollout import RolloutSettings

    rollouts = RolloutSettings(time_scale=args.rollout_time_scale)
    return run_up(
        args.stack, args.fleet_file, rollouts=rollouts, rollout_wait=args.rollout_wait, **common
    )


def _cmd_preview(args: Args) -> int:
    from twc.cli.preview import run_preview

    return run_preview(
        args.stack,
        sharded=_sharded(args),
        shard=args.shard,
        fmt=args.format,
        detailed=args.detailed_exitcode,
        fleet_file=args.fleet_file,
        cluster_objects=args.cluster_objects,
    )


def _cmd_approve(args: Args) -> int:
    from twc.cli.up import run_approve

    return run_approve(args.stack)


def _cmd_status(args: Args) -> int:
    from twc.cli.status import run_status

    sharded = _sharded(args)
    return run_status(
        args.stack, args.output, sharded=sharded, fleet_file=args.fleet_file, shard=args.shard
    )


def _cmd_shards(args: Args) -> int:
    from twc.cli import shards

    run = shards.run_migrate if args.action == "migrate" else shards.run_show
    return run(args.stack, args.fleet_file)


def _cmd_run(args: Args) -> int:
    from twc.cli.run import RunOptions, run_daemon

    given = {f.name: getattr(args, f.name) for f in fields(RunOptions) if hasattr(args, f.name)}
    return run_daemon(RunOptions(settings_file=args.settings, **given))


def _cmd_local(args: Args) -> int:
    from twc.local import cli as local_cli

    return local_cli.run(args)


def _cluster_objects(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--cluster-objects",
        dest="cluster_objects",
        action="store_true",
        default=None,
        help="include the cluster's Queue, TemporalWorker and connection objects as the "
        "daemon does (default: the fleet's clusterObjects, true unless set false)",
    )
    group.add_argument(
        "--file-only",
        dest="cluster_objects",
        action="store_false",
        help="the fleet file alone, even on a stack the daemon manages",
    )


Argument = tuple[str, dict[str, Any]] | Callable[[argparse.ArgumentParser], None]
STACK: Argument = ("--stack", {"required": True, "help": "stack (environment), e.g. local, prod"})
FLEET: Argument = ("--fleet-file", {"help": "fleet file (default stacks/<stack>.yaml)"})
SHARD: Argument = ("--shard", {"help": "on a sharded stack: only this shard (index or stack)"})
FMT = "text (terminal), markdown (a pull-request comment) or json (docs/preview-json.md)"
RBAC = "the daemon's RBAC: namespaced reads Secrets by name, never lists them"


def _flag(help_: str) -> dict[str, Any]:
    return {"action": "store_true", "help": help_}


def _seconds(default: float, help_: str) -> dict[str, Any]:
    return {"type": float, "default": default, "help": f"{help_} ({default:g})"}


VERBS: dict[str, tuple[Any, ...]] = {  # verb: its function, help, arguments
    "validate": (
        _cmd_validate,
        "check a fleet file; exit 0 valid, 1 invalid (errors on stderr)",
        ("file", {"help": "fleet file, e.g. stacks/prod.yaml"}),
    ),
    "schema": (_cmd_schema, "print the fleet file's JSON Schema"),
    "crds": (
        _cmd_crds,
        "print the TemporalWorker, Connection, ClusterConnection and WorkerDeployment CRDs",
        ("--install", _flag("install them into KUBECONFIG's cluster; others' CRDs stay")),
    ),
    "up": (
        _cmd_up,
        "validate the fleet, then apply it (pulumi up) with progress",
        STACK,
        FLEET,
        ("--yes", _flag("delete more than the deletion guard's share without asking")),
        _cluster_objects,
        ("--rollout-wait", _seconds(60.0, "seconds to drive versioned rollouts after")),
        ("--rollout-time-scale", _seconds(1.0, "multiply every rollout pause and delay")),
        ("--wait-for-daemon", _seconds(600.0, "seconds to wait for the daemon's step")),
        SHARD,
    ),
    "preview": (
        _cmd_preview,
        "what `up` would change, per worker and connection, with the reasons",
        STACK,
        ("--format", {"choices": ["text", "markdown", "json"], "default": "text", "help": FMT}),
        ("--detailed-exitcode", _flag("exit 2 when something changes (0 nothing, 1 error)")),
        FLEET,
        _cluster_objects,
        SHARD,
    ),
    "approve": (_cmd_approve, "confirm the deletions the daemon holds (DeletionsHeld)", STACK),
    "status": (
        _cmd_status,
        "per-worker phase, replicas, pollers, backlog",
        STACK,
        ("--output", {"choices": ["table", "json"], "default": "table"}),
        FLEET,
        SHARD,
    ),
    "shards": (
        _cmd_shards,
        "a sharded stack: show the assignment, or move an unsharded stack",
        ("action", {"choices": ["show", "migrate"]}),
        STACK,
        FLEET,
    ),
    "run": (
        _cmd_run,
        "the daemon: reconcile the stack in a loop (Queue objects, autoscaling)",
        STACK,
        FLEET,
        ("--port", {"type": int, "help": "port of /healthz, /metrics (8080)"}),
        ("--status-port", {"type": int, "help": "port of /status on loopback (8081)"}),
        ("--interval", {"type": float, "help": "seconds between iterations"}),
        ("--settings", {"help": "JSON/YAML file of daemon settings"}),
        ("--leader-elect", _flag("apply only while holding a Lease")),
        ("--lease-namespace", {"help": "namespace of the Lease"}),
        ("--lease-name", {"help": "name of the Lease"}),
        ("--once", _flag("run one iteration and exit")),
        (
            "--rbac-scope",
            {"choices": ["cluster", "namespaced"], "default": "cluster", "help": RBAC},
        ),
    ),
    "local": (
        _cmd_local,
        "the embedded local environment",
        ("action", {"choices": ["up", "down", "env", "status", "smoke"]}),
        ("--dir", {"help": "state directory (default: .twc in the project root)"}),
        ("--run-workers", _flag("up: a real worker process per Running twc pod")),
        ("--state", {"choices": ["file", "postgres"], "help": "up: the state backend"}),
        ("--stack", {"default": "local", "help": "smoke: a workflow per worker (local)"}),
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level argument parser with every verb registered."""
    parser = argparse.ArgumentParser(prog="twc", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)
    for verb, (func, help_, *arguments) in VERBS.items():
        command = sub.add_parser(verb, help=help_)
        for argument in arguments:
            if callable(argument):
                argument(command)
            else:
                command.add_argument(argument[0], **argument[1])
        command.set_defaults(func=func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def console() -> None:
    """The ``twc`` command: ``main``; once the interpreter has joined its threads, the streams
    flushed and the exit with ``main``'s code (exit handlers run last registered first), before
    the teardown that temporalio's threads can abort (SIGABRT, temporalio/sdk-python#300)."""
    atexit.register(os._exit, main())
    atexit.register(sys.stderr.flush)
    atexit.register(sys.stdout.flush)
