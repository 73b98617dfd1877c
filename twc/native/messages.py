"""What a failed engine run may tell the tenants of one worker.

Events and TemporalWorker status are read by everyone who can read their namespace. The
engine's output is the whole stack's: its progress and diagnostics name every tenant's
resources. So an object hears only about itself: the first error line the engine
reported on *that worker's* resources (the component ``<namespace>/<name>`` and its
children ``<namespace>/<name>-…``), with URNs shortened to the resource's name; when the
failure was elsewhere, or the program refused the stack's input, a fixed sentence that
names nothing.

Pure: text in, text out.
"""

from __future__ import annotations

import re

__all__ = ["ELSEWHERE", "REFUSED", "worker_failure"]

ELSEWHERE = (
    "the stack's update failed on resources other than this worker's; nothing of this "
    "worker changed, the update is retried"
)
"""What a worker hears about a failure that was not on its resources."""
REFUSED = (
    "the program refused the stack's desired state (the fleet or another object is "
    "invalid); nothing was changed"
)
"""What a worker hears when the program refused its whole input."""

_HEADER = re.compile(r"^ {2}(?P<type>\S+) \((?P<name>[^)]+)\):\s*$")
_URN = re.compile(r"urn:pulumi:[^\s\"']*::(?P<name>[^\s\"']+)")
_LIMIT = 400


def worker_failure(text: str, worker: str, *, refused: bool = False) -> str:
    """The part of a failed engine run's text about ``worker``'s own resources.

    Args:
        text: The engine's error text (the CommandError: stdout and stderr).
        worker: The worker, ``<namespace>/<name>``.
        refused: The program refused its input (no resource was touched).

    Returns:
        One line for the worker's Event and status.
    """
    if refused:
        return REFUSED
    ours = False
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header is not None:
            name = header["name"]
            ours = name == worker or name.startswith(f"{worker}-")
            continue
        if not ours:
            continue
        stripped = line.strip()
        if not stripped:
            ours = False
            continue
        if "error:" in stripped:
            found = stripped.split("error:", 1)[1].strip()
            found = _URN.sub(lambda m: m["name"], found)
            return f"the update failed on this worker's resources: {found[:_LIMIT]}"
    return ELSEWHERE
