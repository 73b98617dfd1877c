"""``ObjectOwnership``: twc never takes over an object it did not create.

Its ``check`` refuses objects new to the stack (``Kind namespace/name``: a worker's
Deployments, ServiceAccount, PodDisruptionBudget, DLQ StatefulSet and Service, the
credential copies and the Queue objects twc creates) with ``ObjectExists`` when one of
them exists and twc did not create it for this stack (:func:`twc.builders.foreign_owner`).
"""

from __future__ import annotations

from typing import Any

from pulumi import Input, ResourceOptions, dynamic

OBJECT_EXISTS = "ObjectExists"
"""The reason of a refused adoption."""


def _foreign(stack: str, objects: list[str]) -> list[str]:
    from twc.builders import foreign_owner
    from twc.kube.client import kube_client
    from twc.kube.workloads import read_object

    found: list[str] = []
    with kube_client() as kube:
        for entry in objects:
            kind, _, key = entry.partition(" ")
            namespace, _, name = key.partition("/")
            obj = read_object(kube, kind, namespace, name)
            why = foreign_owner(obj, stack) if obj is not None else None
            if why is not None:
                found.append(f"{entry} exists and was {why}")
    return found


def _recorded(olds: dict[str, Any]) -> set[str]:
    """The objects an earlier run recorded (a state from before ``objects``: its workers')."""
    workers = olds.get("workers") or []
    kinds = ("Deployment", "ServiceAccount")
    return set(olds.get("objects") or []) | {f"{k} {w}" for w in workers for k in kinds}


class ObjectOwnershipProvider(dynamic.ResourceProvider):
    """Dynamic provider behind :class:`ObjectOwnership`."""

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        objects = news.get("objects")
        if not isinstance(objects, list) or not all(isinstance(o, str) for o in objects):
            failure = dynamic.CheckFailure("objects", "must be a list of 'Kind namespace/name'")
            return dynamic.CheckResult(news, [failure])
        added = sorted(set(objects) - _recorded(olds))
        taken = _foreign(str(news.get("stack") or ""), added) if added else []
        if not taken:
            return dynamic.CheckResult(news, [])
        message = (
            f"{OBJECT_EXISTS}: {'; '.join(taken)}; twc does not take over objects it did "
            "not create: rename the worker or queue, or delete or relabel the object"
        )
        return dynamic.CheckResult(news, [dynamic.CheckFailure("objects", message)])

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(id_="ownership", outs=dict(props))

    def diff(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> dynamic.DiffResult:
        # Nothing outside ever changes: a "same" step records the new list anyway.
        return dynamic.DiffResult(changes=False, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(outs=dict(news))

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        inputs = {"stack": props.get("stack"), "objects": props.get("objects")}
        return dynamic.ReadResult(id_=id_, outs=dict(props), inputs=inputs)


class ObjectOwnership(dynamic.Resource, module="twc", name="ObjectOwnership"):
    """The objects the stack creates; refuses new ones someone else made."""

    def __init__(
        self,
        name: str,
        *,
        stack: Input[str],
        objects: Input[list[str]],
        opts: ResourceOptions | None = None,
    ) -> None:
        props = {"stack": stack, "objects": objects}
        super().__init__(ObjectOwnershipProvider(), name, props, opts)
