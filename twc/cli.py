"""The ``twc`` command line (DESIGN §4).

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


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level argument parser with every verb registered."""
    parser = argparse.ArgumentParser(prog="twc", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)

    local = sub.add_parser("local", help="the embedded local environment")
    local.add_argument("action", choices=["up", "down", "env", "status"])
    local.add_argument(
        "--dir", default=None, help="state directory (default: .twc in the project root)"
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
