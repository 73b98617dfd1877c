"""One stack per cluster object: the objects a stack's ``select`` takes, and refusing
the ones another stack's ``select`` takes too.

A stack whose fleet sets ``select`` publishes it where the other stacks of its control
namespace read it (:data:`STACKS_KEY` in the inputs: one object per stack, its name and
its selector). Of the Queue and TemporalWorker objects it observes, it takes
those its selector selects; one that another stack's selector selects too is refused
(``StackConflict``, naming that stack) by both: a new one is left out, one it ran keeps
its last accepted spec, so no worker is applied by two stacks and none is dropped for
it. When the other stacks' selections are unknown, both kinds are unknown (fail closed:
nothing of them is created, changed or deleted).

Pure: the cluster's objects in, the objects taken and the refusals out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twc.desired._inputs import QUEUE_KIND_KEY, WORKER_KIND_KEY, ObjectList, object_key
from twc.desired._merge import Rejection, queue_native, worker_native
from twc.errors import Reason
from twc.native.objects import NativeObject
from twc.native.views import is_view
from twc.spec import StackSelector

__all__ = ["OWN_STACK", "STACKS_KEY", "taken_objects"]

STACKS_KEY = "Stack.twc.temporal.io"
"""Inputs key of the stacks' selections: objects ``{metadata: {name: <stack>}, spec:
<select>}``, this stack's own marked with the annotation :data:`OWN_STACK`."""
OWN_STACK = "twc.temporal.io/this-stack"
"""Marks this stack's own entry among :data:`STACKS_KEY` (it names it in refusals)."""

_NATIVE: Mapping[str, Callable[[Mapping[str, Any]], NativeObject]] = {
    QUEUE_KIND_KEY: queue_native,
    WORKER_KIND_KEY: worker_native,
}


def _meta(obj: Mapping[str, Any]) -> tuple[str | None, Mapping[str, str]]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace"), meta.get("labels") or {}


def _own(obj: Mapping[str, Any]) -> bool:
    return OWN_STACK in ((obj.get("metadata") or {}).get("annotations") or {})


def taken_objects(
    select: StackSelector | None,
    cluster: Mapping[str, ObjectList],
    accepted: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, ObjectList], dict[str, list[Rejection]]]:
    """The Queue and TemporalWorker objects this stack takes, and those it refuses.

    Args:
        select: The stack's selector; ``None`` takes every object (nothing refused).
        cluster: The observed objects per kind key, with :data:`STACKS_KEY`.
        accepted: The last accepted spec per kind key and object key.

    Returns:
        The observation to merge, and per kind key the objects refused.
    """
    if select is None:
        return dict(cluster), {}
    out = dict(cluster)
    stacks = cluster.get(STACKS_KEY) or ObjectList.unknown("not observed")
    if stacks.objects is None:
        why = f"other stacks' selections unknown: {stacks.failure}"
        out.update({key: ObjectList.unknown(why) for key in _NATIVE})
        return out, {}
    mine = [o for o in stacks.objects if _own(o)]
    own = object_key(mine[0]) if mine else "this stack"
    others = [
        (object_key(o), StackSelector.model_validate(o.get("spec") or {}))
        for o in stacks.objects
        if o not in mine
    ]
    refused: dict[str, list[Rejection]] = {}
    for key, native in _NATIVE.items():
        found = cluster.get(key)
        if found is None or found.objects is None:
            continue
        kept = []
        for obj in found.objects:
            namespace, labels = _meta(obj)
            if is_view(obj):
                kept.append(obj)
                continue
            if not select.selects(namespace, labels):
                continue
            rivals = sorted(name for name, sel in others if sel.selects(namespace, labels))
            if not rivals:
                kept.append(obj)
                continue
            last = accepted.get(key, {}).get(object_key(obj))
            if last is not None:
                kept.append(dict(last))
            names = ", ".join(sorted({own, *rivals}))
            message = f"selected by stacks {names}: exactly one stack may take it"
            refused.setdefault(key, []).append(
                Rejection(native(obj), Reason.STACK_CONFLICT.value, message, kept=last is not None)
            )
        out[key] = ObjectList.model_construct(objects=tuple(kept), failure=None)
    return out, refused
