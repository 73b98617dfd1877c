"""The stack label, on everything twc creates: it tells a stack's objects from others."""

from __future__ import annotations

import re
from typing import Final

STACK_LABEL: Final = "twc.temporal.io/stack"
SHARD_SUFFIX: Final = re.compile(r"^(?P<base>.+)\.s(?P<index>\d{2,})$")
"""A shard stack's name: ``<stack>.s<NN>``."""


def owner_stack(stack: str) -> str:
    """The stack owning a Pulumi stack's objects: a shard's base stack, else itself."""
    found = SHARD_SUFFIX.match(stack)
    return found["base"] if found else stack
