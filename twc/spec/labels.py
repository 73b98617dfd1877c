"""The stack label: on everything twc creates, the one way every entry point tells a
stack's objects from another stack's (and from a user's).

It lives at the bottom layer because the builders (Deployments, ServiceAccounts), the
native views (generated TemporalWorker objects), the stack's record (a ConfigMap) and the
pod-template rules (a template may not set it) all name it, and none of them may import
the others.
"""

from __future__ import annotations

from typing import Final

__all__ = ["STACK_LABEL"]

STACK_LABEL: Final = "twc.temporal.io/stack"
"""The stack an object belongs to; only that stack's daemon and commands change or
delete it."""
