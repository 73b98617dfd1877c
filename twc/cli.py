"""The ``twc`` command line.

Each verb lives in the layer that owns it; this module only parses arguments and
dispatches, importing heavy layers lazily so ``twc validate`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _cmd_local(args: argparse.Namespace) -> int:
    from twc.local import cli as local_cli

    return local_cli.run(args)


def _cmd_validate(args: argparse.Namespace) -> int:
    from twc.connections import resolve_fleet_connections
    from twc.errors import SpecError
    from twc.spec import load_fleet_file

    try:
        fleet = load_fleet_file(args.file)
        # Connection kinds come from provider plugins, so a file is only valid once
        # every reference resolves through the registry too.
        resolve_fleet_connections(fleet, file=args.file)
    except SpecError as err:
        for line in err.lines():
            print(line, file=sys.stderr)
        return 1
    workers = fleet.resolved_workers()
    derived = sum(1 for w in workers if w.derived)
    connections = len(fleet.connections) + len(fleet.cluster_connections)
    connections += len(fleet.custom_connections)
    print(
        f"{args.file}: valid: {_count(connections, 'connection')}, "
        f"{_count(len(fleet.queues), 'queue')}, {_count(len(workers), 'worker')} "
        f"({derived} derived)"
    )
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _cmd_schema(args: argparse.Namespace) -> int:
    import json

    from twc.spec import fleet_json_schema

    print(json.dumps(fleet_json_schema(), indent=2, sort_keys=True))
    return 0


def _cmd_crds(args: argparse.Namespace) -> int:
    import yaml

    from twc.spec.crds import all_crds

    if not args.install:
        print(yaml.safe_dump_all(all_crds(), sort_keys=False), end="")
        return 0
    from twc.kube.client import NoClusterError, api_client
    from twc.kube.crds import install_crds

    try:
        client = api_client()
    except NoClusterError as exc:
        print(f"no cluster: {exc}", file=sys.stderr)
        return 1
    try:
        for outcome in install_crds(client, all_crds()):
            print(outcome)
    except Exception as exc:  # noqa: BLE001 - any API error or timeout: say which, exit 1
        print(f"installing the CRDs failed: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    import yaml

    from twc.connections import resolve_fleet_connections
    from twc.errors import SpecError
    from twc.spec import load_fleet
    from twc.spec.convert import convert_manifests

    documents: list[object] = []
    for file in args.files:
        try:
            with open(file, encoding="utf-8") as fh:
                documents.extend(yaml.safe_load_all(fh))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            print(f"{file}: cannot read: {exc}", file=sys.stderr)
            return 1
    result = convert_manifests(documents)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    if not result.converted:
        print("nothing to convert: no WorkerDeployment or Connection", file=sys.stderr)
        return 1
    print(yaml.safe_dump(result.fleet, sort_keys=False), end="")
    try:
        fleet = load_fleet(result.fleet, "<converted>")
        resolve_fleet_connections(fleet, file="<converted>")
    except SpecError as err:
        print("the converted fleet does not validate on its own yet:", file=sys.stderr)
        for line in err.lines():
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


def _cluster_objects_flags(parser: argparse.ArgumentParser) -> None:
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


def _sharded(args: argparse.Namespace) -> bool:
    from twc.commands.shards import is_sharded

    if is_sharded(args.stack, args.fleet_file):
        return True
    if args.shard is not None:
        print(f"--shard: the fleet of {args.stack} is not sharded", file=sys.stderr)
        raise SystemExit(1)
    return False


def _cmd_up(args: argparse.Namespace) -> int:
    if _sharded(args):
        from twc.commands.shards import run_up_sharded

        return run_up_sharded(
            args.stack,
            args.fleet_file,
            shard=args.shard,
            cluster_objects=args.cluster_objects,
            wait_for_daemon=args.wait_for_daemon,
            yes=args.yes,
        )
    from twc.commands.up import run_up
    from twc.rollout import RolloutSettings

    return run_up(
        args.stack,
        args.fleet_file,
        cluster_objects=args.cluster_objects,
        rollouts=RolloutSettings(time_scale=args.rollout_time_scale),
        rollout_wait=args.rollout_wait,
        wait_for_daemon=args.wait_for_daemon,
        yes=args.yes,
    )


def _cmd_preview(args: argparse.Namespace) -> int:
    if _sharded(args):
        from twc.commands.shards import run_preview_sharded

        return run_preview_sharded(
            args.stack,
            fmt=args.format,
            detailed=args.detailed_exitcode,
            fleet_file=args.fleet_file,
            shard=args.shard,
            cluster_objects=args.cluster_objects,
        )
    from twc.commands.preview import run_preview

    return run_preview(
        args.stack,
        fmt=args.format,
        detailed=args.detailed_exitcode,
        fleet_file=args.fleet_file,
        cluster_objects=args.cluster_objects,
    )


def _cmd_approve(args: argparse.Namespace) -> int:
    from twc.commands.approve import run_approve

    return run_approve(args.stack)


def _cmd_status(args: argparse.Namespace) -> int:
    if _sharded(args):
        from twc.commands.shards import run_status_sharded

        return run_status_sharded(
            args.stack, args.output, fleet_file=args.fleet_file, shard=args.shard
        )
    from twc.commands.status import run_status

    return run_status(args.stack, args.output)


def _cmd_shards(args: argparse.Namespace) -> int:
    from twc.commands import shards

    if args.action == "migrate":
        return shards.run_migrate(args.stack, args.fleet_file)
    return shards.run_show(args.stack, args.fleet_file)


def _shard_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shard",
        default=None,
        help="on a sharded stack: only this shard (its index or stack name); default all",
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from twc.commands.run import RunOptions, run_daemon

    return run_daemon(
        RunOptions(
            stack=args.stack,
            fleet_file=args.fleet_file,
            settings_file=args.settings,
            port=args.port,
            status_port=args.status_port,
            interval=args.interval,
            leader_elect=args.leader_elect,
            lease_namespace=args.lease_namespace,
            lease_name=args.lease_name,
            once=args.once,
            rbac_scope=args.rbac_scope,
        )
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level argument parser with every verb registered."""
    parser = argparse.ArgumentParser(prog="twc", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)

    validate = sub.add_parser(
        "validate", help="check a fleet file; exit 0 valid, 1 invalid (errors on stderr)"
    )
    validate.add_argument("file", help="fleet file, e.g. stacks/prod.yaml")
    validate.set_defaults(func=_cmd_validate)

    schema = sub.add_parser("schema", help="print the fleet file's JSON Schema")
    schema.set_defaults(func=_cmd_schema)

    crds = sub.add_parser(
        "crds",
        help="print the TemporalWorker, Connection and ClusterConnection CRDs (YAML stream)",
    )
    crds.add_argument(
        "--install",
        action="store_true",
        help="install them into the cluster of KUBECONFIG instead, leaving CRDs that are "
        "not twc's (the official worker controller's Connection) as they are",
    )
    crds.set_defaults(func=_cmd_crds)

    convert = sub.add_parser(
        "convert",
        help="the official worker controller's WorkerDeployment and Connection manifests "
        "as a fleet file (stdout), with a note per field that has no counterpart (stderr)",
    )
    convert.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="YAML files of manifests (give the Connections the workers use too, so the "
        "result validates on its own)",
    )
    convert.set_defaults(func=_cmd_convert)

    up = sub.add_parser("up", help="validate the fleet, then apply it (pulumi up) with progress")
    up.add_argument("--stack", required=True, help="stack (environment), e.g. local, dev, prod")
    up.add_argument("--fleet-file", default=None, help="fleet file (default stacks/<stack>.yaml)")
    up.add_argument(
        "--yes",
        action="store_true",
        help="delete more than the deletion guard's share of the workers without asking",
    )
    _cluster_objects_flags(up)
    up.add_argument(
        "--rollout-wait",
        type=float,
        default=60.0,
        help="after applying, drive versioned rollouts (gates, routing) for up to this many "
        "seconds (default 60; 0: only what is due now)",
    )
    up.add_argument(
        "--rollout-time-scale",
        type=float,
        default=1.0,
        help="multiply every rollout pause and sunset delay (test beds and demos)",
    )
    up.add_argument(
        "--wait-for-daemon",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="on a stack a daemon manages, how long to wait for its current step (600)",
    )
    _shard_flag(up)
    up.set_defaults(func=_cmd_up)

    preview = sub.add_parser(
        "preview",
        help="what `up` would change, per worker and connection, with the reasons",
    )
    preview.add_argument("--stack", required=True, help="stack (environment) to preview")
    preview.add_argument(
        "--format",
        choices=["text", "markdown", "json"],
        default="text",
        help="text (terminal), markdown (a pull-request comment) or json (docs/preview-json.md)",
    )
    preview.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 2 when something changes (0 nothing changes, 1 error)",
    )
    preview.add_argument(
        "--fleet-file", default=None, help="fleet file (default stacks/<stack>.yaml)"
    )
    _cluster_objects_flags(preview)
    _shard_flag(preview)
    preview.set_defaults(func=_cmd_preview)

    approve = sub.add_parser(
        "approve",
        help="confirm the deletions the daemon holds (DeletionsHeld) for a stack",
    )
    approve.add_argument("--stack", required=True, help="stack whose held deletions to approve")
    approve.set_defaults(func=_cmd_approve)

    status = sub.add_parser("status", help="per-worker phase, replicas, pollers, backlog")
    status.add_argument("--stack", required=True)
    status.add_argument("--output", choices=["table", "json"], default="table")
    status.add_argument(
        "--fleet-file", default=None, help="fleet file (default stacks/<stack>.yaml)"
    )
    _shard_flag(status)
    status.set_defaults(func=_cmd_status)

    shards = sub.add_parser(
        "shards", help="a sharded stack: show the assignment, or move an unsharded stack"
    )
    shards.add_argument("action", choices=["show", "migrate"])
    shards.add_argument("--stack", required=True)
    shards.add_argument(
        "--fleet-file", default=None, help="fleet file (default stacks/<stack>.yaml)"
    )
    shards.set_defaults(func=_cmd_shards)

    run = sub.add_parser(
        "run", help="the daemon: reconcile the stack in a loop (Queue objects, autoscaling)"
    )
    run.add_argument("--stack", required=True, help="stack (environment), e.g. local, dev, prod")
    run.add_argument("--fleet-file", default=None, help="fleet file (default stacks/<stack>.yaml)")
    run.add_argument("--port", type=int, default=None, help="port of /healthz, /metrics (8080)")
    run.add_argument(
        "--status-port", type=int, default=None, help="port of /status on loopback (8081)"
    )
    run.add_argument("--interval", type=float, default=None, help="seconds between iterations")
    run.add_argument("--settings", default=None, help="JSON/YAML file of daemon settings")
    run.add_argument("--leader-elect", action="store_true", help="apply only while holding a Lease")
    run.add_argument("--lease-namespace", default=None, help="namespace of the Lease")
    run.add_argument("--lease-name", default=None, help="name of the Lease")
    run.add_argument("--once", action="store_true", help="run one iteration and exit")
    run.add_argument(
        "--rbac-scope",
        choices=["cluster", "namespaced"],
        default="cluster",
        help="the RBAC the daemon runs under: namespaced reads Secrets by name, never lists them",
    )
    run.set_defaults(func=_cmd_run)

    local = sub.add_parser("local", help="the embedded local environment")
    local.add_argument("action", choices=["up", "down", "env", "status", "smoke"])
    local.add_argument(
        "--dir", default=None, help="state directory (default: .twc in the project root)"
    )
    local.add_argument(
        "--run-workers",
        action="store_true",
        help="run a real temporalio worker process per Running twc pod (up)",
    )
    local.add_argument(
        "--state",
        choices=["file", "postgres"],
        default=None,
        help="up: the Pulumi state backend, a file:// directory or PostgreSQL 15 "
        "(default: what this environment used last, file at first)",
    )
    local.add_argument(
        "--stack",
        default="local",
        help="smoke: run a sample workflow on each worker's task queue of this stack's "
        "fleet file (stacks/<stack>.yaml) and wait for it (default local)",
    )
    local.set_defaults(func=_cmd_local)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
