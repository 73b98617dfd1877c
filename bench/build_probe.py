"""One program build under Pulumi mocks, measured in a fresh process.

``python -m bench.build_probe FLEET_FILE`` loads the fleet, runs
:func:`twc.program.build` under mocks until every registration settled, and
prints one JSON line: import, load and build wall times and the peak RSS (``ru_maxrss``)
before and after the build. A fresh process per measurement keeps the peak honest.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

T_START = time.perf_counter()

import pulumi  # noqa: E402
import pulumi.runtime  # noqa: E402
from pulumi.runtime.mocks import run_pulumi_func  # type: ignore[attr-defined]  # noqa: E402
from pulumi.runtime.settings import SETTINGS  # noqa: E402
from pulumi.runtime.sync_await import _sync_await  # noqa: E402

from twc.connections import default_registry  # noqa: E402
from twc.desired import DesiredInputs, desired_fleet  # noqa: E402
from twc.program import ProgramOptions, build  # noqa: E402
from twc.spec import load_fleet_file  # noqa: E402

T_IMPORTED = time.perf_counter()


class CountingMocks(pulumi.runtime.Mocks):
    """Echo inputs as outputs; dynamic resources get plausible outputs without any I/O."""

    def __init__(self) -> None:
        self.count = 0

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.count += 1
        outputs = dict(args.inputs)
        outputs.pop("__provider", None)
        if args.typ.endswith("TaskQueueCheck"):
            outputs.update(pollers=0, approximateBacklog=0, condition={})
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None


def _max_rss_mb() -> float:
    # Linux reports kilobytes.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str]) -> int:
    fleet_file = argv[0]
    t0 = time.perf_counter()
    fleet = load_fleet_file(fleet_file)
    t1 = time.perf_counter()
    rss_before = _max_rss_mb()
    mocks = CountingMocks()
    pulumi.runtime.set_mocks(mocks, preview=False)
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()

    def program() -> None:
        desired = desired_fleet(
            fleet, DesiredInputs(), registry=default_registry(), file=fleet_file
        )
        statuses = build(
            desired,
            file=fleet_file,
            options=ProgramOptions(),
            read_secret=lambda _ns, _name: None,
        )
        _sync_await(pulumi.Output.all(*statuses.values()).future())

    t2 = time.perf_counter()
    _sync_await(run_pulumi_func(program))
    t3 = time.perf_counter()
    print(
        json.dumps(
            {
                "import_s": T_IMPORTED - T_START,
                "load_s": t1 - t0,
                "build_s": t3 - t2,
                "resources": mocks.count,
                "maxrss_before_mb": rss_before,
                "maxrss_mb": _max_rss_mb(),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
