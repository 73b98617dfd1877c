"""``ObjectOwnership``: twc never takes over a Deployment or ServiceAccount it did not create.

Its ``check`` refuses a worker new to the stack with ``ObjectExists`` when one of its
objects exists that twc did not create (:func:`twc.builders.foreign_owner`).
"""

from __future__ import annotations

from typing import Any

from pulumi import Input, ResourceOptions, dynamic

OBJECT_EXISTS = "ObjectExists"
"""The reason of a refused adoption."""


def _foreign(stack: str, keys: list[str]) -> list[str]:
    from twc.builders import foreign_owner
    from twc.kube.client import kube_client
    from twc.kube.workloads import ObjectRef, Workloads

    found: list[str] = []
    with kube_client() as kube:
        workloads = Workloads(kube, stack=stack)
        for key in keys:
            namespace, _, name = key.partition("/")
            for kind in ("Deployment", "ServiceAccount"):
                obj = workloads.read(ObjectRef(kind, namespace, name))
                why = foreign_owner(obj, stack) if obj is not None else None
                if why is not None:
                    found.append(f"{kind} {key} exists and was {why}")
    return found


class ObjectOwnershipProvider(dynamic.ResourceProvider):
    """Dynamic provider behind :class:`ObjectOwnership`."""

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        workers = news.get("workers")
        if not isinstance(workers, list) or not all(isinstance(w, str) for w in workers):
            return dynamic.CheckResult(
                news, [dynamic.CheckFailure("workers", "must be a list of worker keys")]
            )
        added = sorted(set(workers) - set(olds.get("workers") or []))
        taken = _foreign(str(news.get("stack") or ""), added) if added else []
        if not taken:
            return dynamic.CheckResult(news, [])
        message = (
            f"{OBJECT_EXISTS}: {'; '.join(taken)}; twc does not take over objects it did "
            "not create: rename the worker, or delete or relabel the object"
        )
        return dynamic.CheckResult(news, [dynamic.CheckFailure("workers", message)])

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(id_="ownership", outs=dict(props))

    def diff(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> dynamic.DiffResult:
        # Nothing outside ever changes: a "same" step records the new list anyway.
        return dynamic.DiffResult(changes=False, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(outs=dict(news))

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        inputs = {"stack": props.get("stack"), "workers": props.get("workers")}
        return dynamic.ReadResult(id_=id_, outs=dict(props), inputs=inputs)


class ObjectOwnership(dynamic.Resource, module="twc", name="ObjectOwnership"):
    """The stack's workers; refuses a new worker whose objects someone else made."""

    def __init__(
        self,
        name: str,
        *,
        stack: Input[str],
        workers: Input[list[str]],
        opts: ResourceOptions | None = None,
    ) -> None:
        props = {"stack": stack, "workers": workers}
        super().__init__(ObjectOwnershipProvider(), name, props, opts)
