"""One stack per cluster object: a stack takes the Queue and TemporalWorker objects its
``select`` selects; one another stack selects too is refused by both (``StackConflict``; one
it ran keeps its last accepted spec). Unknown selections make both kinds unknown."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twc.desired._inputs import QUEUE_KIND_KEY, WORKER_KIND_KEY, ObjectList, object_key
from twc.desired._merge import Rejection, queue_native
from twc.errors import Reason
from twc.native.objects import NativeObject, worker_native
from twc.native.views import is_view
from twc.spec import StackSelector

STACKS_KEY = "Stack.twc.temporal.io"
"""Inputs key of the stacks' selections: ``{metadata: {name: <stack>}, spec: <select>}``."""
OWN_STACK = "twc.temporal.io/this-stack"
"""Annotation marking this stack's own entry among :data:`STACKS_KEY`."""

_NATIVE: Mapping[str, Callable[[Mapping[str, Any]], NativeObject]] = {
    QUEUE_KIND_KEY: queue_native,
    WORKER_KIND_KEY: worker_native,
}


def _meta(obj: Mapping[str, Any], key: str) -> Any:
    return (obj.get("metadata") or {}).get(key)


def taken_objects(
    select: StackSelector | None,
    cluster: Mapping[str, ObjectList],
    accepted: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, ObjectList], dict[str, list[Rejection]]]:
    """The observation to merge, and per kind key the objects refused (``select`` ``None``
    takes every object)."""
    if select is None:
        return dict(cluster), {}
    out = dict(cluster)
    stacks = cluster.get(STACKS_KEY) or ObjectList.unknown("not observed")
    if stacks.objects is None:
        why = f"other stacks' selections unknown: {stacks.failure}"
        out.update({key: ObjectList.unknown(why) for key in _NATIVE})
        return out, {}
    mine = [o for o in stacks.objects if OWN_STACK in (_meta(o, "annotations") or {})]
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
            namespace, labels = _meta(obj, "namespace"), _meta(obj, "labels") or {}
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
