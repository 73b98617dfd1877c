"""The stack label: on everything twc creates, the one way every entry point tells a
stack's objects from another stack's (and from a user's).

It lives at the bottom layer because the builders, the native views, the stack's record
and the pod-template rules all name it, and none of them may import the others.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["SHARD_SUFFIX", "STACK_LABEL", "owner_stack"]

STACK_LABEL: Final = "twc.temporal.io/stack"
"""The stack an object belongs to; only that stack's daemon and commands change or
delete it."""

SHARD_SUFFIX: Final = re.compile(r"^(?P<base>.+)\.s(?P<index>\d{2,})$")
"""A shard stack's name: ``<stack>.s<NN>``."""


def owner_stack(stack: str) -> str:
    """The stack whose objects a Pulumi stack's are: a shard stack's are its base
    stack's (moving a stack to shards, or a namespace between them, changes no owner
    and so no label); any other stack owns its own."""
    found = SHARD_SUFFIX.match(stack)
    return found["base"] if found else stack
