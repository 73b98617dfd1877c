"""What a failed engine run may tell one worker's tenants: the first error line about its
own resources, else a fixed sentence that names nothing (its namespace reads it). Pure."""

from __future__ import annotations

import re

ELSEWHERE = (
    "the stack's update failed on resources other than this worker's; nothing of this "
    "worker changed, the update is retried"
)
REFUSED = (
    "the program refused the stack's desired state (the fleet or another object is "
    "invalid); nothing was changed"
)

_HEADER = re.compile(r"^ {2}(?P<type>\S+) \((?P<name>[^)]+)\):\s*$")
_URN = re.compile(r"urn:pulumi:[^\s\"']*::(?P<name>[^\s\"']+)")
_LIMIT = 400


def worker_failure(text: str, worker: str, *, refused: bool = False) -> str:
    """One line for ``worker``'s (``<namespace>/<name>``) Event from a failed run's ``text``."""
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
