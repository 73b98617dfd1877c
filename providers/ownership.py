"""``ObjectOwnership``: twc never takes over a Deployment or ServiceAccount it did not create.

The Kubernetes provider creates objects with server-side apply, which *adopts* an object
that already exists (an upsert; the daemon relies on it to adopt the objects it applied
ahead of the engine, and those a killed run created but never recorded). Adopting a
user's own Deployment that happens to have a worker's name would silently take it over.
So one resource per stack lists the stack's workers, and every worker's ServiceAccount
and Deployment wait for it. Its ``check`` runs on every preview and ``up`` (a dry run
included): for each worker new to the stack (not in the resource's previous inputs) it
reads the worker's Deployment and ServiceAccount, and refuses with ``ObjectExists`` when
one exists that twc did not create (:func:`twc.builders.foreign_owner`). Workers the
stack already holds are never read again, so this costs nothing once they exist.
"""

from __future__ import annotations

from typing import Any

from pulumi import Input, ResourceOptions
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

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


class ObjectOwnershipProvider(ResourceProvider):
    """Dynamic provider behind :class:`ObjectOwnership`."""

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        workers = news.get("workers")
        if not isinstance(workers, list) or not all(isinstance(w, str) for w in workers):
            return CheckResult(news, [CheckFailure("workers", "must be a list of worker keys")])
        known = set(olds.get("workers") or [])
        added = sorted(set(workers) - known)
        if not added:
            return CheckResult(news, [])
        taken = _foreign(str(news.get("stack") or ""), added)
        if taken:
            message = (
                f"{OBJECT_EXISTS}: {'; '.join(taken)}; twc does not take over objects it did "
                "not create: rename the worker, or delete or relabel the object"
            )
            return CheckResult(news, [CheckFailure("workers", message)])
        return CheckResult(news, [])

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_="ownership", outs=dict(props))

    def diff(self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]) -> DiffResult:
        # Nothing outside ever changes: a "same" step records the new list anyway, and
        # a preview never shows this resource updating when workers come or go.
        return DiffResult(changes=False, replaces=[], delete_before_replace=False)

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=dict(news))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # Nothing outside: refresh finds no drift.
        inputs = {"stack": props.get("stack"), "workers": props.get("workers")}
        return ReadResult(id_=id_, outs=dict(props), inputs=inputs)


class ObjectOwnership(Resource, module="twc", name="ObjectOwnership"):
    """The stack's workers; refuses a new worker whose objects someone else made."""

    def __init__(
        self,
        name: str,
        *,
        stack: Input[str],
        workers: Input[list[str]],
        opts: ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            ObjectOwnershipProvider(), name, {"stack": stack, "workers": workers}, opts
        )
